package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/base"
)

// checkpointVersion is the format of a checkpoint file.
const checkpointVersion = 1

// checkpointDomain starts the signed text of a checkpoint; a row's hash
// input starts with a digit, so a row hash can never pass for a signature.
const checkpointDomain = "soulstack audit checkpoint v1\n"

// checkpointExt ends the name of every checkpoint file.
const checkpointExt = ".checkpoint.json"

// Checkpoint is a keeper's signed statement, kept outside the database,
// that the log held row Seq with hash Hash at time At. A log that ends
// before Seq was truncated; one whose row Seq has another hash was
// rewritten. KeyedFrom records where the keyed rows start, so that moving
// the boundary to pass recomputed rows as legacy ones is noticed.
type Checkpoint struct {
	Version   int       `json:"version"`
	KeeperID  string    `json:"keeper_id"`
	Seq       int64     `json:"seq"`
	Hash      string    `json:"hash"`
	KeyedFrom int64     `json:"keyed_from"`
	At        time.Time `json:"at"`
	MAC       string    `json:"mac"`
}

func (k *Key) checkpointMAC(c Checkpoint) string {
	return k.signFields(checkpointDomain, strconv.Itoa(c.Version), c.KeeperID, strconv.FormatInt(c.Seq, 10), c.Hash,
		strconv.FormatInt(c.KeyedFrom, 10), Normalize(c.At).Format(time.RFC3339Nano))
}

// signFields is the HMAC under k of domain and then each field,
// length-prefixed so that no two field lists give the same text.
func (k *Key) signFields(domain string, fields ...string) string {
	h := hmac.New(sha256.New, k.mac)
	h.Write([]byte(domain))
	for _, f := range fields {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Sign fills in c's version and signature.
func (k *Key) Sign(c *Checkpoint) {
	c.Version = checkpointVersion
	c.At = Normalize(c.At)
	c.MAC = k.checkpointMAC(*c)
}

// Valid reports whether c carries a good signature under k.
func (k *Key) Valid(c Checkpoint) bool {
	return c.Version == checkpointVersion && hmac.Equal([]byte(c.MAC), []byte(k.checkpointMAC(c)))
}

// CheckpointPath is the file in dir where keeper keeperID keeps its
// checkpoint. Each keeper writes only its own file, so that several keepers
// on one PostgreSQL can share a checkpoint directory.
func CheckpointPath(dir, keeperID string) string {
	return filepath.Join(dir, keeperID+checkpointExt)
}

// WriteCheckpoint writes c to path atomically: a temporary file in the same
// directory (mode 0600), synced, then renamed over the old one.
func WriteCheckpoint(path string, c Checkpoint) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write audit checkpoint: %w", err)
	}
	return nil
}

// writeAtomic writes b to path through a synced temporary file (mode
// 0600) in the same directory, renamed over the old file.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".checkpoint-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename this is a no-op
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(b); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable where the filesystem allows it
		d.Close()
	}
	return nil
}

// CheckpointFile is a checkpoint read from a file: Err is set when the file
// cannot be parsed or its signature is bad, and then Checkpoint is not to
// be trusted.
type CheckpointFile struct {
	Path       string
	Checkpoint Checkpoint
	Err        error
	// Live marks the running keeper's in-memory checkpoint (see
	// Checkpointer.Live), which is checked but not counted as a file.
	Live bool
}

// ErrCheckpointInvalid is the Err of a checkpoint file that does not parse
// or whose signature does not verify under the audit key.
var ErrCheckpointInvalid = errors.New("audit checkpoint is not signed by this audit key")

// ReadCheckpoint reads and checks one checkpoint file. A missing file is
// fs.ErrNotExist; any other failure is a CheckpointFile with Err set.
func ReadCheckpoint(path string, k *Key) (CheckpointFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return CheckpointFile{}, err
	}
	f := CheckpointFile{Path: path}
	if err := json.Unmarshal(b, &f.Checkpoint); err != nil {
		f.Err = fmt.Errorf("%w: %v", ErrCheckpointInvalid, err)
		return f, nil
	}
	if !k.Valid(f.Checkpoint) {
		f.Err = ErrCheckpointInvalid
	}
	return f, nil
}

// ReadCheckpoints reads every checkpoint file in dir, in name order. A
// directory that does not exist holds none.
func ReadCheckpoints(dir string, k *Key) ([]CheckpointFile, error) {
	paths, err := filesEnding(dir, checkpointExt)
	if err != nil {
		return nil, fmt.Errorf("read audit checkpoints: %w", err)
	}
	var out []CheckpointFile
	for _, p := range paths {
		f, err := ReadCheckpoint(p, k)
		if err != nil {
			return nil, fmt.Errorf("read audit checkpoint: %w", err)
		}
		out = append(out, f)
	}
	return out, nil
}

// filesEnding lists the regular files of dir whose names end in ext, in
// name order; a directory that does not exist holds none.
func filesEnding(dir, ext string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ext) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// CheckpointerConfig configures a Checkpointer.
type CheckpointerConfig struct {
	Dir      string // where checkpoint files live
	KeeperID string // names this keeper's file
	Key      *Key
	// Every is how many events may be appended between two checkpoints.
	Every int64
	// Base is the checkpointer's logger and clock.
	base.Base
}

// Checkpointer writes this keeper's checkpoint: when Start finds the log
// agreeing with the previous one, then every Every events the keeper
// appends, and on Flush (graceful shutdown). It only ever checkpoints a head
// this process committed itself (or found consistent at start), never moves
// a checkpoint backwards, and stops writing for good when the log
// contradicts the checkpoint, so that the evidence stays on disk.
type Checkpointer struct {
	cfg  CheckpointerConfig
	path string

	mu        sync.Mutex
	started   bool
	frozen    bool
	keyedFrom int64
	last      Checkpoint // the checkpoint on disk
	seen      Head       // the highest head this process committed
}

// NewCheckpointer returns a Checkpointer; it writes nothing before Start.
func NewCheckpointer(cfg CheckpointerConfig) *Checkpointer {
	cfg.Init()
	if cfg.Every <= 0 {
		cfg.Every = 100
	}
	return &Checkpointer{cfg: cfg, path: CheckpointPath(cfg.Dir, cfg.KeeperID)}
}

// Path is the file this keeper's checkpoint is written to.
func (c *Checkpointer) Path() string { return c.path }

// Start compares the log's head and the row at the previous checkpoint's
// sequence number (rowHash returns its hash, "" when there is no such row)
// with this keeper's previous checkpoint. When they agree, or there is no
// previous checkpoint (or a restore record in the directory supersedes
// it: see RestoreRecord), it writes a checkpoint of head. When they do
// not, it returns the problem and writes nothing, now or later: the old
// checkpoint is the evidence and is kept until an operator moves it aside.
func (c *Checkpointer) Start(head Head, rowHash func(seq int64) (string, error)) (*Problem, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if head.Missing {
		c.frozen = true
		return &Problem{Kind: ProblemHeadMismatch, Message: "the chain head row is missing from the database: it was deleted outside the keeper"}, nil
	}
	c.keyedFrom = head.KeyedFrom
	prev, err := ReadCheckpoint(c.path, c.cfg.Key)
	if err == nil && prev.Err == nil {
		restores, rerr := ReadRestores(c.cfg.Dir, c.cfg.Key)
		if rerr != nil {
			return nil, rerr
		}
		if superseded(restores, prev.Checkpoint) {
			// A restore gave up the rows it recorded; the restore record
			// holds it as evidence, and history continues from the backup.
			c.cfg.Log.Info("audit checkpoint superseded by a restore", "path", c.path, "seq", prev.Checkpoint.Seq)
			err = fs.ErrNotExist
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read audit checkpoint: %w", err)
	case prev.Err != nil:
		c.frozen = true
		p := checkpointInvalid(prev)
		return &p, nil
	default:
		ck := prev.Checkpoint
		var v Verifier
		v.checkpointAgainst(ck, prev.Path, head, rowHash)
		if len(v.report.Problems) > 0 {
			c.frozen = true
			return &v.report.Problems[0], nil
		}
		c.last = ck
		if ck.KeyedFrom < c.keyedFrom {
			c.keyedFrom = ck.KeyedFrom
		}
	}
	c.started = true
	if head.Seq > c.seen.Seq {
		c.seen = head
	}
	if err := c.writeLocked(); err != nil {
		return nil, err
	}
	return nil, nil
}

// Appended is called after each committed audit event with the new head;
// every Every events it writes a checkpoint. A failed write is logged, not
// returned: the event is already committed.
func (c *Checkpointer) Appended(h Head) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.Seq > c.seen.Seq {
		c.seen = h
	}
	if !c.started || c.frozen || c.seen.Seq-c.last.Seq < c.cfg.Every {
		return
	}
	if err := c.writeLocked(); err != nil {
		c.cfg.Log.Error("write audit checkpoint", "path", c.path, "err", err)
	}
}

// Flush writes a checkpoint of the last head this process committed, if
// it is newer than the one on disk. The keeper calls it on shutdown.
func (c *Checkpointer) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.frozen {
		return nil
	}
	return c.writeLocked()
}

// Live returns, as a checkpoint held in memory, the last head this process
// committed when it is newer than the checkpoint on disk, so that a
// running keeper's verification notices rows removed since its last
// checkpoint file. ok is false when there is nothing newer.
func (c *Checkpointer) Live() (f CheckpointFile, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.seen.Seq <= c.last.Seq {
		return CheckpointFile{}, false
	}
	ck := Checkpoint{KeeperID: c.cfg.KeeperID, Seq: c.seen.Seq, Hash: c.seen.Hash, KeyedFrom: c.keyedFrom, At: c.cfg.Now()}
	c.cfg.Key.Sign(&ck)
	return CheckpointFile{Path: "in memory", Checkpoint: ck, Live: true}, true
}

func (c *Checkpointer) writeLocked() error {
	if c.seen.Seq < c.last.Seq || (c.seen.Seq == c.last.Seq && c.last.MAC != "") {
		return nil
	}
	ck := Checkpoint{KeeperID: c.cfg.KeeperID, Seq: c.seen.Seq, Hash: c.seen.Hash, KeyedFrom: c.keyedFrom, At: c.cfg.Now()}
	c.cfg.Key.Sign(&ck)
	if err := WriteCheckpoint(c.path, ck); err != nil {
		return err
	}
	c.last = ck
	return nil
}
