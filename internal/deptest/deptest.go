// Package deptest checks what a package links, for the tests that keep the
// client-side binaries (soulctl, soul, the Terraform provider) free of the
// server side.
package deptest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Forbid fails t when pkg, or anything it imports, is one of forbidden or
// a package under one of them. pkg is an import path, or "." for the
// package under test.
func Forbid(t *testing.T, pkg string, forbidden ...string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go tool not found:", err)
	}
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
		t.Fatalf("go list -deps %s listed only %v", pkg, deps)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, f)
			}
		}
	}
}
