package keeper

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/version"
)

// BackupFormat is the format of a backup archive's manifest: 2 carries a
// MAC over the manifest (and so over every member's digest).
const BackupFormat = 2

// Codes of backup and restore failures (BackupError).
const (
	// CodeBackupAuditBroken: the audit log to back up (or the one a backup
	// holds) does not verify; a backup never launders a broken log.
	CodeBackupAuditBroken = "backup.audit_broken"
	// CodeBackupInvalid: the archive is not a keeper backup, or a member
	// does not match its manifest.
	CodeBackupInvalid = "backup.invalid"
	// CodeRestoreNotEmpty: the data dir to restore into holds a keeper
	// already.
	CodeRestoreNotEmpty = "restore.not_empty"
	// CodeRestoreDataKey: the data key is missing or is not the backup's.
	CodeRestoreDataKey = "restore.data_key"
	// CodeRestoreAuditTruncated: the checkpoints say the backup's log was
	// truncated, or the restored log does not hold what they record.
	CodeRestoreAuditTruncated = "restore.audit_truncated"
	// CodeRestoreTampered: the archive's manifest does not carry the MAC
	// the backup's data key gives it: the archive was changed after it was
	// made (a member and its digest, or the manifest itself).
	CodeRestoreTampered = "restore.tampered"
	// CodeRestoreBackend: the backup is of another database backend than
	// the keeper's configuration names.
	CodeRestoreBackend = "restore.backend"
)

// BackupError is a backup or restore that was refused, with a stable code.
type BackupError struct {
	Code    string
	Message string
}

func (e *BackupError) Error() string { return e.Code + ": " + e.Message }

func backupErr(code, format string, args ...any) *BackupError {
	return &BackupError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// BackupManifest is the first member of a backup archive, manifest.json.
type BackupManifest struct {
	Format        int       `json:"format"`
	KeeperVersion string    `json:"keeper_version"`
	KeeperID      string    `json:"keeper_id"`
	CreatedAt     time.Time `json:"created_at"`
	// Backend is sqlite (the database is the member keeper.db) or
	// postgres (the database is not in the archive: pg_dump it).
	Backend       string `json:"backend"`
	SchemaVersion int64  `json:"schema_version"`
	// Audit is the audit head of the database the archive holds (for
	// postgres: of the database when the backup was made).
	Audit struct {
		Seq  int64  `json:"seq"`
		Hash string `json:"hash"`
	} `json:"audit_head"`
	DataKey struct {
		// Ref is where the keeper took its data key from: data_key_ref,
		// or "file:<data dir>/data.key".
		Ref string `json:"ref"`
		// Fingerprint names the key without revealing it: 16 hex digits
		// of a keyed digest (HMAC under the key) of a fixed text.
		Fingerprint string `json:"fingerprint"`
		// Included says the key itself is the member data.key
		// (--include-data-key).
		Included bool `json:"included"`
	} `json:"data_key"`
	Files []BackupFile `json:"files"`
	// MAC authenticates the manifest: HMAC-SHA256, under a key derived
	// from the data key, of the manifest's JSON with MAC empty. Every
	// member's size and digest is in the manifest, so it covers them too.
	MAC string `json:"mac"`
}

// authenticate refuses an archive whose manifest does not carry the MAC
// the backup's data key gives it (restore.tampered).
func authenticate(file string, sealer *secret.Sealer, m BackupManifest) error {
	want, err := manifestMAC(sealer, m)
	if err != nil || !hmac.Equal([]byte(want), []byte(m.MAC)) {
		return backupErr(CodeRestoreTampered, "%s was changed after it was made: its manifest does not carry the MAC the backup's data key gives it; nothing was restored", file)
	}
	return nil
}

// manifestMAC is the MAC of m (its MAC field left out) under sealer's
// data key.
func manifestMAC(sealer *secret.Sealer, m BackupManifest) (string, error) {
	m.MAC = ""
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return sealer.Digest(append([]byte("soulstack backup manifest v2\n"), b...)), nil
}

// BackupFile is one member of a backup archive after the manifest.
// Sealed members hold a private key sealed with the data key; restore
// opens them and writes them without the .sealed suffix.
type BackupFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode"`
	Sealed bool   `json:"sealed,omitempty"`
}

// maxManifest bounds the manifest a restore reads.
const maxManifest = 4 << 20

// BackupOptions tune Backup.
type BackupOptions struct {
	// IncludeDataKey puts the data key itself in the archive: whoever has
	// the archive then has every secret in it.
	IncludeDataKey bool
	Now            func() time.Time
}

// keyFingerprint names a data key by a digest that reveals nothing of it.
func keyFingerprint(key []byte) string {
	s, err := secret.NewSealer(key)
	if err != nil {
		return ""
	}
	return s.Digest([]byte("soulstack backup key fingerprint"))[:16]
}

// existingDataKey returns the keeper's data key and where it came from,
// never making one: a keeper with no key has nothing to back up.
func existingDataKey(c config.Config) ([]byte, string, error) {
	if c.DataKeyRef != "" {
		key, err := dataKey(c, nil)
		return key, c.DataKeyRef, err
	}
	p := filepath.Join(c.DataDir, "data.key")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, "", fmt.Errorf("read the data key: %w (point --data-dir at the keeper's data directory, or set data_key_ref)", err)
	}
	key, err := secret.DecodeKey(string(b))
	return key, "file:" + p, err
}

// auditKeyFor returns the audit key: audit_key_ref's, or derived from the
// data key.
func auditKeyFor(ctx context.Context, c config.Config, dataKey []byte) (*audit.Key, error) {
	if c.AuditKeyRef != "" {
		return auditKey(ctx, c, false)
	}
	return audit.DeriveKey(dataKey)
}

// Backup writes a consistent online backup of the keeper c describes to
// file: the SQLite database (VACUUM INTO, which a running keeper's writes
// do not disturb), the keeper id, its SSH key and CA (private keys sealed
// with the data key), its files, and the audit checkpoints and restore
// records, copied before the database so that none is ahead of it. The
// data key itself only with IncludeDataKey. With PostgreSQL the database
// is left to pg_dump and the rest is archived. The archive is written to
// a temporary file (mode 0600) and renamed into place.
func Backup(ctx context.Context, c config.Config, file string, opts BackupOptions) (BackupManifest, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	var m BackupManifest
	key, ref, err := existingDataKey(c)
	if err != nil {
		return m, err
	}
	akey, err := auditKeyFor(ctx, c, key)
	if err != nil {
		return m, err
	}
	sealer, err := secret.NewSealer(key)
	if err != nil {
		return m, err
	}
	id, err := os.ReadFile(filepath.Join(c.DataDir, "keeper.id"))
	if err != nil {
		return m, fmt.Errorf("no keeper in %s: %w", c.DataDir, err)
	}
	stage, err := os.MkdirTemp(filepath.Dir(file), ".soulstack-backup-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(stage)

	m.Format, m.KeeperVersion, m.KeeperID = BackupFormat, version.String(), strings.TrimSpace(string(id))
	m.DataKey.Ref, m.DataKey.Fingerprint = ref, keyFingerprint(key)
	// The checkpoints first: they only move forward, so the database
	// copied after them is at or past every one.
	if err := copyAuditFiles(c.AuditCheckpointDir, filepath.Join(stage, "audit")); err != nil {
		return m, err
	}
	m.CreatedAt = audit.Normalize(now())
	if err := snapshotDatabase(ctx, c, stage, akey, &m); err != nil {
		return m, err
	}
	for _, f := range []struct {
		from, to string
		seal     func(name string) bool
	}{
		{filepath.Join(c.DataDir, "keeper.id"), "keeper.id", nil},
		{filepath.Join(c.DataDir, "ssh"), "ssh", func(n string) bool { return !strings.HasSuffix(n, ".pub") }},
		{c.TLSDir(), "tls", func(n string) bool { return strings.HasSuffix(n, ".key") }},
		{filepath.Join(c.DataDir, "files"), "files", nil},
	} {
		if err := copyTree(f.from, filepath.Join(stage, f.to), sealer, f.seal); err != nil {
			return m, err
		}
	}
	if opts.IncludeDataKey {
		if err := os.WriteFile(filepath.Join(stage, "data.key"), []byte(base64Key(key)+"\n"), 0o600); err != nil {
			return m, err
		}
		m.DataKey.Included = true
	}
	if m.Files, err = listStage(stage); err != nil {
		return m, err
	}
	if m.MAC, err = manifestMAC(sealer, m); err != nil {
		return m, err
	}
	return m, writeArchive(file, stage, m)
}

// snapshotDatabase copies the SQLite database into the stage (PostgreSQL's
// is left to pg_dump), verifies its audit log against the staged
// checkpoints, and records in m its backend, schema version and audit head.
func snapshotDatabase(ctx context.Context, c config.Config, stage string, akey *audit.Key, m *BackupManifest) error {
	var st *sqlstore.Store
	var err error
	if c.DatabaseURL == "" {
		m.Backend = "sqlite"
		if _, err := os.Stat(c.SQLitePath()); err != nil {
			return fmt.Errorf("no keeper database: %w", err)
		}
		if err := vacuumInto(ctx, c.SQLitePath(), filepath.Join(stage, "keeper.db")); err != nil {
			return err
		}
		st, err = sqlite.Open(ctx, filepath.Join(stage, "keeper.db"))
	} else {
		m.Backend = "postgres"
		st, err = OpenStore(ctx, c)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	head, err := verifyWith(ctx, st, akey, filepath.Join(stage, "audit"), nil)
	if err != nil {
		return err
	}
	if m.SchemaVersion, err = schemaVersion(ctx, st.DB()); err != nil {
		return err
	}
	m.Audit.Seq, m.Audit.Hash = head.Seq, head.Hash
	return nil
}

func base64Key(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// vacuumInto copies the live SQLite database at src to dst as one
// consistent snapshot.
func vacuumInto(ctx context.Context, src, dst string) error {
	db, err := sql.Open("sqlite", sqlite.DSN(src))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return fmt.Errorf("snapshot the database: %w", err)
	}
	return os.Chmod(dst, 0o600)
}

// schemaVersion is the database's migration version (goose's table).
func schemaVersion(ctx context.Context, db *sql.DB) (int64, error) {
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version_id) FROM goose_db_version WHERE is_applied`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return v.Int64, nil
}

// verifyWith verifies the audit log of st against the checkpoints and
// restore records in dir, plus extra restore records, and returns its head;
// a log that does not verify is a CodeBackupAuditBroken error naming its
// problems.
func verifyWith(ctx context.Context, st *sqlstore.Store, key *audit.Key, dir string, extra []audit.RestoreFile) (audit.Head, error) {
	cps, err := audit.ReadCheckpoints(dir, key)
	if err != nil {
		return audit.Head{}, err
	}
	rs, err := audit.ReadRestores(dir, key)
	if err != nil {
		return audit.Head{}, err
	}
	r, err := audit.VerifyRestored(ctx, st, key, cps, append(rs, extra...))
	if err != nil {
		return audit.Head{}, err
	}
	if !r.OK {
		return audit.Head{}, backupErr(CodeBackupAuditBroken, "the audit log does not verify: %s", problemsText(r.Problems))
	}
	return st.AuditHead(ctx)
}

func problemsText(ps []audit.Problem) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "row %d: %s: %s", p.Seq, p.Kind, p.Message)
	}
	return b.String()
}

// copyAuditFiles copies the checkpoints and restore records of dir.
func copyAuditFiles(dir, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && (strings.HasSuffix(n, ".checkpoint.json") || strings.HasSuffix(n, ".restore.json")) {
			if err := copyFile(filepath.Join(dir, n), filepath.Join(to, n), 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyTree copies the regular files under from (or the file from) to to,
// sealing those seal names.
func copyTree(from, to string, sealer *secret.Sealer, seal func(string) bool) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == from {
			return nil
		}
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if rel == "." {
			dst = to
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if seal != nil && seal(d.Name()) {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst+".sealed", []byte(sealer.Seal(b)+"\n"), 0o600)
		}
		return copyFile(p, dst, fi.Mode().Perm())
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// listStage lists the staged members with their digests, in name order.
func listStage(stage string) ([]BackupFile, error) {
	var out []BackupFile
	err := filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		out = append(out, BackupFile{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: uint32(fi.Mode().Perm()), Sealed: strings.HasSuffix(name, ".sealed")})
		return nil
	})
	slices.SortFunc(out, func(a, b BackupFile) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// writeArchive writes manifest.json and the staged members as a gzipped
// tar to file, through a temporary file renamed into place. Headers carry
// the manifest's time and no owner, so the same stage gives the same
// bytes.
func writeArchive(file, stage string, m BackupManifest) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".soulstack-backup-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	zw := gzip.NewWriter(tmp)
	tw := tar.NewWriter(zw)
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	hdr := func(name string, size int64, mode uint32) *tar.Header {
		return &tar.Header{Name: name, Size: size, Mode: int64(mode), ModTime: m.CreatedAt, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr("manifest.json", int64(len(mb)), 0o600)); err != nil {
		return err
	}
	if _, err := tw.Write(mb); err != nil {
		return err
	}
	for _, f := range m.Files {
		if err := tw.WriteHeader(hdr(f.Name, f.Size, f.Mode)); err != nil {
			return err
		}
		in, err := os.Open(filepath.Join(stage, filepath.FromSlash(f.Name)))
		if err != nil {
			return err
		}
		_, err = io.CopyN(tw, in, f.Size)
		in.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// DataKeyFile is the data key (base64, as in data.key) when keeper.yml
	// has no data_key_ref and the archive does not include it.
	DataKeyFile string
	Now         func() time.Time
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	Manifest   BackupManifest
	Record     audit.RestoreRecord
	RecordPath string
}

// allowedMember reports whether name may be a member of a backup.
func allowedMember(name string) bool {
	if name != path.Clean(name) || path.IsAbs(name) || strings.HasPrefix(name, "../") || name == ".." || strings.ContainsRune(name, '\\') {
		return false
	}
	switch {
	case name == "keeper.db", name == "keeper.id", name == "data.key":
		return true
	case strings.HasPrefix(name, "audit/"):
		rest := strings.TrimPrefix(name, "audit/")
		return !strings.Contains(rest, "/") && (strings.HasSuffix(rest, ".checkpoint.json") || strings.HasSuffix(rest, ".restore.json"))
	case strings.HasPrefix(name, "ssh/"), strings.HasPrefix(name, "tls/"), strings.HasPrefix(name, "files/"):
		return true
	}
	return false
}

// Restore restores the backup in file into the empty data dir of c (for
// PostgreSQL: next to a database pg_restore has restored already). It
// checks every member against the manifest, the data key against the
// backup's, and the backup's audit log against its own checkpoints and
// those already in the checkpoint directory; then it writes the files,
// a signed restore record (history continues from the backup's last audit
// row; checkpoints written between the backup and now are superseded and
// kept in the record), and a keeper.restored audit event. Nothing is
// written when a check fails.
func Restore(ctx context.Context, c config.Config, file string, opts RestoreOptions) (RestoreResult, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	var res RestoreResult
	if err := restoreTarget(c); err != nil {
		return res, err
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return res, err
	}
	stage, err := os.MkdirTemp(c.DataDir, ".restore-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(stage)
	m, err := extract(file, stage)
	if err != nil {
		return res, err
	}
	res.Manifest = m
	if err := restoreBackend(c, m); err != nil {
		return res, err
	}
	key, err := restoreDataKey(c, stage, m, opts)
	if err != nil {
		return res, err
	}
	sealer, err := secret.NewSealer(key)
	if err != nil {
		return res, err
	}
	if err := authenticate(file, sealer, m); err != nil {
		return res, err
	}
	akey, err := auditKeyFor(ctx, c, key)
	if err != nil {
		return res, err
	}
	if err := unsealStaged(stage, m, sealer); err != nil {
		return res, err
	}
	rec, err := continueHistory(ctx, c, stage, m, akey, audit.Normalize(now()))
	if err != nil {
		return res, err
	}
	if err := placeFiles(c, stage, m, key); err != nil {
		return res, err
	}
	if err := placeAudit(c, stage, akey, rec); err != nil {
		return res, err
	}
	res.Record, res.RecordPath = rec, audit.RestorePath(c.AuditCheckpointDir, m.KeeperID, rec.RestoredAt)
	return res, audit.WriteRestore(res.RecordPath, rec)
}

// restoreBackend refuses a backup of one database kind into a keeper
// configured for the other.
func restoreBackend(c config.Config, m BackupManifest) error {
	switch {
	case m.Backend == "sqlite" && c.DatabaseURL != "":
		return backupErr(CodeRestoreBackend, "the backup holds a SQLite database, but the configuration names PostgreSQL (database_url)")
	case m.Backend == "postgres" && c.DatabaseURL == "":
		return backupErr(CodeRestoreBackend, "the backup is of a keeper on PostgreSQL: restore its database with pg_restore, then run keeper restore with its database_url")
	}
	return nil
}

// unsealStaged opens the backup's sealed members in the stage with the
// data key, each beside its sealed copy, which it removes.
func unsealStaged(stage string, m BackupManifest, sealer *secret.Sealer) error {
	for _, f := range m.Files {
		if !f.Sealed {
			continue
		}
		p := filepath.Join(stage, filepath.FromSlash(f.Name))
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		plain, err := sealer.Open(strings.TrimSpace(string(b)))
		if err != nil {
			return backupErr(CodeRestoreDataKey, "%s cannot be opened with this data key: %v", f.Name, err)
		}
		if err := os.WriteFile(strings.TrimSuffix(p, ".sealed"), plain, 0o600); err != nil {
			return err
		}
		os.Remove(p)
	}
	return nil
}

// continueHistory checks the backup's audit log (the staged SQLite
// database, or the PostgreSQL one pg_restore restored) against the
// manifest, its own checkpoints and those already in the checkpoint
// directory, and appends keeper.restored, the first event of the
// continued history; it returns the signed restore record, which
// supersedes the checkpoints written since the backup.
func continueHistory(ctx context.Context, c config.Config, stage string, m BackupManifest, akey *audit.Key, at time.Time) (audit.RestoreRecord, error) {
	var st *sqlstore.Store
	var err error
	if m.Backend == "sqlite" {
		st, err = sqlite.Open(ctx, filepath.Join(stage, "keeper.db"), sqlstore.WithAuditKey(akey))
	} else {
		st, err = OpenStore(ctx, c, sqlstore.WithAuditKey(akey))
	}
	if err != nil {
		return audit.RestoreRecord{}, err
	}
	// Closed before the files move: the database's write-ahead log is
	// complete when it is put into place.
	defer st.Close()
	head, err := st.AuditHead(ctx)
	if err != nil {
		return audit.RestoreRecord{}, err
	}
	if m.Backend == "sqlite" && (head.Seq != m.Audit.Seq || head.Hash != m.Audit.Hash) {
		return audit.RestoreRecord{}, backupErr(CodeBackupInvalid, "the database's audit head (row %d) is not the one the manifest records (row %d)", head.Seq, m.Audit.Seq)
	}
	rec := audit.RestoreRecord{KeeperID: m.KeeperID, FromSeq: head.Seq, FromHash: head.Hash, BackupAt: m.CreatedAt, RestoredAt: at}
	// The checkpoints in the directory already (a shared one, or one kept
	// outside the data dir) that this restore supersedes go into its
	// record; any other must agree with the backup's log.
	existing, err := audit.ReadCheckpoints(c.AuditCheckpointDir, akey)
	if err != nil {
		return rec, err
	}
	for _, f := range existing {
		if f.Err == nil && rec.Supersedes(f.Checkpoint) {
			rec.Superseded = append(rec.Superseded, f.Checkpoint)
		}
	}
	akey.SignRestore(&rec)
	probe := []audit.RestoreFile{{Path: "this restore", Record: rec}}
	for _, d := range []struct{ dir, what string }{
		{filepath.Join(stage, "audit"), "against its own checkpoints"},
		{c.AuditCheckpointDir, "against the checkpoints in " + c.AuditCheckpointDir},
	} {
		if _, err := verifyWith(ctx, st, akey, d.dir, probe); err != nil {
			var be *BackupError
			if errors.As(err, &be) {
				return rec, backupErr(CodeRestoreAuditTruncated, "the backup's audit log, %s: %s", d.what, strings.TrimPrefix(be.Message, "the audit log does not verify: "))
			}
			return rec, err
		}
	}
	return rec, st.AuditRecord(ctx, store.AuditParams{Actor: store.ActorHost, Action: "keeper.restored", Object: "keeper/" + m.KeeperID, Payload: map[string]any{
		"from_seq": head.Seq, "backup_at": m.CreatedAt, "backup_version": m.KeeperVersion, "superseded": len(rec.Superseded),
	}})
}

// placeFiles moves the data dir's files into place: the database with any
// write-ahead log its last connection left, the keys and files the backup
// holds, and the data key when it lives in the data dir and the backup
// does not carry it.
func placeFiles(c config.Config, stage string, m BackupManifest, key []byte) error {
	for _, side := range []string{"keeper.db-wal", "keeper.db-shm"} {
		if _, err := os.Stat(filepath.Join(stage, side)); err == nil && m.Backend == "sqlite" {
			if err := os.Rename(filepath.Join(stage, side), filepath.Join(c.DataDir, side)); err != nil {
				return err
			}
		}
	}
	for _, f := range m.Files {
		name := strings.TrimSuffix(f.Name, ".sealed")
		if strings.HasPrefix(name, "audit/") {
			continue
		}
		if name == "data.key" && c.DataKeyRef != "" {
			continue
		}
		dst := filepath.Join(c.DataDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(stage, filepath.FromSlash(name)), dst); err != nil {
			return err
		}
	}
	if c.DataKeyRef == "" && !m.DataKey.Included {
		return writeKeyFile(filepath.Join(c.DataDir, "data.key"), key)
	}
	return nil
}

// placeAudit moves the backup's checkpoints into the checkpoint directory,
// but for those the directory holds as far or further and that rec does
// not supersede, and the backup's own restore records.
func placeAudit(c config.Config, stage string, akey *audit.Key, rec audit.RestoreRecord) error {
	if err := os.MkdirAll(c.AuditCheckpointDir, 0o700); err != nil {
		return err
	}
	staged, err := audit.ReadCheckpoints(filepath.Join(stage, "audit"), akey)
	if err != nil {
		return err
	}
	for _, f := range staged {
		dst := filepath.Join(c.AuditCheckpointDir, filepath.Base(f.Path))
		if cur, err := audit.ReadCheckpoint(dst, akey); err == nil && cur.Err == nil && !rec.Supersedes(cur.Checkpoint) && cur.Checkpoint.Seq >= f.Checkpoint.Seq {
			continue // the directory's own is as far or further, and agrees
		}
		if err := os.Rename(f.Path, dst); err != nil {
			return err
		}
	}
	rs, err := audit.ReadRestores(filepath.Join(stage, "audit"), akey)
	if err != nil {
		return err
	}
	for _, r := range rs {
		dst := filepath.Join(c.AuditCheckpointDir, filepath.Base(r.Path))
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if err := os.Rename(r.Path, dst); err != nil {
			return err
		}
	}
	return nil
}

// restoreTarget refuses a data dir that holds a keeper already: anything
// but a data.key the operator put there for the restore.
func restoreTarget(c config.Config) error {
	ents, err := os.ReadDir(c.DataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var held []string
	for _, e := range ents {
		if e.Name() != "data.key" {
			held = append(held, e.Name())
		}
	}
	if len(held) > 0 {
		return backupErr(CodeRestoreNotEmpty, "the data dir %s is not empty (it holds %s): restore into a new one", c.DataDir, strings.Join(held, ", "))
	}
	return nil
}

// restoreDataKey finds the data key: data_key_ref, --data-key, the
// archive's own, or a data.key already in the data dir; it must be the
// backup's.
func restoreDataKey(c config.Config, stage string, m BackupManifest, opts RestoreOptions) ([]byte, error) {
	var text, from string
	switch {
	case c.DataKeyRef != "":
		key, err := dataKey(c, nil)
		if err != nil {
			return nil, err
		}
		if keyFingerprint(key) != m.DataKey.Fingerprint {
			return nil, backupErr(CodeRestoreDataKey, "data_key_ref names another key than the backup's (fingerprint %s)", m.DataKey.Fingerprint)
		}
		return key, nil
	case opts.DataKeyFile != "":
		from = opts.DataKeyFile
	case m.DataKey.Included:
		from = filepath.Join(stage, "data.key")
	default:
		from = filepath.Join(c.DataDir, "data.key")
	}
	b, err := os.ReadFile(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, backupErr(CodeRestoreDataKey, "the backup does not include its data key (%s): pass it with --data-key FILE, or set data_key_ref", m.DataKey.Ref)
	}
	if err != nil {
		return nil, err
	}
	text = string(b)
	key, err := secret.DecodeKey(text)
	if err != nil {
		return nil, backupErr(CodeRestoreDataKey, "%s: %v", from, err)
	}
	if keyFingerprint(key) != m.DataKey.Fingerprint {
		return nil, backupErr(CodeRestoreDataKey, "%s is another key than the backup's (fingerprint %s)", from, m.DataKey.Fingerprint)
	}
	return key, nil
}

func writeKeyFile(p string, key []byte) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return os.WriteFile(p, []byte(base64Key(key)+"\n"), 0o600)
}

// extract reads a backup archive into stage, checking each member against
// the manifest: a name it allows, the size and digest it records, and no
// member missing or extra.
func extract(file, stage string) (BackupManifest, error) {
	var m BackupManifest
	f, err := os.Open(file)
	if err != nil {
		return m, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return m, backupErr(CodeBackupInvalid, "%s is not a keeper backup (gzip): %v", file, err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil || h.Name != "manifest.json" || h.Size > maxManifest {
		return m, backupErr(CodeBackupInvalid, "%s is not a keeper backup: its first member is not manifest.json", file)
	}
	if err := json.NewDecoder(io.LimitReader(tr, maxManifest)).Decode(&m); err != nil {
		return m, backupErr(CodeBackupInvalid, "manifest.json: %v", err)
	}
	if m.Format == 1 {
		return m, backupErr(CodeBackupInvalid, "backup format 1 was made before backups were authenticated: restore it with the keeper version that made it (%s), then back up again", m.KeeperVersion)
	}
	if m.Format != BackupFormat {
		return m, backupErr(CodeBackupInvalid, "backup format %d; this keeper reads format %d", m.Format, BackupFormat)
	}
	want := map[string]BackupFile{}
	for _, bf := range m.Files {
		if !allowedMember(bf.Name) {
			return m, backupErr(CodeBackupInvalid, "manifest.json names %q, which no backup holds", bf.Name)
		}
		want[bf.Name] = bf
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return m, backupErr(CodeBackupInvalid, "read the archive: %v", err)
		}
		bf, ok := want[h.Name]
		if !ok || h.Typeflag != tar.TypeReg || h.Size != bf.Size {
			return m, backupErr(CodeBackupInvalid, "member %q is not in the manifest as it is", h.Name)
		}
		delete(want, h.Name)
		dst := filepath.Join(stage, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return m, err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(bf.Mode)&0o755|0o600)
		if err != nil {
			return m, err
		}
		hash := sha256.New()
		_, err = io.CopyN(io.MultiWriter(out, hash), tr, bf.Size)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return m, backupErr(CodeBackupInvalid, "member %q: %v", h.Name, err)
		}
		if hex.EncodeToString(hash.Sum(nil)) != bf.SHA256 {
			return m, backupErr(CodeBackupInvalid, "member %q does not match its digest in the manifest", h.Name)
		}
	}
	if len(want) > 0 {
		var missing []string
		for n := range want {
			missing = append(missing, n)
		}
		slices.Sort(missing)
		return m, backupErr(CodeBackupInvalid, "the archive lacks %s", strings.Join(missing, ", "))
	}
	return m, nil
}
