package scripted

import (
	"os"
	"strings"
	"testing"
)

// The scripts docs/models.md shows users load as they are: every yaml
// block of its scripted-model and prices sections is a valid script.
func TestDocsScriptsLoad(t *testing.T) {
	doc, err := os.ReadFile("../../docs/models.md")
	if err != nil {
		t.Fatal(err)
	}
	rest, n := string(doc), 0
	for {
		i := strings.Index(rest, "```yaml\nrules:")
		if i < 0 {
			break
		}
		block := rest[i+len("```yaml\n"):]
		end := strings.Index(block, "```")
		if end < 0 {
			t.Fatal("an unclosed yaml block in docs/models.md")
		}
		if _, err := Parse("docs/models.md", []byte(block[:end])); err != nil {
			t.Errorf("script %d of docs/models.md: %v", n+1, err)
		}
		rest, n = block[end:], n+1
	}
	if n < 3 {
		t.Fatalf("found %d scripts in docs/models.md, want the format, the examples and the usage one", n)
	}
}
