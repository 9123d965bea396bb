package main

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the client side free of the server: soulctl, its commands
// and the API client must not link the keeper, its API handlers, its store
// or any database driver.
func TestDeps(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		"github.com/soulstack/soulstack/internal/store",
		"github.com/soulstack/soulstack/internal/api",
		"github.com/soulstack/soulstack/internal/keeper",
		"github.com/danielgtaylor/huma",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
	}
	for _, pkg := range []string{
		"github.com/soulstack/soulstack/client",
		"github.com/soulstack/soulstack/internal/cli",
		"github.com/soulstack/soulstack/cmd/soulctl",
	} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			deptest.Forbid(t, pkg, forbidden...)
		})
	}
}
