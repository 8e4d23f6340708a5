package sessions

import "testing"

// Caller-chosen ids never share a workspace folder, and server-made ones
// keep theirs.
func TestSessionDirDistinct(t *testing.T) {
	ids := []string{"a:b", "a_b", "a-b", "a.b", ".", "..", "_.", "%2E", "ses_01M8Y9MPS0N1V5J5NQADZQ3TZ4", "x:", "x_"}
	seen := map[string]string{}
	for _, id := range ids {
		d := sessionDir(id)
		if d == "" || d == "." || d == ".." {
			t.Fatalf("sessionDir(%q) = %q: not a folder of its own", id, d)
		}
		if other, dup := seen[d]; dup {
			t.Fatalf("sessionDir(%q) = sessionDir(%q) = %q", id, other, d)
		}
		seen[d] = id
	}
	if d := sessionDir("ses_01M8Y9MPS0N1V5J5NQADZQ3TZ4"); d != "ses_01M8Y9MPS0N1V5J5NQADZQ3TZ4" {
		t.Fatalf("a server-made id's folder = %q, want the id", d)
	}
}
