package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/config"
)

// TestLoadMCP: mcp.allow_writes is read strictly: off unless set, a typo
// under mcp is an error with its position, not a silently open door.
func TestLoadMCP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		yml    string
		writes bool
		err    string
	}{
		{"absent", "listen: 127.0.0.1:0\n", false, ""},
		{"on", "mcp:\n  allow_writes: true\n", true, ""},
		{"off", "mcp:\n  allow_writes: false\n", false, ""},
		{"typo", "mcp:\n  allow_write: true\n", false, "[2:3] unknown field \"allow_write\""},
		{"not a bool", "mcp:\n  allow_writes: yes please\n", false, "[2:17]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "keeper.yml")
			if err := os.WriteFile(p, []byte(tt.yml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(p)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Load error %v, want it to contain %q", err, tt.err)
			case tt.err == "" && c.MCP.AllowWrites != tt.writes:
				t.Fatalf("allow_writes = %v, want %v", c.MCP.AllowWrites, tt.writes)
			}
		})
	}
}
