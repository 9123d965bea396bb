package engine_test

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the engine on the transport seam: it reaches souls through
// transport.Dialer and transport.Agents, never through a transport's own
// package, nor through the SQL store or the keeper that wires it.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.Forbid(t, "github.com/soulstack/soulstack/internal/engine",
		"github.com/soulstack/soulstack/internal/transport/ssh",
		"github.com/soulstack/soulstack/internal/bus",
		"github.com/soulstack/soulstack/internal/store/sqlstore",
		"github.com/soulstack/soulstack/internal/keeper",
		"golang.org/x/crypto/ssh",
	)
}
