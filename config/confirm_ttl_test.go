package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestConfirmTTL: confirm_ttl is a duration per agent; an agent without
// one has none (the server's --confirmation-ttl applies).
func TestConfirmTTL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rein.yaml")
	text := "agents:\n  default:\n    confirm_ttl: 1h30m\n  other: {}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c := load(t, file)
	if got := c.Agents["default"].ConfirmTTL; got != 90*time.Minute {
		t.Fatalf("default's ConfirmTTL = %v, want 1h30m", got)
	}
	if got := c.Agents["other"].ConfirmTTL; got != 0 {
		t.Fatalf("other's ConfirmTTL = %v, want 0 (none of its own)", got)
	}
}
