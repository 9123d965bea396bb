// Package sqlstore implements store.Store once, over database/sql, for both
// SQL backends. A Dialect supplies what differs: placeholders, the row lock
// on the audit chain head and the translation of the driver's constraint
// errors. Packages store/sqlite and store/postgres open the database, run
// their own migrations and hand a Dialect to New.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river/riverdriver"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// Violation is a driver error classified by the dialect.
type Violation int

// Violations a dialect recognises.
const (
	NoViolation Violation = iota
	UniqueViolation
	ForeignKeyViolation
	// Unavailable: the database cannot be reached (down, restarting,
	// connection refused or cut).
	Unavailable
	// StorageFull: the database has no space left.
	StorageFull
)

// Dialect is what differs between the SQL backends.
type Dialect struct {
	// Numbered reports whether placeholders are $1, $2… (PostgreSQL)
	// rather than ? (SQLite).
	Numbered bool
	// LockHead selects the audit chain head (seq, hash) and locks it until
	// the transaction ends, so that mutations append to the chain one at a
	// time.
	LockHead string
	// Classify translates a driver error into a Violation.
	Classify func(error) Violation
	// SnapshotIsolation is the isolation level under which a read-only
	// transaction sees one consistent snapshot.
	SnapshotIsolation sql.IsolationLevel
	// AttributeIs returns a condition on the souls table and its
	// arguments: true when the soul's attribute key is the string value.
	AttributeIs func(key, value string) (string, []any)
	// Queue returns the River driver over the same database, for the
	// durable run queue.
	Queue func(*sql.DB) riverdriver.Driver[*sql.Tx]
}

// Store is the database/sql implementation of store.Store.
type Store struct {
	db      *sql.DB
	dialect Dialect
	now     func() time.Time
	chain   *audit.Key       // seals every audit event
	added   func(audit.Head) // told of each committed event
	sealer  *secret.Sealer   // seals secret config and seed fields; nil: none
	changes *store.Changes   // told of each committed change; nil: none
	follow  func(ctx context.Context, tx *sql.Tx, e store.Audited) error
	secrets *secret.Keeper // masked in audit payloads as well; nil: none
	metrics *writeMetrics  // Collectors
}

var _ store.Store = (*Store)(nil)

// translate is deferred by every exported method: it wraps the error the
// method returns with store.ErrUnavailable or store.ErrStorageFull when
// the dialect classifies the driver error under it so, so that callers
// branch on store sentinels alone and never see a driver's error types.
// Constraint violations are translated where they happen (ErrExists,
// ErrReferenceMissing, ErrInUse), with the object they are about.
func (s *Store) translate(err *error) {
	e := *err
	if e == nil || errors.Is(e, store.ErrUnavailable) || errors.Is(e, store.ErrStorageFull) {
		return
	}
	switch s.dialect.Classify(e) {
	case Unavailable:
		*err = fmt.Errorf("%w: %w", store.ErrUnavailable, e)
	case StorageFull:
		*err = fmt.Errorf("%w: %w", store.ErrStorageFull, e)
	}
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithAuditKey sets the key under which every audit event is hashed.
// Without it the store reads but refuses every mutation, since it could not
// write their audit events.
func WithAuditKey(k *audit.Key) Option { return func(s *Store) { s.chain = k } }

// WithAuditAppended sets a function called with the new chain head after
// each committed audit event (the keeper's checkpointer). It runs after the
// commit, outside the transaction.
func WithAuditAppended(fn func(audit.Head)) Option { return func(s *Store) { s.added = fn } }

// WithChanges has the store publish the changes of each committed
// mutation (store.SoulGone, store.CertRenewed) to c's subscribers, after
// the commit and before the mutating call returns.
func WithChanges(c *store.Changes) Option { return func(s *Store) { s.changes = c } }

// WithFollowUps has fn called with each mutation's audit event inside its
// transaction, after the event is written: what must follow the event even
// if the keeper dies right after the commit is queued there (the outbox).
// An error from fn rolls the mutation back.
func WithFollowUps(fn func(ctx context.Context, tx *sql.Tx, e store.Audited) error) Option {
	return func(s *Store) { s.follow = fn }
}

// WithSecrets has the store mask the keeper's secrets in the audit
// payloads it writes (besides secret-looking keys and token patterns).
func WithSecrets(k *secret.Keeper) Option { return func(s *Store) { s.secrets = k } }

// ErrNoAuditKey is returned by every mutation of a store opened without an
// audit key.
var ErrNoAuditKey = errors.New("the store has no audit key: it cannot write audit events")

// New returns a Store over db, whose schema is already migrated.
func New(db *sql.DB, d Dialect, opts ...Option) *Store {
	s := &Store{db: db, dialect: d, now: time.Now, metrics: newWriteMetrics()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Queue returns the River driver of the run queue, which lives in the same
// database.
func (s *Store) Queue() riverdriver.Driver[*sql.Tx] { return s.dialect.Queue(s.db) }

// DB returns the underlying database handle.
func (s *Store) DB() *sql.DB { return s.db }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer s.translate(&err)
	return s.db.PingContext(ctx)
}

// Close closes the database.
func (s *Store) Close() (err error) {
	defer s.translate(&err)
	return s.db.Close()
}

// q rewrites ? placeholders for the dialect.
func (s *Store) q(query string) string {
	if !s.dialect.Numbered {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// record is the audit event a mutation asks to append, and the changes
// published once it has committed.
type record struct {
	action  string
	object  string
	payload any
	changes []store.Change
	// project is the project the event is about, empty for a keeper-wide
	// one: a map payload carries it too (hashed), the column says who may
	// read the event.
	project string
}

// mutate runs fn in a transaction that first locks the audit chain head,
// then appends fn's audit record; the mutation and its audit event commit
// together or not at all.
func (s *Store) mutate(ctx context.Context, actor store.Actor, fn func(tx *sql.Tx) (record, error)) error {
	if s.chain == nil {
		return ErrNoAuditKey
	}
	start := time.Now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op

	var head audit.Head
	if err := tx.QueryRowContext(ctx, s.dialect.LockHead).Scan(&head.Seq, &head.Hash); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return errors.New("lock audit head: the chain head row is missing: the audit log was changed outside the keeper (run keeper audit verify)")
		}
		return fmt.Errorf("lock audit head: %w", err)
	}
	rec, err := fn(tx)
	if err != nil {
		return err
	}
	if rec.project == "" {
		rec.project = s.objectsProject(ctx, tx, rec.object)
	}
	if m, ok := rec.payload.(map[string]any); ok && rec.project != "" {
		m["project"] = rec.project
	}
	payload, err := audit.MarshalPayload(s.secrets.Mask(rec.payload))
	if err != nil {
		return err
	}
	ev := audit.Event{At: s.now(), ActorAID: string(actor), Action: rec.action, Object: rec.object, Payload: payload}
	newHead := s.chain.Seal(&ev, head)
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO audit_events (seq, at, actor_aid, action, object, payload, prev_hash, hash, project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		ev.Seq, ev.At, ev.ActorAID, ev.Action, ev.Object, ev.Payload, ev.PrevHash, ev.Hash, rec.project); err != nil {
		return fmt.Errorf("write audit event %s: %w", rec.action, err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`), newHead.Seq, newHead.Hash); err != nil {
		return fmt.Errorf("advance audit head: %w", err)
	}
	if s.follow != nil {
		if err := s.follow(ctx, tx, store.Audited{Action: ev.Action, Object: ev.Object, Project: rec.project, Payload: json.RawMessage(ev.Payload)}); err != nil {
			return fmt.Errorf("queue what follows %s: %w", ev.Action, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit %s: %w", rec.action, err)
	}
	s.metrics.wrote(rec.action, start)
	if s.added != nil {
		s.added(newHead)
	}
	s.changes.Publish(ctx, rec.changes...)
	return nil
}

func limitOf(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}

// projectOf is the project an object is created in: the default one
// when none is named.
func projectOf(p string) string {
	if p == "" {
		return store.DefaultProject
	}
	return p
}

// projectExists fails with ErrReferenceMissing, about the object kind
// key, when project does not exist: checked in the transaction that
// creates the object.
func (s *Store) projectExists(ctx context.Context, tx *sql.Tx, project, kind, key string) error {
	var n int
	err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM projects WHERE name = ?`), project).Scan(&n)
	if err != nil {
		return fmt.Errorf("look up project %q: %w", project, err)
	}
	if n == 0 {
		return &store.Error{Err: store.ErrReferenceMissing, Kind: kind, Key: key, Ref: "project " + project}
	}
	return nil
}

// objectsProject is the project of the audit object named object
// ("soul/<sid>", "run/<id>", "provider/<name>", "profile/<name>"), read
// in tx; empty for other objects and for one that does not exist (any
// more).
func (s *Store) objectsProject(ctx context.Context, tx *sql.Tx, object string) string {
	kind, key, _ := strings.Cut(object, "/")
	table, col := "", ""
	switch kind {
	case "soul":
		table, col = "souls", "sid"
	case "run":
		table, col = "runs", "id"
	case "provider":
		table, col = "providers", "name"
	case "profile":
		table, col = "profiles", "name"
	default:
		return ""
	}
	p, err := s.objectProject(ctx, tx, table, col, key)
	if err != nil {
		return ""
	}
	return p
}

// lockProject takes project's row for the rest of tx (a create's quota is
// counted and the create made under it, so two concurrent creates cannot
// both fit) and returns its quota; an unknown project is
// ErrReferenceMissing about the object kind key.
func (s *Store) lockProject(ctx context.Context, tx *sql.Tx, project, kind, key string) (store.Quota, error) {
	res, err := tx.ExecContext(ctx, s.q(`UPDATE projects SET quota_runs = quota_runs WHERE name = ?`), project)
	if err != nil {
		return store.Quota{}, fmt.Errorf("lock project %q: %w", project, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.Quota{}, &store.Error{Err: store.ErrReferenceMissing, Kind: kind, Key: key, Ref: "project " + project}
	}
	var q store.Quota
	err = tx.QueryRowContext(ctx, s.q(`SELECT quota_vms, quota_vcpus, quota_memory_mb, quota_runs FROM projects WHERE name = ?`), project).
		Scan(&q.VMs, &q.VCPUs, &q.MemoryMB, &q.Runs)
	if err != nil {
		return store.Quota{}, fmt.Errorf("read the quota of project %q: %w", project, err)
	}
	return q, nil
}

// inProject is the condition that keeps a list to project p (with args)
// — nothing when p is empty; shared adds the provider or profile shares
// of that kind.
func inProject(p, shared string) (string, []any) {
	if p == "" {
		return "", nil
	}
	if shared == "" {
		return ` AND project = ?`, []any{p}
	}
	return ` AND (project = ? OR name IN (SELECT name FROM project_shares WHERE kind = '` + shared + `' AND project = ?))`, []any{p, p}
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullTime(t *time.Time) sql.NullTime {
	if t == nil {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: t.UTC(), Valid: true}
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

func jsonText(b []byte) string {
	if len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// notFound wraps sql.ErrNoRows as the store's sentinel.
func notFound(err error, kind, key string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return &store.Error{Err: store.ErrNotFound, Kind: kind, Key: key}
	}
	return fmt.Errorf("%s %q: %w", kind, key, err)
}

// deleted turns a zero row count into ErrNotFound.
func deleted(res sql.Result, kind, key string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	if n == 0 {
		return &store.Error{Err: store.ErrNotFound, Kind: kind, Key: key}
	}
	return nil
}

// stamp is the current time at the precision both backends store
// (microseconds, UTC), so that what a create returns equals what a get reads.
func (s *Store) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
