package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"testing"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// TestTranslateUnreachableDatabase: a store whose PostgreSQL cannot be
// reached fails with errors the store itself marks store.ErrUnavailable,
// which the API answers 503 store.unavailable and the runner retries; the
// dialect classifies a connection the server ended (what a restart does to
// a session) the same way; other errors stay as they are.
func TestTranslateUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "postgres://soulstack@" + l.Addr().String() + "/postgres?sslmode=disable&connect_timeout=5"
	l.Close() // nothing listens there now
	db, err := sql.Open("pgx", dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := sqlstore.New(db, postgres.Dialect, sqlstore.WithAuditKey(testdb.AuditKey))
	_, err = st.ProviderGet(ctx, "x")
	if err == nil {
		t.Fatal("a read on an unreachable database succeeded")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("connection refused returned %v, want store.ErrUnavailable", err)
	}

	// The server ends the connection (what a restart does to a session).
	live := testdb.Postgres.Open(t)
	conn, err := live.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := live.DB().ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, `SELECT 1`)
	if err == nil {
		t.Fatal("a terminated connection still answered")
	}
	if got := postgres.Dialect.Classify(err); got != sqlstore.Unavailable {
		t.Fatalf("terminated connection (%v) classified %v, want sqlstore.Unavailable", err, got)
	}

	// A plain not-found stays what it is.
	_, err = live.ProviderGet(ctx, "missing")
	if errors.Is(err, store.ErrUnavailable) || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("not found returned %v", err)
	}
}
