package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/config"
)

func TestSSHPoolSettings(t *testing.T) {
	t.Parallel()
	if c := (config.Config{}).WithDefaults(); c.SSH.IdleTimeout.Std() != 60*time.Second || c.SSH.MaxIdle != 1000 || c.Validate() != nil {
		t.Fatalf("ssh defaults %+v (validate %v), want 60s and 1000", c.SSH, c.Validate())
	}
	for _, tc := range []struct {
		yml, loadErr, want string
	}{
		{"ssh:\n  idle_timeout: 90s\n  max_idle: 5\n", "", ""},
		{"ssh:\n  idle_timeout: soon\n", `[2:17] "soon" is not a duration`, ""},
		{"ssh:\n  idle_timeout: -1s\n", "", `ssh.idle_timeout: -1s is not a positive duration`},
		{"ssh:\n  max_idle: -3\n", "", "ssh.max_idle: -3 must be at least 1"},
	} {
		path := filepath.Join(t.TempDir(), "keeper.yml")
		if err := os.WriteFile(path, []byte(tc.yml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if tc.loadErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.loadErr) {
				t.Errorf("%q: load = %v, want %q", tc.yml, err, tc.loadErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: load: %v", tc.yml, err)
		}
		err = c.WithDefaults().Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.yml, err)
		case tc.want == "" && (c.SSH.IdleTimeout.Std() != 90*time.Second || c.SSH.MaxIdle != 5):
			t.Errorf("%q: read %+v", tc.yml, c.SSH)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: validate = %v, want %q", tc.yml, err, tc.want)
		}
	}
}

// An unknown key under ssh: is an error with its position.
func TestSSHUnknownKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keeper.yml")
	if err := os.WriteFile(path, []byte("ssh:\n  idle_timeout: 60s\n  max_idel: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	if err == nil || !strings.Contains(err.Error(), "max_idel") || !strings.Contains(err.Error(), "3:") {
		t.Fatalf("Load = %v, want an error naming max_idel at line 3", err)
	}
}
