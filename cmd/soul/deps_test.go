package main

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the agent free of the server: the soul binary must not
// link the keeper, its API, its store, any database driver or the NATS
// server (it is a NATS client at most).
func TestDeps(t *testing.T) {
	t.Parallel()
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
	deptest.Forbid(t, "github.com/soulstack/soulstack/cmd/soul", forbidden...)
}
