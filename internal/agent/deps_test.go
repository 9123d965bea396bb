package agent_test

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the agent, which the soul binary links, free of the
// server side: no keeper, API, store, bus, NATS server or database driver.
func TestDeps(t *testing.T) {
	t.Parallel()
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
			deptest.Forbid(t, pkg, forbidden...)
		})
	}
}
