package scripted

import (
	"strings"
	"testing"
)

// TestNotAScript: a file that is not a script at all is said to be so, with
// its line and what it holds, and its content is never echoed (it may be
// anything, a secret included).
func TestNotAScript(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"notes.txt", "hello world\nthis is a README with a secret sk-123\n", "notes.txt:1: not a valid script: a script is a mapping with a rules list, and this file holds a string"},
		{"n.yaml", "42\n", "n.yaml:1: not a valid script: a script is a mapping with a rules list, and this file holds a number"},
		{"l.yaml", "- a\n- b\n", "l.yaml:1: not a valid script: a script is a mapping with a rules list, and this file holds a list"},
	} {
		_, err := Parse(c.name, []byte(c.data))
		if err == nil || err.Error() != c.want {
			t.Errorf("Parse(%s) = %v\nwant %s", c.name, err, c.want)
		}
	}
	// A long value or key is named by its kind or cut short.
	long := strings.Repeat("x", 200)
	_, err := Parse("x.yaml", []byte("rules:\n  - steps: \""+long+"\"\n"))
	if err == nil || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "got a string") {
		t.Errorf("long value: %v", err)
	}
	_, err = Parse("x.yaml", []byte(long+": 1\n"))
	if err == nil || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("long key: %v", err)
	}
}
