package sqlite

import "testing"

// The embedded migrations are numbered 1..N without gaps; a misnamed file
// must fail here, not at a user's upgrade.
func TestEmbeddedMigrationsAreContiguous(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || latestVersion() != len(ms) {
		t.Fatalf("%d migrations, latest version %d", len(ms), latestVersion())
	}
	for i, m := range ms {
		if m.version != i+1 || m.sql == "" {
			t.Fatalf("migration %d = %+v", i, m)
		}
	}
}
