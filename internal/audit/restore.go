package audit

import (
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// restoreVersion is the format of a restore record.
const restoreVersion = 1

// restoreDomain starts the signed text of a restore record, so that no
// checkpoint or row hash can pass for one.
const restoreDomain = "soulstack audit restore v1\n"

// restoreExt ends the name of every restore record file; they live next
// to the checkpoints.
const restoreExt = ".restore.json"

// RestoreRecord is the signed statement `keeper restore` leaves next to
// the checkpoints: the log was restored from a backup taken at BackupAt
// whose last row was FromSeq with hash FromHash, and history continues
// from there. A checkpoint written after the backup and before the restore
// at a later row (Supersedes) recorded events the restore gave up; such a
// checkpoint is reported as superseded, not as a truncation. Superseded
// carries those the restore found, as evidence of what was lost.
//
// A restore cannot hide a truncation: the restored log must hold row
// FromSeq with FromHash, and a checkpoint written before the backup still
// holds the log to every row it records.
type RestoreRecord struct {
	Version    int          `json:"version"`
	KeeperID   string       `json:"keeper_id"`
	FromSeq    int64        `json:"from_seq"`
	FromHash   string       `json:"from_hash"`
	BackupAt   time.Time    `json:"backup_at"`
	RestoredAt time.Time    `json:"restored_at"`
	Superseded []Checkpoint `json:"superseded"`
	MAC        string       `json:"mac"`
}

func (k *Key) restoreMAC(r RestoreRecord) string {
	fields := []string{
		strconv.Itoa(r.Version), r.KeeperID, strconv.FormatInt(r.FromSeq, 10), r.FromHash,
		Normalize(r.BackupAt).Format(time.RFC3339Nano), Normalize(r.RestoredAt).Format(time.RFC3339Nano),
	}
	for _, c := range r.Superseded {
		fields = append(fields, c.MAC)
	}
	return k.signFields(restoreDomain, fields...)
}

// SignRestore fills in r's version and signature.
func (k *Key) SignRestore(r *RestoreRecord) {
	r.Version = restoreVersion
	r.BackupAt, r.RestoredAt = Normalize(r.BackupAt), Normalize(r.RestoredAt)
	r.MAC = k.restoreMAC(*r)
}

// ValidRestore reports whether r carries a good signature under k.
func (k *Key) ValidRestore(r RestoreRecord) bool {
	return r.Version == restoreVersion && hmac.Equal([]byte(r.MAC), []byte(k.restoreMAC(r)))
}

// Supersedes reports whether checkpoint c recorded rows the restore gave
// up: written after the backup was taken and before the restore, at a row
// past the backup's last.
func (r RestoreRecord) Supersedes(c Checkpoint) bool {
	return c.Seq > r.FromSeq && c.At.After(r.BackupAt) && c.At.Before(r.RestoredAt)
}

// RestorePath is the file in dir where a restore at restoredAt by keeper
// keeperID is recorded.
func RestorePath(dir, keeperID string, restoredAt time.Time) string {
	return filepath.Join(dir, "restore-"+keeperID+"-"+Normalize(restoredAt).UTC().Format("20060102T150405.000000Z")+restoreExt)
}

// WriteRestore writes r to path atomically (mode 0600).
func WriteRestore(path string, r RestoreRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write audit restore record: %w", err)
	}
	return nil
}

// RestoreFile is a restore record read from a file: Err is set when it
// does not parse or its signature is bad.
type RestoreFile struct {
	Path   string
	Record RestoreRecord
	Err    error
}

// ReadRestores reads every restore record in dir, in name order (which
// is the order of the restores of each keeper). A directory that does not
// exist holds none.
func ReadRestores(dir string, k *Key) ([]RestoreFile, error) {
	paths, err := filesEnding(dir, restoreExt)
	if err != nil {
		return nil, fmt.Errorf("read audit restore records: %w", err)
	}
	var out []RestoreFile
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read audit restore record: %w", err)
		}
		f := RestoreFile{Path: path}
		if err := json.Unmarshal(b, &f.Record); err != nil {
			f.Err = fmt.Errorf("%w: %v", ErrCheckpointInvalid, err)
		} else if !k.ValidRestore(f.Record) {
			f.Err = ErrCheckpointInvalid
		}
		out = append(out, f)
	}
	return out, nil
}

// superseded reports whether a valid restore among rs supersedes c.
func superseded(rs []RestoreFile, c Checkpoint) bool {
	for _, r := range rs {
		if r.Err == nil && r.Record.Supersedes(c) {
			return true
		}
	}
	return false
}
