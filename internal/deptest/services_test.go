package deptest_test

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestServicesStayBelowTheWiring keeps the keeper's services below the
// HTTP layer and the wiring: the API, MCP and the keeper call them, they
// never call back into those, and they see the registry only through the
// part each declares, never the SQL store itself.
func TestServicesStayBelowTheWiring(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"runner", "drift", "seeding", "access", "approval"} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			deptest.Forbid(t, "github.com/soulstack/soulstack/internal/"+pkg,
				"github.com/soulstack/soulstack/internal/api",
				"github.com/soulstack/soulstack/internal/mcp",
				"github.com/soulstack/soulstack/internal/keeper",
				"github.com/soulstack/soulstack/internal/store/sqlstore",
			)
		})
	}
}
