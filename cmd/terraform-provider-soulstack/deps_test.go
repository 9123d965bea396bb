package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the provider on the client side: it talks to the keeper
// through the client package only and must not link the keeper, its API
// handlers, its store, its runner or any database driver.
func TestDeps(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	forbidden := []string{
		"github.com/soulstack/soulstack/internal/store",
		"github.com/soulstack/soulstack/internal/api",
		"github.com/soulstack/soulstack/internal/keeper",
		"github.com/soulstack/soulstack/internal/runner",
		"github.com/soulstack/soulstack/internal/engine",
		"github.com/danielgtaylor/huma",
		"github.com/riverqueue/river",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
	}
	pkg := "github.com/soulstack/soulstack/cmd/terraform-provider-soulstack"
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, f)
			}
		}
	}
}
