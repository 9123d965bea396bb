package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.JoinStore = (*Store)(nil)

func refused(reason, sid, format string, args ...any) error {
	return &store.JoinRefusedError{Reason: reason, SID: sid, Detail: fmt.Sprintf(format, args...)}
}

// SoulJoin consumes a bootstrap token and makes its soul active, in one
// transaction with soul.joined.
func (s *Store) SoulJoin(ctx context.Context, p store.SoulJoinParams) (_ store.Soul, err error) {
	defer s.translate(&err)
	now := s.stamp()
	err = s.mutate(ctx, store.ActorKeeper, func(tx *sql.Tx) (record, error) {
		t, so, err := s.checkJoin(ctx, tx, p)
		if err != nil {
			return record{}, err
		}
		if so.Connection.HostKey == "" {
			so.Connection.HostKey = p.HostKey
		}
		conn, err := json.Marshal(so.Connection)
		if err != nil {
			return record{}, err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE bootstrap_tokens SET status = ? WHERE id = ? AND status = ?`), store.BootstrapUsed, t.ID, store.BootstrapIssued)
		if err != nil {
			return record{}, fmt.Errorf("use bootstrap token: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return record{}, refused(store.JoinTokenUsed, p.SID, "the bootstrap token was already used")
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET status = ?, connection = ?, cert_serial = ?, cert_not_after = ?, joined_at = ?, last_error = '', updated_at = ? WHERE sid = ?`),
			store.SoulActive, string(conn), p.CertSerial, p.CertNotAfter.UTC(), now, now, p.SID); err != nil {
			return record{}, fmt.Errorf("join soul %q: %w", p.SID, err)
		}
		payload := map[string]any{"sid": p.SID, "from": so.Status, "serial": p.CertSerial, "not_after": p.CertNotAfter.UTC().Format(time.RFC3339), "host_key": so.Connection.HostKey}
		for k, v := range p.Audit {
			payload[k] = v
		}
		return record{action: "soul.joined", object: "soul/" + p.SID, payload: payload, changes: []store.Change{store.SoulJoined{SID: p.SID}}}, nil
	})
	if err != nil {
		return store.Soul{}, err
	}
	return s.SoulGet(ctx, p.SID)
}

// JoinCheck reports what SoulJoin would refuse p for, changing nothing.
func (s *Store) JoinCheck(ctx context.Context, p store.SoulJoinParams) (err error) {
	defer s.translate(&err)
	_, _, err = s.checkJoin(ctx, s.db, p)
	return err
}

// RenewCheck reports what SoulRenewCert would refuse p for, changing
// nothing.
func (s *Store) RenewCheck(ctx context.Context, p store.SoulRenewParams) (err error) {
	defer s.translate(&err)
	return s.checkRenew(ctx, s.db, p)
}

// checkRenew refuses a renewal whose soul is gone or destroyed, or whose
// presented certificate (p.OldSerial) is not the soul's current one.
func (s *Store) checkRenew(ctx context.Context, q rowQuerier, p store.SoulRenewParams) error {
	so, err := scanSoul(q.QueryRowContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE sid = ?`), p.SID))
	if errors.Is(err, sql.ErrNoRows) {
		return refused(store.JoinSoulNotFound, p.SID, "no such soul")
	}
	if err != nil {
		return fmt.Errorf("look up soul %q: %w", p.SID, err)
	}
	switch {
	case so.Status == store.SoulDestroyed:
		return refused(store.JoinSoulDestroyed, p.SID, "the soul is destroyed")
	case so.CertSerial == "" || so.CertSerial != p.OldSerial:
		return refused(store.JoinCertRevoked, p.SID, "the presented certificate is not the soul's current one")
	}
	return nil
}

// rowQuerier is a database or a transaction.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkJoin looks p's bootstrap token and soul up through q and returns
// them, or the *JoinRefusedError SoulJoin answers.
func (s *Store) checkJoin(ctx context.Context, q rowQuerier, p store.SoulJoinParams) (store.BootstrapToken, store.Soul, error) {
	var t store.BootstrapToken
	var expires sql.NullTime
	err := q.QueryRowContext(ctx, s.q(`SELECT id, sid, expires_at, status FROM bootstrap_tokens WHERE hash = ?`), p.TokenHash).
		Scan(&t.ID, &t.SID, &expires, &t.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return t, store.Soul{}, refused(store.JoinTokenUnknown, p.SID, "no bootstrap token matches")
	}
	if err != nil {
		return t, store.Soul{}, fmt.Errorf("look up bootstrap token: %w", err)
	}
	switch {
	case t.SID != p.SID:
		return t, store.Soul{}, refused(store.JoinSIDMismatch, p.SID, "the bootstrap token is bound to another soul")
	case t.Status == store.BootstrapUsed:
		return t, store.Soul{}, refused(store.JoinTokenUsed, p.SID, "the bootstrap token was already used")
	case t.Status == store.BootstrapBurned:
		return t, store.Soul{}, refused(store.JoinTokenBurned, p.SID, "the bootstrap token was burned when its soul was destroyed")
	case t.Status != store.BootstrapIssued:
		return t, store.Soul{}, refused(store.JoinTokenUnknown, p.SID, "the bootstrap token is %s", t.Status)
	case expires.Valid && !p.Now.Before(expires.Time):
		return t, store.Soul{}, refused(store.JoinTokenExpired, p.SID, "the bootstrap token expired at %s", expires.Time.UTC().Format(time.RFC3339))
	}
	so, err := scanSoul(q.QueryRowContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE sid = ?`), p.SID))
	if err != nil {
		return t, so, notFound(err, "soul", p.SID)
	}
	if so.Status == store.SoulDestroyed {
		return t, so, refused(store.JoinSoulDestroyed, p.SID, "the soul is destroyed")
	}
	if pinned := so.Connection.HostKey; pinned != "" && !containsKey(p.HostKeys, pinned) {
		return t, so, refused(store.JoinHostKeyMismatch, p.SID, "none of the reported host keys is the one pinned for this soul")
	}
	return t, so, nil
}

// containsKey reports whether keys holds key (type and base64 compared,
// comments ignored).
func containsKey(keys []string, key string) bool {
	for _, k := range keys {
		if sameKey(k, key) {
			return true
		}
	}
	return false
}

func sameKey(a, b string) bool {
	var fa, fb [2]string
	n, _ := fmt.Sscan(a, &fa[0], &fa[1])
	m, _ := fmt.Sscan(b, &fb[0], &fb[1])
	return n == 2 && m == 2 && fa == fb
}

// SoulRenewCert replaces a soul's certificate serial.
func (s *Store) SoulRenewCert(ctx context.Context, p store.SoulRenewParams) (_ store.Soul, err error) {
	defer s.translate(&err)
	now := s.stamp()
	err = s.mutate(ctx, store.ActorKeeper, func(tx *sql.Tx) (record, error) {
		if err := s.checkRenew(ctx, tx, p); err != nil {
			return record{}, err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET cert_serial = ?, cert_not_after = ?, updated_at = ? WHERE sid = ? AND cert_serial = ?`),
			p.CertSerial, p.CertNotAfter.UTC(), now, p.SID, p.OldSerial)
		if err != nil {
			return record{}, fmt.Errorf("renew certificate of soul %q: %w", p.SID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return record{}, refused(store.JoinCertRevoked, p.SID, "the presented certificate is not the soul's current one")
		}
		return record{action: "soul.cert_renewed", object: "soul/" + p.SID, payload: map[string]any{
			"sid": p.SID, "old_serial": p.OldSerial, "serial": p.CertSerial, "not_after": p.CertNotAfter.UTC().Format(time.RFC3339)},
			changes: []store.Change{store.CertRenewed{SID: p.SID, OldSerial: p.OldSerial, Serial: p.CertSerial}}}, nil
	})
	if err != nil {
		return store.Soul{}, err
	}
	return s.SoulGet(ctx, p.SID)
}

// namesJSON is the JSON array of names, [] for none.
func namesJSON(names []string) string {
	if len(names) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// remediateOf is a seed's remediation, manual when not set.
func remediateOf(sd store.SoulSeed) string {
	if sd.Remediate == "" {
		return store.SeedRemediateManual
	}
	return sd.Remediate
}

// insertSeed adds one active seed inside tx.
func (s *Store) insertSeed(ctx context.Context, tx *sql.Tx, sd store.SoulSeed, now time.Time) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, s.q(`INSERT INTO soul_seeds (sid, scenario, input, secret_inputs, status, created_by, created_at, remediate, drift_every_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		sd.SID, sd.Scenario, jsonText(sd.Input), namesJSON(sd.Secret), store.SeedActive, sd.CreatedBy, now, remediateOf(sd), sd.DriftEvery.Milliseconds()).Scan(&id)
	switch s.dialect.Classify(err) {
	case ForeignKeyViolation:
		return 0, &store.Error{Err: store.ErrNotFound, Kind: "soul", Key: sd.SID}
	}
	if err != nil {
		return 0, fmt.Errorf("insert seed of soul %q: %w", sd.SID, err)
	}
	return id, nil
}

// SeedAdd stores one seed with seed.added.
func (s *Store) SeedAdd(ctx context.Context, p store.SeedAddParams) (_ store.SoulSeed, err error) {
	defer s.translate(&err)
	var id int64
	now := s.stamp()
	if p.Seed.Input, err = s.seal(fmt.Sprintf("input of a seed of soul %q", p.Seed.SID), p.Seed.Input, p.Seed.Secret); err != nil {
		return store.SoulSeed{}, err
	}
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		var status string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT status FROM souls WHERE sid = ?`), p.Seed.SID).Scan(&status); err != nil {
			return record{}, notFound(err, "soul", p.Seed.SID)
		}
		var err error
		if id, err = s.insertSeed(ctx, tx, p.Seed, now); err != nil {
			return record{}, err
		}
		return record{action: "seed.added", object: "soul/" + p.Seed.SID, payload: map[string]any{
			"sid": p.Seed.SID, "seed_id": id, "created_by": p.Seed.CreatedBy}}, nil
	})
	if err != nil {
		return store.SoulSeed{}, err
	}
	seeds, err := s.Seeds(ctx, p.Seed.SID)
	if err != nil {
		return store.SoulSeed{}, err
	}
	for _, sd := range seeds {
		if sd.ID == id {
			return sd, nil
		}
	}
	return store.SoulSeed{}, fmt.Errorf("seed %d of soul %q vanished", id, p.Seed.SID)
}

// Seeds lists a soul's seeds by id.
func (s *Store) Seeds(ctx context.Context, sid string) (_ []store.SoulSeed, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, sid, scenario, input, secret_inputs, status, created_by, created_at, remediate, drift_every_ms FROM soul_seeds WHERE sid = ? ORDER BY id`), sid)
	if err != nil {
		return nil, fmt.Errorf("seeds of soul %q: %w", sid, err)
	}
	defer rows.Close()
	out := []store.SoulSeed{}
	for rows.Next() {
		var sd store.SoulSeed
		var input, names string
		var created sql.NullTime
		var everyMS int64
		if err := rows.Scan(&sd.ID, &sd.SID, &sd.Scenario, &input, &names, &sd.Status, &sd.CreatedBy, &created, &sd.Remediate, &everyMS); err != nil {
			return nil, fmt.Errorf("seeds of soul %q: %w", sid, err)
		}
		if err := json.Unmarshal([]byte(names), &sd.Secret); err != nil {
			return nil, fmt.Errorf("secret inputs of seed %d of soul %q: %w", sd.ID, sid, err)
		}
		sd.DriftEvery = time.Duration(everyMS) * time.Millisecond
		sd.Input = json.RawMessage(input)
		if sd.Input, err = s.open(fmt.Sprintf("input of seed %d of soul %q", sd.ID, sid), sd.Input, sd.Secret); err != nil {
			return nil, err
		}
		if created.Valid {
			sd.CreatedAt = created.Time.UTC()
		}
		out = append(out, sd)
	}
	return out, rows.Err()
}
