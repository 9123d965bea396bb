package agent_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the agent, which the soul binary links, free of the
// server side: no keeper, API, store, bus, NATS server or database driver.
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
		"github.com/soulstack/soulstack/internal/bus",
		"github.com/soulstack/soulstack/internal/engine",
		"github.com/nats-io/nats-server",
		"github.com/danielgtaylor/huma",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
	}
	for _, pkg := range []string{
		"github.com/soulstack/soulstack/internal/agent",
		"github.com/soulstack/soulstack/internal/agent/wire",
	} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
			if err != nil {
				var stderr []byte
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					stderr = ee.Stderr
				}
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 10 {
				t.Fatalf("go list -deps %s listed %d packages", pkg, len(deps))
			}
			for _, dep := range deps {
				for _, f := range forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, f)
					}
				}
			}
		})
	}
}
