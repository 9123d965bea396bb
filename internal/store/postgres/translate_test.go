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
// reached (nothing listens on its port; a live database whose server ends
// the connection) fails with errors that TranslateError marks
// store.ErrUnavailable, which the API answers 503 store.unavailable and
// the runner retries; other errors stay as they are.
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
	if got := st.TranslateError(err); !errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("connection refused translated to %v, want store.ErrUnavailable", got)
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
	if got := live.TranslateError(err); !errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("terminated connection (%v) translated to %v, want store.ErrUnavailable", err, got)
	}

	// A plain not-found stays what it is.
	_, err = live.ProviderGet(ctx, "missing")
	if got := live.TranslateError(err); errors.Is(got, store.ErrUnavailable) || !errors.Is(got, store.ErrNotFound) {
		t.Fatalf("not found translated to %v", got)
	}
}
