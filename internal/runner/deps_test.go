package runner_test

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the runner service below the HTTP layer and the wiring: it
// is called by them, never calls back into them, and sees the registry
// only through the part it declares.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.Forbid(t, "github.com/soulstack/soulstack/internal/runner",
		"github.com/soulstack/soulstack/internal/api",
		"github.com/soulstack/soulstack/internal/mcp",
		"github.com/soulstack/soulstack/internal/keeper",
		"github.com/soulstack/soulstack/internal/store/sqlstore",
	)
}
