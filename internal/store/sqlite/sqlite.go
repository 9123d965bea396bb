// Package sqlite is the embedded registry backend: a SQLite file through the
// pure-Go modernc.org/sqlite driver (no cgo), with foreign keys enforced,
// WAL journaling and its own embedded migrations.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"syscall"

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
	AttributeIs:       attributeIs,
	Queue:             func(db *sql.DB) riverdriver.Driver[*sql.Tx] { return riversqlite.New(db) },
}

// attributeIs matches a top-level attribute that is a JSON string; keys
// are compared whole (dots, brackets and quotes in them are literal). At
// 10,000 souls a filter that matches few scans them all: about 10 ms
// (json_extract with a quoted path is no faster).
func attributeIs(key, value string) (string, []any) {
	return `EXISTS (SELECT 1 FROM json_each(souls.attributes) AS a WHERE a.key = ? AND a.type = 'text' AND a.value = ?)`, []any{key, value}
}

func classify(err error) sqlstore.Violation {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		if errors.Is(err, syscall.ENOSPC) {
			return sqlstore.StorageFull
		}
		return sqlstore.NoViolation
	}
	if e.Code()&0xff == sqlite3.SQLITE_IOERR && strings.Contains(e.Error(), "disk is full") {
		return sqlstore.StorageFull
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return sqlstore.UniqueViolation
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKeyViolation
	case sqlite3.SQLITE_FULL:
		return sqlstore.StorageFull
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
// Each connection keeps the statements of its queries prepared (see
// cachingConn).
func Open(ctx context.Context, path string, opts ...sqlstore.Option) (*sqlstore.Store, error) {
	connector, err := sqlite.NewConnector(DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db := sql.OpenDB(cachingConnector{connector})
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
	return sqlstore.Migrate(ctx, db, goose.DialectSQLite3, "sqlite", migrations, "migrations")
}

// cachingConnector opens connections that keep the statements of their
// queries prepared: parsing and planning a statement costs about as much
// CPU as running a small query, and the store runs the same few queries
// over and over.
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(sqliteConn)
	if !ok {
		return conn, nil // not the connection this wrapper knows: use it as it is
	}
	return &cachingConn{sqliteConn: inner, stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what every modernc.org/sqlite connection implements and a
// wrapper must forward, lest database/sql fall back to the methods without
// a context.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// maxCachedStmts bounds the statements a connection keeps; queries beyond
// it are prepared for each use, as without the cache.
const maxCachedStmts = 128

// cachingConn is a connection whose QueryContext runs each query text
// through a statement prepared once and reset after each use. A statement
// whose rows are still open is not shared: a second query with the same
// text meanwhile is prepared for that use alone. Exec and everything else
// go to the connection unchanged, and so do errors, so that the store's
// classification of driver errors sees the driver's own.
type cachingConn struct {
	sqliteConn

	mu    sync.Mutex // database/sql serializes use of a connection; this guards Rows.Close from other goroutines all the same
	stmts map[string]*cachedStmt
}

type cachedStmt struct {
	stmt driver.Stmt
	busy bool // its rows are open
}

// Unwrap returns the driver's connection (modernc.org/sqlite's Limit and
// other helpers look through wrappers with it).
func (c *cachingConn) Unwrap() driver.Conn { return c.sqliteConn }

// QueryContext runs query through its cached statement.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.mu.Lock()
	cs := c.stmts[query]
	if cs == nil && len(c.stmts) < maxCachedStmts {
		st, err := c.sqliteConn.PrepareContext(ctx, query)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if _, ok := st.(driver.StmtQueryContext); !ok {
			st.Close()
			c.mu.Unlock()
			return c.sqliteConn.QueryContext(ctx, query, args)
		}
		cs = &cachedStmt{stmt: st}
		c.stmts[query] = cs
	}
	if cs == nil || cs.busy {
		c.mu.Unlock()
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	cs.busy = true
	c.mu.Unlock()
	rows, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		c.drop(query, cs)
		return nil, err
	}
	return &cachedRows{Rows: rows, conn: c, query: query, stmt: cs}, nil
}

// release makes cs available again after its rows closed cleanly.
func (c *cachingConn) release(cs *cachedStmt) {
	c.mu.Lock()
	cs.busy = false
	c.mu.Unlock()
}

// drop forgets and closes cs after an error, so that the next use of the
// query prepares it afresh.
func (c *cachingConn) drop(query string, cs *cachedStmt) {
	c.mu.Lock()
	if c.stmts[query] == cs {
		delete(c.stmts, query)
	}
	c.mu.Unlock()
	cs.stmt.Close()
}

// Close closes the cached statements, then the connection.
func (c *cachingConn) Close() error {
	c.mu.Lock()
	for q, cs := range c.stmts {
		cs.stmt.Close()
		delete(c.stmts, q)
	}
	c.mu.Unlock()
	return c.sqliteConn.Close()
}

// cachedRows are the rows of a cached statement; closing them resets the
// statement (the driver does that for rows of a prepared statement) and
// makes it available again. The column type methods answer what database/sql
// answers for rows without them when the driver's rows lack them.
type cachedRows struct {
	driver.Rows
	conn  *cachingConn
	query string
	stmt  *cachedStmt
	done  bool
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	if r.done {
		return err
	}
	r.done = true
	if err != nil {
		r.conn.drop(r.query, r.stmt)
	} else {
		r.conn.release(r.stmt)
	}
	return err
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if x, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return x.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *cachedRows) ColumnTypeLength(i int) (int64, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return x.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return x.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return x.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	if x, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return x.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

var (
	_ sqliteConn                            = (*cachingConn)(nil)
	_ driver.RowsColumnTypeScanType         = (*cachedRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*cachedRows)(nil)
	_ driver.RowsColumnTypeLength           = (*cachedRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*cachedRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*cachedRows)(nil)
)

// MigrateTo applies the migrations up to and including version (upgrade
// tests build a database of every earlier schema with it).
func MigrateTo(ctx context.Context, db *sql.DB, version int64) error {
	return sqlstore.MigrateTo(ctx, db, goose.DialectSQLite3, migrations, "migrations", version)
}

// Versions lists the migration versions, in order.
func Versions() ([]int64, error) { return sqlstore.Versions(migrations, "migrations") }
