// Package testdb gives tests a fresh, migrated registry database on each
// backend: SQLite in a temp dir, and a new database on the PostgreSQL server
// named by SOULSTACK_TEST_POSTGRES (scripts/test starts one).
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
)

// EnvPostgres names the environment variable with the URL of a PostgreSQL
// server on which tests may create and drop databases.
const EnvPostgres = "SOULSTACK_TEST_POSTGRES"

// Backend opens a fresh, migrated store for one test; BreakAudit makes every
// later audit insert fail inside the database, to prove that a mutation
// whose audit write fails changes nothing.
type Backend struct {
	Name       string
	Open       func(t testing.TB, opts ...sqlstore.Option) *sqlstore.Store
	URL        func(t testing.TB) string // a fresh database URL (or SQLite path) for a keeper process
	BreakAudit func(t testing.TB, db *sql.DB)
	// Migrate applies the backend's pending migrations to db.
	Migrate func(ctx context.Context, db *sql.DB) ([]int64, error)
}

// AuditKey is the audit key every store Open returns is opened with,
// unless the test passes its own sqlstore.WithAuditKey.
var AuditKey = func() *audit.Key {
	k, err := audit.DeriveKey([]byte("soulstack test audit root key 32"))
	if err != nil {
		panic(err)
	}
	return k
}()

func withAuditKey(opts []sqlstore.Option) []sqlstore.Option {
	return append([]sqlstore.Option{sqlstore.WithAuditKey(AuditKey)}, opts...)
}

// Backends returns SQLite and PostgreSQL. Without SOULSTACK_TEST_POSTGRES
// the test fails: PostgreSQL is part of the suite, not optional.
func Backends() []Backend { return []Backend{SQLite, Postgres} }

// SQLite is the embedded backend.
var SQLite = Backend{
	Name: "sqlite",
	Open: func(t testing.TB, opts ...sqlstore.Option) *sqlstore.Store {
		t.Helper()
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "keeper.db"), withAuditKey(opts)...)
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
	URL:     func(t testing.TB) string { return "" },
	Migrate: sqlite.Migrate,
	BreakAudit: func(t testing.TB, db *sql.DB) {
		t.Helper()
		if _, err := db.Exec(`CREATE TRIGGER audit_down BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'audit store unavailable'); END`); err != nil {
			t.Fatalf("break audit: %v", err)
		}
	},
}

// Postgres is the production backend.
var Postgres = Backend{
	Name: "postgres",
	Open: func(t testing.TB, opts ...sqlstore.Option) *sqlstore.Store {
		t.Helper()
		s, err := postgres.Open(context.Background(), FreshPostgres(t), withAuditKey(opts)...)
		if err != nil {
			t.Fatalf("open postgres: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
	URL:     func(t testing.TB) string { return FreshPostgres(t) },
	Migrate: postgres.Migrate,
	BreakAudit: func(t testing.TB, db *sql.DB) {
		t.Helper()
		for _, q := range []string{
			`CREATE FUNCTION audit_down() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit store unavailable'; END $$`,
			`CREATE TRIGGER audit_down BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION audit_down()`,
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("break audit: %v", err)
			}
		}
	},
}

// FreshPostgres creates an empty database on the test server and returns
// its URL; the database is dropped when the test ends.
func FreshPostgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvPostgres)
	if base == "" {
		t.Fatalf("%s is not set: run scripts/test, which starts PostgreSQL, or point it at a server where tests may create databases", EnvPostgres)
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("open %s: %v", EnvPostgres, err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "soulstack_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		a, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer a.Close()
		_, _ = a.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvPostgres, err)
	}
	u.Path = "/" + name
	return u.String()
}
