package audit

import (
	"context"
	"crypto/hmac"
	"fmt"
)

// Problem kinds reported by the verifier: stable dotted codes, shown to
// users and matched by scripts.
const (
	// ProblemRowTampered: the row's content no longer matches its hash.
	ProblemRowTampered = "audit.row_tampered"
	// ProblemRowsMissing: rows are missing before this one.
	ProblemRowsMissing = "audit.rows_missing"
	// ProblemRelinked: the row's prev_hash does not name the row before it.
	ProblemRelinked = "audit.relinked"
	// ProblemHeadMismatch: the recorded chain head is not the log's last row.
	ProblemHeadMismatch = "audit.head_mismatch"
	// ProblemTruncated: the log ends before a row that the chain head or a
	// signed checkpoint recorded.
	ProblemTruncated = "audit.truncated"
	// ProblemEmptied: the log has no rows, but the chain head or a signed
	// checkpoint recorded some.
	ProblemEmptied = "audit.emptied"
	// ProblemUnkeyed: rows that must carry an HMAC under the audit key hold
	// a plain SHA-256 instead: the chain was recomputed by someone without
	// the key.
	ProblemUnkeyed = "audit.unkeyed"
	// ProblemCheckpointMismatch: the row at a checkpoint's sequence number
	// has another hash than the checkpoint recorded: history was rewritten.
	ProblemCheckpointMismatch = "audit.checkpoint_mismatch"
	// ProblemCheckpointInvalid: a checkpoint file does not parse or its
	// signature does not verify under the audit key.
	ProblemCheckpointInvalid = "audit.checkpoint_invalid"
)

// Problem is one finding of Verify, naming the row it concerns (for a
// checkpoint problem, the checkpoint's sequence number).
type Problem struct {
	Seq     int64  `json:"seq"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Report is the outcome of verifying a chain. Legacy is the number of rows
// at the start of the log that carry a plain SHA-256 because an older
// keeper wrote them without an audit key; Checkpoints is the number of
// signed checkpoint files the log was checked against (a running keeper
// also checks it against the last head it committed, held in memory).
type Report struct {
	OK          bool  `json:"ok"`
	Checked     int64 `json:"checked"`
	HeadSeq     int64 `json:"head_seq"`
	Legacy      int64 `json:"legacy"`
	Checkpoints int   `json:"checkpoints"`
	// Restores is the number of valid restore records the log was checked
	// against; Superseded the checkpoints they supersede (rows given up
	// by a restore, reported, not counted as problems).
	Restores   int       `json:"restores"`
	Superseded int       `json:"superseded"`
	Problems   []Problem `json:"problems"`
}

// Scanner reads the chain head and every event in one consistent snapshot,
// in sequence order (the store implements it).
type Scanner interface {
	AuditScan(ctx context.Context, fn func(Event) error) (Head, error)
}

// Verify checks the whole log that s holds against key and the checkpoint
// files.
func Verify(ctx context.Context, s Scanner, key *Key, checkpoints []CheckpointFile) (Report, error) {
	return VerifyRestored(ctx, s, key, checkpoints, nil)
}

// VerifyRestored checks the log as Verify does, and against the restore
// records of the checkpoint directory: each must find its backup's last
// row in the log, and the checkpoints it supersedes are counted as such
// (Report.Superseded), not as truncations.
func VerifyRestored(ctx context.Context, s Scanner, key *Key, checkpoints []CheckpointFile, restores []RestoreFile) (Report, error) {
	v := NewVerifier(key, checkpoints)
	v.restores = restores
	for _, r := range restores {
		if r.Err == nil {
			v.atSeq[r.Record.FromSeq] = ""
		}
	}
	head, err := s.AuditScan(ctx, func(e Event) error { v.Add(e); return nil })
	if err != nil {
		return Report{}, err
	}
	return v.Finish(head), nil
}

// Verifier checks events one at a time, in sequence order, so that a log of
// any length is verified in constant memory (plus one hash per checkpoint).
type Verifier struct {
	key         *Key
	checkpoints []CheckpointFile
	restores    []RestoreFile
	atSeq       map[int64]string // the hash seen at each checkpoint's seq

	prevSeq  int64
	prevHash string
	rows     int64

	sawKeyed    bool
	legacyEnd   int64 // the last row of the unkeyed prefix
	unkeyedFrom int64 // a run of unkeyed rows after keyed ones
	unkeyedTo   int64
	tampered    Event // the first row of a run of rows that match no hash
	tamperedTo  int64
	sawGood     bool // some row matched its hash

	report Report
}

// NewVerifier returns a verifier of rows keyed with key, which also checks
// the log against the given checkpoint files.
func NewVerifier(key *Key, checkpoints []CheckpointFile) *Verifier {
	v := &Verifier{key: key, checkpoints: checkpoints, atSeq: map[int64]string{}}
	for _, f := range checkpoints {
		if f.Err == nil {
			v.atSeq[f.Checkpoint.Seq] = ""
		}
	}
	return v
}

// Add checks the next event read from the log.
func (v *Verifier) Add(e Event) {
	v.report.Checked++
	v.rows++
	expectPrev := v.prevHash
	if v.prevSeq == 0 {
		expectPrev = GenesisHash
	}
	if e.Seq != v.prevSeq+1 {
		v.problem(e.Seq, ProblemRowsMissing, fmt.Sprintf("rows %d..%d are missing before row %d", v.prevSeq+1, e.Seq-1, e.Seq))
	} else if e.PrevHash != expectPrev {
		v.problem(e.Seq, ProblemRelinked, fmt.Sprintf("row %d does not chain to row %d: prev_hash differs", e.Seq, v.prevSeq))
	}
	switch {
	case hmac.Equal([]byte(v.key.Hash(e)), []byte(e.Hash)):
		v.sawKeyed, v.sawGood = true, true
		v.flushUnkeyed()
		v.flushTampered()
	case LegacyHash(e) == e.Hash:
		v.sawGood = true
		v.flushTampered()
		if !v.sawKeyed {
			v.legacyEnd = e.Seq
		} else {
			if v.unkeyedFrom == 0 {
				v.unkeyedFrom = e.Seq
			}
			v.unkeyedTo = e.Seq
		}
	default:
		v.flushUnkeyed()
		if v.tamperedTo == 0 {
			v.tampered = e
		}
		v.tamperedTo = e.Seq
	}
	if _, ok := v.atSeq[e.Seq]; ok {
		v.atSeq[e.Seq] = e.Hash
	}
	v.prevSeq, v.prevHash = e.Seq, e.Hash
}

func (v *Verifier) flushUnkeyed() {
	if v.unkeyedFrom == 0 {
		return
	}
	v.problem(v.unkeyedFrom, ProblemUnkeyed, unkeyedMessage(v.unkeyedFrom, v.unkeyedTo))
	v.unkeyedFrom, v.unkeyedTo = 0, 0
}

// flushTampered reports a run of rows that match no hash as one problem,
// so that a log read with the wrong key is one finding, not one per row.
func (v *Verifier) flushTampered() {
	if v.tamperedTo == 0 {
		return
	}
	e := v.tampered
	switch {
	case v.tamperedTo == e.Seq:
		v.problem(e.Seq, ProblemRowTampered, fmt.Sprintf("row %d (%s %s) was changed after it was written: its hash does not match its content", e.Seq, e.Action, e.Object))
	case !v.sawGood && e.Seq == 1 && v.tamperedTo == v.prevSeq:
		v.problem(e.Seq, ProblemRowTampered, fmt.Sprintf("rows %d..%d, every row of the log, do not match their hashes: the audit key is probably not the one they were written with (check data_key_ref and audit_key_ref), or every row was changed", e.Seq, v.tamperedTo))
	default:
		v.problem(e.Seq, ProblemRowTampered, fmt.Sprintf("rows %d..%d were changed after they were written: their hashes do not match their content", e.Seq, v.tamperedTo))
	}
	v.tampered, v.tamperedTo = Event{}, 0
}

func unkeyedMessage(from, to int64) string {
	return fmt.Sprintf("rows %d..%d carry a plain SHA-256, not an HMAC under the audit key: the chain was recomputed by someone without the key", from, to)
}

// Finish compares the last event seen with the recorded head and the
// checkpoints, and returns the report.
func (v *Verifier) Finish(head Head) Report {
	v.flushUnkeyed()
	v.flushTampered()
	v.report.HeadSeq = head.Seq

	// Rows before the keyed boundary may be legacy ones; the boundary is
	// the earliest of the database's and every signed checkpoint's, so
	// that moving it forward in the database passes no row.
	boundary := head.KeyedFrom
	if boundary < 1 {
		boundary = 1
	}
	for _, f := range v.checkpoints {
		if f.Err == nil && f.Checkpoint.KeyedFrom >= 1 && f.Checkpoint.KeyedFrom < boundary {
			boundary = f.Checkpoint.KeyedFrom
		}
	}
	v.report.Legacy = min(v.legacyEnd, boundary-1)
	if v.legacyEnd >= boundary {
		v.problem(boundary, ProblemUnkeyed, unkeyedMessage(boundary, v.legacyEnd))
	}

	switch {
	case head.Missing:
		v.problem(0, ProblemHeadMismatch, "the chain head row is missing from the database: it was deleted outside the keeper")
	case head.Seq > v.prevSeq && v.rows == 0:
		v.problem(head.Seq, ProblemEmptied, fmt.Sprintf("the log has no rows, but its head records row %d", head.Seq))
	case head.Seq > v.prevSeq:
		v.problem(v.prevSeq+1, ProblemTruncated, fmt.Sprintf("rows %d..%d are missing at the end of the log: its head records row %d", v.prevSeq+1, head.Seq, head.Seq))
	case head.Seq == v.prevSeq && head.Hash != v.prevHash && head.Seq > 0:
		v.problem(head.Seq, ProblemHeadMismatch, fmt.Sprintf("row %d is not the row the chain head recorded", head.Seq))
	case head.Seq < v.prevSeq:
		v.problem(head.Seq+1, ProblemHeadMismatch, fmt.Sprintf("rows after %d were added outside the keeper: the chain head records row %d", head.Seq, head.Seq))
	}

	last := Head{Seq: v.prevSeq, Hash: v.prevHash}
	rowHash := func(seq int64) (string, error) { return v.atSeq[seq], nil }
	for _, r := range v.restores {
		if r.Err != nil {
			v.problem(r.Record.FromSeq, ProblemCheckpointInvalid, fmt.Sprintf("restore record %s: %v", r.Path, r.Err))
			continue
		}
		v.report.Restores++
		rc := r.Record
		// The restore's statement about its backup's last row is held
		// to the log like a checkpoint's.
		v.checkpointAgainst(Checkpoint{KeeperID: rc.KeeperID, Seq: rc.FromSeq, Hash: rc.FromHash, At: rc.BackupAt}, r.Path, last, rowHash)
	}
	for _, f := range v.checkpoints {
		if f.Err != nil {
			p := checkpointInvalid(f)
			v.report.Problems = append(v.report.Problems, p)
			continue
		}
		if !f.Live {
			v.report.Checkpoints++
		}
		ck := f.Checkpoint
		if !f.Live && superseded(v.restores, ck) {
			v.report.Superseded++
			continue
		}
		v.checkpointAgainst(ck, f.Path, last, rowHash)
	}
	v.report.OK = len(v.report.Problems) == 0
	if v.report.Problems == nil {
		v.report.Problems = []Problem{}
	}
	return v.report
}

// checkpointAgainst compares a valid checkpoint with the log whose last row
// is last; rowHash gives the hash of the row at a sequence number ("" when
// there is none).
func (v *Verifier) checkpointAgainst(ck Checkpoint, path string, last Head, rowHash func(int64) (string, error)) {
	if ck.Seq == 0 {
		return
	}
	who := fmt.Sprintf("the checkpoint of keeper %s (%s, written %s)", ck.KeeperID, path, ck.At.UTC().Format("2006-01-02T15:04:05Z"))
	switch {
	case last.Seq == 0:
		v.problem(ck.Seq, ProblemEmptied, fmt.Sprintf("the log has no rows, but %s records row %d with hash %s", who, ck.Seq, short(ck.Hash)))
	case last.Seq < ck.Seq:
		v.problem(ck.Seq, ProblemTruncated, fmt.Sprintf("%s records row %d with hash %s, but the log ends at row %d", who, ck.Seq, short(ck.Hash), last.Seq))
	default:
		got, err := rowHash(ck.Seq)
		switch {
		case err != nil:
			v.problem(ck.Seq, ProblemCheckpointMismatch, fmt.Sprintf("row %d cannot be read to compare with %s: %v", ck.Seq, who, err))
		case got == "":
			v.problem(ck.Seq, ProblemCheckpointMismatch, fmt.Sprintf("row %d, which %s records with hash %s, is missing", ck.Seq, who, short(ck.Hash)))
		case got != ck.Hash:
			v.problem(ck.Seq, ProblemCheckpointMismatch, fmt.Sprintf("row %d has hash %s, but %s records %s: the log was rewritten", ck.Seq, short(got), who, short(ck.Hash)))
		}
	}
}

func checkpointInvalid(f CheckpointFile) Problem {
	return Problem{Seq: f.Checkpoint.Seq, Kind: ProblemCheckpointInvalid, Message: fmt.Sprintf("checkpoint file %s: %v", f.Path, f.Err)}
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

func (v *Verifier) problem(seq int64, kind, msg string) {
	v.report.Problems = append(v.report.Problems, Problem{Seq: seq, Kind: kind, Message: msg})
}
