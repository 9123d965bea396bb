package audit_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
)

func testKey(t *testing.T, root string) *audit.Key {
	t.Helper()
	k, err := audit.DeriveKey([]byte(root))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// chain returns n events sealed by k, and the head after them.
func chain(k *audit.Key, n int) ([]audit.Event, audit.Head) {
	head := audit.Head{Hash: audit.GenesisHash, KeyedFrom: 1}
	var evs []audit.Event
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range n {
		e := audit.Event{At: at.Add(time.Duration(i) * time.Second), ActorAID: "tok_a", Action: "provider.created", Object: "provider/p", Payload: "{}"}
		head = k.Seal(&e, head)
		evs = append(evs, e)
	}
	return evs, head
}

func verify(k *audit.Key, evs []audit.Event, head audit.Head, cps []audit.CheckpointFile) audit.Report {
	v := audit.NewVerifier(k, cps)
	for _, e := range evs {
		v.Add(e)
	}
	return v.Finish(head)
}

func TestDeriveKey(t *testing.T) {
	t.Parallel()
	if _, err := audit.DeriveKey([]byte("short")); err == nil {
		t.Fatal("a 5-byte root was accepted")
	}
	a, b := testKey(t, strings.Repeat("a", 32)), testKey(t, strings.Repeat("b", 32))
	evs, _ := chain(a, 1)
	if a.Hash(evs[0]) == b.Hash(evs[0]) {
		t.Fatal("two roots give the same audit key")
	}
	if a.Hash(evs[0]) == audit.LegacyHash(evs[0]) {
		t.Fatal("the keyed hash is the plain SHA-256")
	}
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	k := testKey(t, "the root of the audit key, 32 by")
	tests := []struct {
		name   string
		edit   func(evs []audit.Event, head audit.Head) ([]audit.Event, audit.Head)
		want   string // "kind@seq", "" for a clean report
		legacy int64
	}{
		{"clean", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) { return e, h }, "", 0},
		{"edited row", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			e[2].Payload = `{"x":1}`
			return e, h
		}, "audit.row_tampered@3", 0},
		{"several edited rows", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			e[1].Payload = `{"x":1}`
			e[2].Payload = `{"x":2}`
			return e, h
		}, "audit.row_tampered@2", 0},
		{"missing middle row", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			return append(e[:1:1], e[2:]...), h
		}, "audit.rows_missing@3", 0},
		{"relinked row", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			e[3].PrevHash = e[1].Hash
			return e, h
		}, "audit.relinked@4", 0},
		{"last rows gone, head left", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			return e[:3], h
		}, "audit.truncated@4", 0},
		{"all rows gone, head left", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			return nil, h
		}, "audit.emptied@5", 0},
		{"rows added after the head", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			return e, audit.Head{Seq: 4, Hash: e[3].Hash, KeyedFrom: 1}
		}, "audit.head_mismatch@5", 0},
		{"recomputed with SHA-256", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			prev := audit.GenesisHash
			for i := range e {
				e[i].PrevHash = prev
				e[i].Hash = audit.LegacyHash(e[i])
				prev = e[i].Hash
			}
			return e, audit.Head{Seq: 5, Hash: prev, KeyedFrom: 1}
		}, "audit.unkeyed@1", 0},
		{"legacy prefix", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			// Rows 1..2 written by an older keeper, 3..5 keyed on top.
			prev := audit.GenesisHash
			for i := range e {
				e[i].PrevHash = prev
				if i < 2 {
					e[i].Hash = audit.LegacyHash(e[i])
				} else {
					e[i].Hash = k.Hash(e[i])
				}
				prev = e[i].Hash
			}
			return e, audit.Head{Seq: 5, Hash: prev, KeyedFrom: 3}
		}, "", 2},
		{"unkeyed row between keyed ones", func(e []audit.Event, h audit.Head) ([]audit.Event, audit.Head) {
			e[2].Object = "provider/forged"
			e[2].Hash = audit.LegacyHash(e[2])
			e[3].PrevHash = e[2].Hash
			e[3].Hash = k.Hash(e[3])
			e[4].PrevHash = e[3].Hash
			e[4].Hash = k.Hash(e[4])
			return e, audit.Head{Seq: 5, Hash: e[4].Hash, KeyedFrom: 1}
		}, "audit.unkeyed@3", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			evs, head := chain(k, 5)
			evs, head = tc.edit(evs, head)
			r := verify(k, evs, head, nil)
			if tc.want == "" {
				if !r.OK || r.Legacy != tc.legacy {
					t.Fatalf("report = %+v, want ok with %d legacy rows", r, tc.legacy)
				}
				return
			}
			if r.OK || len(r.Problems) == 0 {
				t.Fatalf("report = %+v, want %s", r, tc.want)
			}
			got := r.Problems[0].Kind + "@" + strconv.FormatInt(r.Problems[0].Seq, 10)
			if got != tc.want {
				t.Fatalf("first problem = %s (%+v), want %s", got, r.Problems, tc.want)
			}
		})
	}
}

func TestVerifierWrongKey(t *testing.T) {
	t.Parallel()
	evs, head := chain(testKey(t, "the root of the audit key, 32 by"), 4)
	r := verify(testKey(t, "not the root the rows were keyed"), evs, head, nil)
	if r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != audit.ProblemRowTampered || !strings.Contains(r.Problems[0].Message, "rows 1..4, every row of the log") {
		t.Fatalf("verify with another key = %+v, want one finding naming the key", r)
	}
}

func TestCheckpoints(t *testing.T) {
	t.Parallel()
	k := testKey(t, "the root of the audit key, 32 by")
	evs, head := chain(k, 6)
	dir := t.TempDir()
	cp := audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-a", Key: k, Every: 4})
	rowHash := func(seq int64) (string, error) {
		if seq < 1 || seq > int64(len(evs)) {
			return "", nil
		}
		return evs[seq-1].Hash, nil
	}
	if p, err := cp.Start(audit.Head{Seq: 2, Hash: evs[1].Hash, KeyedFrom: 1}, rowHash); p != nil || err != nil {
		t.Fatalf("start: %+v %v", p, err)
	}
	read := func() audit.CheckpointFile {
		t.Helper()
		f, err := audit.ReadCheckpoint(cp.Path(), k)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := read(); f.Err != nil || f.Checkpoint.Seq != 2 {
		t.Fatalf("start checkpoint = %+v", f)
	}
	for _, e := range evs[2:5] {
		cp.Appended(audit.Head{Seq: e.Seq, Hash: e.Hash})
	}
	if f := read(); f.Checkpoint.Seq != 2 {
		t.Fatalf("checkpoint after 3 of every 4 events = %+v", f.Checkpoint)
	}
	if live, ok := cp.Live(); !ok || live.Checkpoint.Seq != 5 || !k.Valid(live.Checkpoint) {
		t.Fatalf("live checkpoint = %+v, %v", live, ok)
	}
	cp.Appended(audit.Head{Seq: 6, Hash: evs[5].Hash})
	if f := read(); f.Checkpoint.Seq != 6 || f.Checkpoint.Hash != evs[5].Hash {
		t.Fatalf("checkpoint after 4 events = %+v", f.Checkpoint)
	}
	// An older head reported late never moves the checkpoint back.
	cp.Appended(audit.Head{Seq: 3, Hash: evs[2].Hash})
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	if f := read(); f.Checkpoint.Seq != 6 {
		t.Fatalf("checkpoint moved back: %+v", f.Checkpoint)
	}
	cps, err := audit.ReadCheckpoints(dir, k)
	if err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints = %+v, %v", cps, err)
	}
	if r := verify(k, evs, head, cps); !r.OK || r.Checkpoints != 1 {
		t.Fatalf("verify with the checkpoint: %+v", r)
	}
	// The verifier with another key rejects the checkpoint's signature.
	other := testKey(t, "another root of an audit key, 32")
	cps, _ = audit.ReadCheckpoints(dir, other)
	if len(cps) != 1 || cps[0].Err == nil {
		t.Fatalf("checkpoint signed with another key accepted: %+v", cps)
	}
	// A file that is not JSON is invalid too, and named.
	if err := os.WriteFile(filepath.Join(dir, "keeper-b.checkpoint.json"), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	cps, _ = audit.ReadCheckpoints(dir, k)
	r := verify(k, evs, head, cps)
	if r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != audit.ProblemCheckpointInvalid || !strings.Contains(r.Problems[0].Message, "keeper-b") {
		t.Fatalf("unparsable checkpoint: %+v", r)
	}
}

// sliceScanner is a log held in memory.
type sliceScanner struct {
	evs  []audit.Event
	head audit.Head
}

func (s sliceScanner) AuditScan(_ context.Context, fn func(audit.Event) error) (audit.Head, error) {
	for _, e := range s.evs {
		if err := fn(e); err != nil {
			return audit.Head{}, err
		}
	}
	return s.head, nil
}

// TestRestoreRecords: a log restored from a backup verifies with the
// signed restore record, which supersedes a checkpoint written between the
// backup and the restore; the record cannot hide a truncation: of the
// restored log below the backup's last row, or one that a checkpoint
// written before the backup records; nor can a record signed by another
// key; a keeper whose own checkpoint a restore superseded starts afresh.
func TestRestoreRecords(t *testing.T) {
	t.Parallel()
	k := testKey(t, "the root of the audit key, 32 by")
	ctx := context.Background()
	evs, _ := chain(k, 10)
	at := func(seq int) time.Time { return evs[seq-1].At }
	ck := func(seq int, written time.Time) audit.CheckpointFile {
		c := audit.Checkpoint{KeeperID: "keeper-a", Seq: int64(seq), Hash: evs[seq-1].Hash, KeyedFrom: 1, At: written}
		k.Sign(&c)
		return audit.CheckpointFile{Path: "keeper-a.checkpoint.json", Checkpoint: c}
	}
	// The backup holds rows 1..6; the live log went on to row 10, and a
	// checkpoint recorded row 9 before the restore.
	before, after := ck(4, at(4)), ck(9, at(9))
	rec := audit.RestoreRecord{KeeperID: "keeper-b", FromSeq: 6, FromHash: evs[5].Hash, BackupAt: at(6).Add(time.Millisecond),
		RestoredAt: at(10).Add(time.Minute), Superseded: []audit.Checkpoint{after.Checkpoint}}
	k.SignRestore(&rec)
	dir := t.TempDir()
	path := audit.RestorePath(dir, "keeper-b", rec.RestoredAt)
	if err := audit.WriteRestore(path, rec); err != nil {
		t.Fatal(err)
	}
	restores, err := audit.ReadRestores(dir, k)
	if err != nil || len(restores) != 1 || restores[0].Err != nil {
		t.Fatalf("restore records = %+v, %v", restores, err)
	}
	// The restored log: the backup's rows, then the restore's own event.
	restored := append([]audit.Event{}, evs[:6]...)
	e := audit.Event{At: rec.RestoredAt, ActorAID: "host", Action: "keeper.restored", Object: "keeper/keeper-b", Payload: "{}"}
	head := k.Seal(&e, audit.Head{Seq: 6, Hash: evs[5].Hash, KeyedFrom: 1})
	restored = append(restored, e)
	run := func(evs []audit.Event, head audit.Head, cps []audit.CheckpointFile, rs []audit.RestoreFile) audit.Report {
		t.Helper()
		r, err := audit.VerifyRestored(ctx, sliceScanner{evs, head}, k, cps, rs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kinds := func(r audit.Report) string {
		var out []string
		for _, p := range r.Problems {
			out = append(out, p.Kind+"@"+strconv.FormatInt(p.Seq, 10))
		}
		return strings.Join(out, " ")
	}
	if r := run(restored, head, []audit.CheckpointFile{before, after}, restores); !r.OK || r.Restores != 1 || r.Superseded != 1 || r.Checkpoints != 2 {
		t.Fatalf("restored log with its record: %+v", r)
	}
	if r := run(restored, head, []audit.CheckpointFile{before, after}, nil); r.OK || kinds(r) != "audit.truncated@9" {
		t.Fatalf("restored log without the record = %s, want audit.truncated@9", kinds(r))
	}
	// Rows removed from the restored log below the backup's last row.
	cut := restored[:5]
	if r := run(cut, audit.Head{Seq: 5, Hash: cut[4].Hash, KeyedFrom: 1}, []audit.CheckpointFile{before, after}, restores); r.OK || kinds(r) != "audit.truncated@6" {
		t.Fatalf("restored log truncated below the backup = %s, want audit.truncated@6", kinds(r))
	}
	// A checkpoint written before the backup at a later row: the backup's
	// own log had been truncated, and the restore supersedes nothing.
	early := ck(8, at(6))
	if r := run(restored, head, []audit.CheckpointFile{before, early}, restores); r.OK || kinds(r) != "audit.truncated@8" {
		t.Fatalf("checkpoint from before the backup = %s, want audit.truncated@8", kinds(r))
	}
	// A record signed by someone without the audit key.
	other := testKey(t, "another root of an audit key, 32")
	forged, _ := audit.ReadRestores(dir, other)
	if r := run(restored, head, []audit.CheckpointFile{before}, forged); r.OK || kinds(r) != "audit.checkpoint_invalid@6" {
		t.Fatalf("forged restore record = %s", kinds(r))
	}
	if r := run(restored, head, []audit.CheckpointFile{before, after}, forged); r.OK {
		t.Fatalf("a forged restore record superseded a checkpoint: %+v", r)
	}

	// keeper-a's own checkpoint (row 9) is superseded: its checkpointer
	// starts on the restored log and writes a fresh one.
	cpA := audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-a", Key: k})
	if err := audit.WriteCheckpoint(cpA.Path(), after.Checkpoint); err != nil {
		t.Fatal(err)
	}
	rowHash := func(seq int64) (string, error) {
		if seq < 1 || seq > int64(len(restored)) {
			return "", nil
		}
		return restored[seq-1].Hash, nil
	}
	if p, err := cpA.Start(head, rowHash); p != nil || err != nil {
		t.Fatalf("start over a superseded checkpoint: %+v %v", p, err)
	}
	if f, err := audit.ReadCheckpoint(cpA.Path(), k); err != nil || f.Checkpoint.Seq != 7 || f.Checkpoint.Hash != e.Hash {
		t.Fatalf("checkpoint after the start = %+v, %v", f.Checkpoint, err)
	}
	// Without the record the same start finds the truncation and freezes.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := audit.WriteCheckpoint(cpA.Path(), after.Checkpoint); err != nil {
		t.Fatal(err)
	}
	cpA = audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-a", Key: k})
	if p, err := cpA.Start(head, rowHash); err != nil || p == nil || p.Kind != audit.ProblemTruncated {
		t.Fatalf("start without the record = %+v, %v", p, err)
	}
}
