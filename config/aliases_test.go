package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/config"
)

// TestMergeBomb: YAML merges (<<) of aliases can name one mapping
// exponentially many times in a few lines — here 10⁸ — which once made
// Parse run for ever; each merge source is read once per path, so the file
// loads at once, with the merged keys.
func TestMergeBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("agents:\n  a0: &a0 {model: \"scripted:x.yaml\", max_steps: 7}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	b.WriteString("  default: {<<: [*a8], system: own}\n")
	start := time.Now()
	c, err := config.Parse("bomb.yaml", []byte(b.String()), options())
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Agents["default"]; d.Model != "scripted:x.yaml" || d.MaxSteps != 7 || d.System != "own" {
		t.Fatalf("default agent %+v", d)
	}
	// A generous bound for a loaded machine: the exponential walk took
	// minutes.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Parse took %v", d)
	}
}
