package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/store"
)

const providerCols = `name, driver, region, credentials_ref, fqdn_suffix, config, created_at, created_by, project`

func scanProvider(row interface{ Scan(...any) error }) (store.Provider, error) {
	var p store.Provider
	var config string
	err := row.Scan(&p.Name, &p.Driver, &p.Region, &p.CredentialsRef, &p.FQDNSuffix, &config, &p.CreatedAt, &p.CreatedBy, &p.Project)
	p.Config = json.RawMessage(config)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// ProviderCreate inserts a provider; a taken name is ErrExists.
func (s *Store) ProviderCreate(ctx context.Context, params store.ProviderCreateParams) (_ store.Provider, err error) {
	defer s.translate(&err)
	p := params.Provider
	p.CreatedAt = s.stamp()
	p.CreatedBy = string(params.Actor)
	if p.Config, err = s.seal(fmt.Sprintf("config of provider %q", p.Name), p.Config, nil); err != nil {
		return store.Provider{}, err
	}
	p.Config = json.RawMessage(jsonText(p.Config))
	p.Project = projectOf(p.Project)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, p.Project, "provider", p.Name); err != nil {
			return record{}, err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO providers (`+providerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			p.Name, p.Driver, p.Region, p.CredentialsRef, p.FQDNSuffix, string(p.Config), p.CreatedAt, p.CreatedBy, p.Project)
		if err != nil {
			if s.dialect.Classify(err) == UniqueViolation {
				return record{}, &store.Error{Err: store.ErrExists, Kind: "provider", Key: p.Name}
			}
			return record{}, fmt.Errorf("insert provider %q: %w", p.Name, err)
		}
		return record{action: "provider.created", object: "provider/" + p.Name, payload: map[string]any{
			"name": p.Name, "driver": p.Driver, "region": p.Region, "credentials_ref": p.CredentialsRef,
			"fqdn_suffix": p.FQDNSuffix, "config": p.Config,
		}, project: p.Project}, nil
	})
	if err != nil {
		return store.Provider{}, err
	}
	return s.ProviderGet(ctx, p.Name)
}

// ProviderGet returns the provider called name.
func (s *Store) ProviderGet(ctx context.Context, name string) (_ store.Provider, err error) {
	defer s.translate(&err)
	p, err := scanProvider(s.db.QueryRowContext(ctx, s.q(`SELECT `+providerCols+` FROM providers WHERE name = ?`), name))
	if err != nil {
		return store.Provider{}, notFound(err, "provider", name)
	}
	if p.SharedWith, err = s.sharedWith(ctx, "provider", p.Name); err != nil {
		return store.Provider{}, err
	}
	return s.openProvider(p)
}

// ProviderList lists providers by name.
func (s *Store) ProviderList(ctx context.Context, params store.ListParams) (_ []store.Provider, err error) {
	defer s.translate(&err)
	cond, args := inProject(params.Project, "provider")
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+providerCols+` FROM providers WHERE name > ?`+cond+` ORDER BY name LIMIT ?`),
		append(append([]any{params.After}, args...), limitOf(params.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list providers: %w", err)
	}
	defer rows.Close()
	out := []store.Provider{}
	for rows.Next() {
		p, err := scanProvider(rows)
		if err != nil {
			return nil, fmt.Errorf("list providers: %w", err)
		}
		if p, err = s.openProvider(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].SharedWith, err = s.sharedWith(ctx, "provider", out[i].Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// openProvider opens the provider's sealed config fields.
func (s *Store) openProvider(p store.Provider) (store.Provider, error) {
	var err error
	p.Config, err = s.open(fmt.Sprintf("config of provider %q", p.Name), p.Config, nil)
	return p, err
}

// ProviderDelete deletes a provider; the database refuses while profiles
// reference it (ErrInUse).
func (s *Store) ProviderDelete(ctx context.Context, params store.DeleteParams) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		project, err := s.objectProject(ctx, tx, "providers", "name", params.Key)
		if err != nil {
			return record{}, notFound(err, "provider", params.Key)
		}
		// Destroyed souls no longer hold their provider: they let go of it
		// here; live souls and profiles still block the delete (FK RESTRICT).
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET provider = NULL WHERE provider = ? AND status = ?`), params.Key, store.SoulDestroyed); err != nil {
			return record{}, fmt.Errorf("release destroyed souls of provider %q: %w", params.Key, err)
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM providers WHERE name = ?`), params.Key)
		if err != nil {
			if s.dialect.Classify(err) == ForeignKeyViolation {
				return record{}, s.inUse(ctx, params.Key)
			}
			return record{}, fmt.Errorf("delete provider %q: %w", params.Key, err)
		}
		if err := deleted(res, "provider", params.Key); err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM project_shares WHERE kind = 'provider' AND name = ?`), params.Key); err != nil {
			return record{}, fmt.Errorf("delete shares of provider %q: %w", params.Key, err)
		}
		return record{action: "provider.deleted", object: "provider/" + params.Key, payload: map[string]any{"name": params.Key}, project: project}, nil
	})
}

// inUse builds the ErrInUse error, naming up to three dependent profiles
// or live souls. On PostgreSQL the failed statement aborted the
// transaction, so the names are read outside it.
func (s *Store) inUse(ctx context.Context, provider string) error {
	e := &store.Error{Err: store.ErrInUse, Kind: "provider", Key: provider}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT 'profile ' || name FROM profiles WHERE provider = ?
		UNION ALL SELECT 'soul ' || sid FROM souls WHERE provider = ? AND status <> ? ORDER BY 1 LIMIT 4`), provider, provider, store.SoulDestroyed)
	if err != nil {
		return e
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			names = append(names, n)
		}
	}
	if len(names) > 3 {
		names = append(names[:3], "…")
	}
	if len(names) > 0 {
		e.Ref = strings.Join(names, ", ")
	}
	return e
}

const profileCols = `name, provider, spec, created_at, created_by, project`

func scanProfile(row interface{ Scan(...any) error }) (store.Profile, error) {
	var p store.Profile
	var spec string
	err := row.Scan(&p.Name, &p.Provider, &spec, &p.CreatedAt, &p.CreatedBy, &p.Project)
	p.Spec = json.RawMessage(spec)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// ProfileCreate inserts a profile; the database refuses an unknown provider
// (ErrReferenceMissing) and a taken name (ErrExists).
func (s *Store) ProfileCreate(ctx context.Context, params store.ProfileCreateParams) (_ store.Profile, err error) {
	defer s.translate(&err)
	p := params.Profile
	p.CreatedAt = s.stamp()
	p.CreatedBy = string(params.Actor)
	p.Spec = json.RawMessage(jsonText(p.Spec))
	p.Project = projectOf(p.Project)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, p.Project, "profile", p.Name); err != nil {
			return record{}, err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO profiles (`+profileCols+`) VALUES (?, ?, ?, ?, ?, ?)`),
			p.Name, p.Provider, string(p.Spec), p.CreatedAt, p.CreatedBy, p.Project)
		switch s.dialect.Classify(err) {
		case UniqueViolation:
			return record{}, &store.Error{Err: store.ErrExists, Kind: "profile", Key: p.Name}
		case ForeignKeyViolation:
			return record{}, &store.Error{Err: store.ErrReferenceMissing, Kind: "profile", Key: p.Name, Ref: "provider " + p.Provider}
		}
		if err != nil {
			return record{}, fmt.Errorf("insert profile %q: %w", p.Name, err)
		}
		return record{action: "profile.created", object: "profile/" + p.Name, payload: map[string]any{
			"name": p.Name, "provider": p.Provider, "spec": p.Spec,
		}, project: p.Project}, nil
	})
	if err != nil {
		return store.Profile{}, err
	}
	return s.ProfileGet(ctx, p.Name)
}

// ProfileGet returns the profile called name.
func (s *Store) ProfileGet(ctx context.Context, name string) (_ store.Profile, err error) {
	defer s.translate(&err)
	p, err := scanProfile(s.db.QueryRowContext(ctx, s.q(`SELECT `+profileCols+` FROM profiles WHERE name = ?`), name))
	if err != nil {
		return store.Profile{}, notFound(err, "profile", name)
	}
	if p.SharedWith, err = s.sharedWith(ctx, "profile", p.Name); err != nil {
		return store.Profile{}, err
	}
	return p, nil
}

// ProfileList lists profiles by name.
func (s *Store) ProfileList(ctx context.Context, params store.ListParams) (_ []store.Profile, err error) {
	defer s.translate(&err)
	cond, args := inProject(params.Project, "profile")
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+profileCols+` FROM profiles WHERE name > ?`+cond+` ORDER BY name LIMIT ?`),
		append(append([]any{params.After}, args...), limitOf(params.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	defer rows.Close()
	out := []store.Profile{}
	for rows.Next() {
		p, err := scanProfile(rows)
		if err != nil {
			return nil, fmt.Errorf("list profiles: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].SharedWith, err = s.sharedWith(ctx, "profile", out[i].Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ProfileDelete deletes a profile.
func (s *Store) ProfileDelete(ctx context.Context, params store.DeleteParams) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		project, err := s.objectProject(ctx, tx, "profiles", "name", params.Key)
		if err != nil {
			return record{}, notFound(err, "profile", params.Key)
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM profiles WHERE name = ?`), params.Key)
		if err != nil {
			return record{}, fmt.Errorf("delete profile %q: %w", params.Key, err)
		}
		if err := deleted(res, "profile", params.Key); err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM project_shares WHERE kind = 'profile' AND name = ?`), params.Key); err != nil {
			return record{}, fmt.Errorf("delete shares of profile %q: %w", params.Key, err)
		}
		return record{action: "profile.deleted", object: "profile/" + params.Key, payload: map[string]any{"name": params.Key}, project: project}, nil
	})
}

// soulCols are the columns a new soul is inserted with; soulSelectCols
// what scanSoul reads.
const (
	soulCols       = `sid, status, address, provider, vm_id, primary_ip, attributes, connection, created_by_aid, created_at, updated_at`
	soulSelectCols = soulCols + `, last_seen_at, last_error, cert_serial, cert_not_after, joined_at, project, executor`
)

func scanSoul(row interface{ Scan(...any) error }) (store.Soul, error) {
	var s store.Soul
	var attrs, conn string
	var provider, createdBy sql.NullString
	var seen, notAfter, joined sql.NullTime
	err := row.Scan(&s.SID, &s.Status, &s.Address, &provider, &s.VMID, &s.PrimaryIP, &attrs, &conn, &createdBy, &s.CreatedAt, &s.UpdatedAt, &seen, &s.LastError,
		&s.CertSerial, &notAfter, &joined, &s.Project, &s.Executor)
	if err != nil {
		return s, err
	}
	s.LastSeenAt, s.CertNotAfter, s.JoinedAt = timePtr(seen), timePtr(notAfter), timePtr(joined)
	s.Provider = provider.String
	s.Attributes = json.RawMessage(attrs)
	if createdBy.Valid {
		s.CreatedByAID = &createdBy.String
	}
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	if err := json.Unmarshal([]byte(conn), &s.Connection); err != nil {
		return s, fmt.Errorf("soul %q: decode connection: %w", s.SID, err)
	}
	return s, nil
}

// SoulCreate registers a soul; a taken SID is ErrExists, an unknown
// provider ErrReferenceMissing.
func (s *Store) SoulCreate(ctx context.Context, params store.SoulCreateParams) (_ store.Soul, err error) {
	defer s.translate(&err)
	so := params.Soul
	so.CreatedAt = s.stamp()
	so.UpdatedAt = so.CreatedAt
	if so.Status == "" {
		so.Status = store.SoulActive
	}
	so.Attributes = json.RawMessage(jsonText(so.Attributes))
	conn, err := json.Marshal(so.Connection)
	if err != nil {
		return store.Soul{}, fmt.Errorf("soul %q: encode connection: %w", so.SID, err)
	}
	var createdBy sql.NullString
	if so.CreatedByAID != nil {
		createdBy = sql.NullString{String: *so.CreatedByAID, Valid: true}
	}
	so.Project = projectOf(so.Project)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, so.Project, "soul", so.SID); err != nil {
			return record{}, err
		}
		if err := s.hostFree(ctx, tx, so); err != nil {
			return record{}, err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO souls (`+soulCols+`, project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			so.SID, so.Status, so.Address, nullString(so.Provider), so.VMID, so.PrimaryIP, string(so.Attributes), string(conn), createdBy, so.CreatedAt, so.UpdatedAt, so.Project)
		switch s.dialect.Classify(err) {
		case UniqueViolation:
			return record{}, &store.Error{Err: store.ErrExists, Kind: "soul", Key: so.SID}
		case ForeignKeyViolation:
			return record{}, &store.Error{Err: store.ErrReferenceMissing, Kind: "soul", Key: so.SID, Ref: "provider " + so.Provider}
		}
		if err != nil {
			return record{}, fmt.Errorf("insert soul %q: %w", so.SID, err)
		}
		return record{action: "soul.registered", object: "soul/" + so.SID, payload: map[string]any{
			"sid": so.SID, "address": so.Address, "status": so.Status, "provider": so.Provider,
			"connection": map[string]any{"transport": so.Connection.Transport, "user": so.Connection.User, "port": so.Connection.Port, "key_ref": so.Connection.KeyRef},
		}, project: so.Project}, nil
	})
	if err != nil {
		return store.Soul{}, err
	}
	return s.SoulGet(ctx, so.SID)
}

// SoulGet returns the soul with the given SID.
func (s *Store) SoulGet(ctx context.Context, sid string) (_ store.Soul, err error) {
	defer s.translate(&err)
	so, err := scanSoul(s.db.QueryRowContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE sid = ?`), sid))
	if err != nil {
		return store.Soul{}, notFound(err, "soul", sid)
	}
	return so, nil
}

// SoulList lists souls by SID.
func (s *Store) SoulList(ctx context.Context, params store.ListParams) (_ []store.Soul, err error) {
	defer s.translate(&err)
	return s.SoulSearch(ctx, store.SoulListParams{ListParams: params})
}

// SoulSearch lists souls by SID, filtered by status, provider and an
// attribute's value (indexes: 00016_soul_filters).
func (s *Store) SoulSearch(ctx context.Context, p store.SoulListParams) (_ []store.Soul, err error) {
	defer s.translate(&err)
	query, args := `SELECT `+soulSelectCols+` FROM souls WHERE sid > ?`, []any{p.After}
	if p.Status != "" {
		query, args = query+` AND status = ?`, append(args, p.Status)
	}
	if p.Provider != "" {
		query, args = query+` AND provider = ?`, append(args, p.Provider)
	}
	if p.Label != nil {
		cond, a := s.dialect.AttributeIs(p.Label.Key, p.Label.Value)
		query, args = query+` AND `+cond, append(args, a...)
	}
	if cond, a := inProject(p.Project, ""); cond != "" {
		query, args = query+cond, append(args, a...)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+` ORDER BY sid LIMIT ?`), append(args, limitOf(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list souls: %w", err)
	}
	defer rows.Close()
	out := []store.Soul{}
	for rows.Next() {
		so, err := scanSoul(rows)
		if err != nil {
			return nil, fmt.Errorf("list souls: %w", err)
		}
		out = append(out, so)
	}
	return out, rows.Err()
}

// SoulDelete removes a soul from the registry (the host itself is untouched).
func (s *Store) SoulDelete(ctx context.Context, params store.DeleteParams) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		so, err := scanSoul(tx.QueryRowContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE sid = ?`), params.Key))
		if err != nil {
			return record{}, notFound(err, "soul", params.Key)
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM souls WHERE sid = ?`), params.Key)
		if err != nil {
			return record{}, fmt.Errorf("delete soul %q: %w", params.Key, err)
		}
		if err := deleted(res, "soul", params.Key); err != nil {
			return record{}, err
		}
		return record{action: "soul.deleted", object: "soul/" + params.Key, payload: map[string]any{"sid": params.Key},
			changes: []store.Change{store.SoulGone{Soul: so}}, project: so.Project}, nil
	})
}

// SoulPinHostKey pins the host key of a soul that has none.
func (s *Store) SoulPinHostKey(ctx context.Context, p store.SoulHostKeyParams) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		so, err := scanSoul(tx.QueryRowContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE sid = ?`), p.SID))
		if err != nil {
			return record{}, notFound(err, "soul", p.SID)
		}
		if so.Connection.HostKey != "" {
			return record{}, &store.Error{Err: store.ErrExists, Kind: "soul", Key: p.SID, Ref: "host key"}
		}
		if err := s.hostKeyFree(ctx, tx, so, p.HostKey); err != nil {
			return record{}, err
		}
		so.Connection.HostKey = p.HostKey
		conn, err := json.Marshal(so.Connection)
		if err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET connection = ?, updated_at = ? WHERE sid = ?`), string(conn), s.stamp(), p.SID); err != nil {
			return record{}, fmt.Errorf("pin host key of soul %q: %w", p.SID, err)
		}
		return record{action: "soul.host_key_pinned", object: "soul/" + p.SID, payload: map[string]any{"sid": p.SID, "host_key": p.HostKey}, project: so.Project}, nil
	})
}

// hostFree refuses a hand-registered soul at the address and port of
// another project's soul that is not destroyed (ErrHostTaken): a
// project's hosts are its own. A soul without an address (an agent's)
// takes no host.
func (s *Store) hostFree(ctx context.Context, tx *sql.Tx, so store.Soul) error {
	if so.Address == "" {
		return nil
	}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT sid, connection FROM souls WHERE address = ? AND project <> ? AND status <> ?`),
		so.Address, so.Project, store.SoulDestroyed)
	if err != nil {
		return fmt.Errorf("look up souls at %s: %w", so.Address, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sid, connText string
		if err := rows.Scan(&sid, &connText); err != nil {
			return fmt.Errorf("look up souls at %s: %w", so.Address, err)
		}
		var c store.Connection
		_ = json.Unmarshal([]byte(connText), &c)
		if portOr22(c.Port) == portOr22(so.Connection.Port) {
			return &store.Error{Err: store.ErrHostTaken, Kind: "soul", Key: so.SID, Ref: fmt.Sprintf("%s port %d", so.Address, portOr22(so.Connection.Port))}
		}
	}
	return rows.Err()
}

// hostKeyFree refuses to pin, as so's host key, a key another project's
// soul (not destroyed) has pinned: the host is that soul, whatever
// address so was registered at (ErrHostTaken).
func (s *Store) hostKeyFree(ctx context.Context, tx *sql.Tx, so store.Soul, hostKey string) error {
	f := strings.Fields(hostKey)
	if len(f) < 2 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT sid, connection FROM souls WHERE project <> ? AND status <> ? AND CAST(connection AS TEXT) LIKE ?`),
		so.Project, store.SoulDestroyed, "%"+f[1]+"%")
	if err != nil {
		return fmt.Errorf("look up host key of soul %q: %w", so.SID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sid, connText string
		if err := rows.Scan(&sid, &connText); err != nil {
			return fmt.Errorf("look up host key of soul %q: %w", so.SID, err)
		}
		var c store.Connection
		if json.Unmarshal([]byte(connText), &c) == nil {
			if g := strings.Fields(c.HostKey); len(g) >= 2 && g[0] == f[0] && g[1] == f[1] {
				return &store.Error{Err: store.ErrHostTaken, Kind: "soul", Key: so.SID, Ref: "its host key"}
			}
		}
	}
	return rows.Err()
}

func portOr22(p int) int {
	if p == 0 {
		return 22
	}
	return p
}

// objectProject reads the project of the row of table whose column col is
// key, in tx.
func (s *Store) objectProject(ctx context.Context, tx *sql.Tx, table, col, key string) (string, error) {
	var p string
	err := tx.QueryRowContext(ctx, s.q(`SELECT project FROM `+table+` WHERE `+col+` = ?`), key).Scan(&p)
	return p, err
}

// sharedWith lists the projects a provider or profile is shared with, by
// name.
func (s *Store) sharedWith(ctx context.Context, kind, name string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT project FROM project_shares WHERE kind = ? AND name = ? ORDER BY project`), kind, name)
	if err != nil {
		return nil, fmt.Errorf("list shares of %s %q: %w", kind, name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("list shares of %s %q: %w", kind, name, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
