package main

import (
	"testing"

	"github.com/soulstack/soulstack/internal/deptest"
)

// TestDeps keeps the provider on the client side: it talks to the keeper
// through the client package only and must not link the keeper, its API
// handlers, its store, its runner or any database driver.
func TestDeps(t *testing.T) {
	t.Parallel()
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
	deptest.Forbid(t, "github.com/soulstack/soulstack/cmd/terraform-provider-soulstack", forbidden...)
}
