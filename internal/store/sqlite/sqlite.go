// Package sqlite is the embedded registry backend: a SQLite file through the
// pure-Go modernc.org/sqlite driver (no cgo), with foreign keys enforced,
// WAL journaling and its own embedded migrations.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/soulstack/soulstack/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Dialect is SQLite's part of the shared SQL store.
var Dialect = sqlstore.Dialect{
	Numbered:          false,
	LockHead:          `SELECT seq, hash FROM audit_head WHERE id = 1`, // BEGIN IMMEDIATE already holds the write lock
	Classify:          classify,
	SnapshotIsolation: sql.LevelDefault,
	Queue:             func(db *sql.DB) riverdriver.Driver[*sql.Tx] { return riversqlite.New(db) },
}

func classify(err error) sqlstore.Violation {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return sqlstore.NoViolation
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return sqlstore.UniqueViolation
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKeyViolation
	case sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		// ON DELETE RESTRICT is enforced like a trigger and reports this code.
		if strings.Contains(e.Error(), "FOREIGN KEY constraint failed") {
			return sqlstore.ForeignKeyViolation
		}
	}
	return sqlstore.NoViolation
}

// DSN returns the connection string for the database file at path: foreign
// keys on, WAL, a busy timeout, and write transactions that take the write
// lock at BEGIN so that they never deadlock on upgrade.
func DSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	q.Set("_time_format", "sqlite")
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) and migrates the database file at path.
func Open(ctx context.Context, path string, opts ...sqlstore.Option) (*sqlstore.Store, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	if _, err := Migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return sqlstore.New(db, Dialect, opts...), nil
}

// Migrate applies every pending migration and returns the versions applied.
func Migrate(ctx context.Context, db *sql.DB) ([]int64, error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		return nil, fmt.Errorf("sqlite migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply sqlite migrations: %w", err)
	}
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}
