package audit_test

import (
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
