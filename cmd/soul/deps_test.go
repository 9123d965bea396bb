package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the agent free of the server: the soul binary must not
// link the keeper, its API, its store, any database driver or the NATS
// server (it is a NATS client at most).
func TestDeps(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go tool not found:", err)
	}
	forbidden := []string{
		"github.com/soulstack/soulstack/internal/store",
		"github.com/soulstack/soulstack/internal/api",
		"github.com/soulstack/soulstack/internal/keeper",
		"github.com/soulstack/soulstack/internal/engine",
		"github.com/soulstack/soulstack/internal/runner",
		"github.com/danielgtaylor/huma",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
		"github.com/riverqueue/river",
		"github.com/nats-io/nats-server",
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("cmd/soul depends on %s (forbidden: %s)", dep, f)
			}
		}
	}
}
