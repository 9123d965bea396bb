package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testRunBatches: a batch of events is stored in its order with its seqs,
// a batch of targets inserts and replaces rows, and a batch that fails on
// one row (a seq already stored) stores none of its rows.
func testRunBatches(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_b", "", "d"), Actor: "tok_a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunStepSave(ctx, store.RunStep{RunID: "run_b", Index: 0, Name: "fan", Module: "core.command.ran", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunEventsAppend(ctx, nil); err != nil {
		t.Fatalf("empty event batch: %v", err)
	}
	if err := s.RunTargetsSave(ctx, nil); err != nil {
		t.Fatalf("empty target batch: %v", err)
	}

	// Events: two batches, seqs 1..100, read back in seq order.
	batch := func(from, to int64) []store.RunEvent {
		var es []store.RunEvent
		for i := from; i <= to; i++ {
			es = append(es, store.RunEvent{RunID: "run_b", Seq: i, At: time.Now(), Kind: "target", Step: "fan", SID: fmt.Sprintf("h%03d", i), Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		}
		return es
	}
	if err := s.RunEventsAppend(ctx, batch(1, 64)); err != nil {
		t.Fatal(err)
	}
	if err := s.RunEventsAppend(ctx, batch(65, 100)); err != nil {
		t.Fatal(err)
	}
	evs, err := s.RunEvents(ctx, "run_b", 0, 1000)
	if err != nil || len(evs) != 100 {
		t.Fatalf("events = %d, %v; want 100", len(evs), err)
	}
	for i, e := range evs {
		want := int64(i + 1)
		if e.Seq != want || e.SID != fmt.Sprintf("h%03d", want) || string(e.Data) != fmt.Sprintf(`{"n":%d}`, want) {
			t.Fatalf("event %d = seq %d sid %s data %s", i, e.Seq, e.SID, e.Data)
		}
	}

	// A batch whose last row repeats a stored seq changes nothing: the
	// new seqs before it are not stored either.
	bad := append(batch(101, 110), store.RunEvent{RunID: "run_b", Seq: 50, At: time.Now(), Kind: "log", Data: json.RawMessage(`{}`)})
	if err := s.RunEventsAppend(ctx, bad); err == nil {
		t.Fatal("a batch with a duplicate seq was accepted")
	}
	// A batch that repeats a seq within itself fails whole too.
	dup := append(batch(101, 103), batch(102, 102)...)
	if err := s.RunEventsAppend(ctx, dup); err == nil {
		t.Fatal("a batch with a seq twice was accepted")
	}
	evs, err = s.RunEvents(ctx, "run_b", 0, 1000)
	if err != nil || len(evs) != 100 || evs[49].SID != "h050" || evs[99].Seq != 100 {
		t.Fatalf("after failed batches: %d events, %v", len(evs), err)
	}
	if err := s.RunEventsAppend(ctx, batch(101, 110)); err != nil {
		t.Fatalf("the failed batch's new seqs, again: %v", err)
	}

	// Targets: a batch inserts, a later batch replaces some and adds others.
	var ts []store.RunTarget
	for i := range 70 {
		ts = append(ts, store.RunTarget{RunID: "run_b", StepIndex: 0, SID: fmt.Sprintf("h%03d", i), Status: "ok", Output: json.RawMessage(`{"rc":0}`), Attempts: 1, DurationMS: int64(i)})
	}
	if err := s.RunTargetsSave(ctx, ts); err != nil {
		t.Fatal(err)
	}
	again := []store.RunTarget{
		{RunID: "run_b", StepIndex: 0, SID: "h000", Status: "changed", Changed: true, Output: json.RawMessage(`{"rc":0}`), Attempts: 2},
		{RunID: "run_b", StepIndex: 0, SID: "h070", Status: "failed", ErrorCode: "module.failed", ErrorMsg: "no"},
	}
	if err := s.RunTargetsSave(ctx, again); err != nil {
		t.Fatal(err)
	}
	_, got, err := s.RunSteps(ctx, "run_b")
	if err != nil || len(got) != 71 {
		t.Fatalf("targets = %d, %v; want 71", len(got), err)
	}
	bySID := map[string]store.RunTarget{}
	for _, tg := range got {
		bySID[tg.SID] = tg
	}
	if h := bySID["h000"]; h.Status != "changed" || !h.Changed || h.Attempts != 2 {
		t.Fatalf("replaced target = %+v", h)
	}
	if h := bySID["h070"]; h.Status != "failed" || h.ErrorCode != "module.failed" || string(h.Output) != "null" {
		t.Fatalf("added target = %+v", h)
	}
	if h := bySID["h069"]; h.Status != "ok" || h.DurationMS != 69 {
		t.Fatalf("untouched target = %+v", h)
	}

	// A target batch that fails on one row (no such step) stores none.
	badT := []store.RunTarget{
		{RunID: "run_b", StepIndex: 0, SID: "h001", Status: "failed"},
		{RunID: "run_b", StepIndex: 0, SID: "h999", Status: "ok"},
		{RunID: "run_none", StepIndex: 0, SID: "h000", Status: "ok"},
	}
	if err := s.RunTargetsSave(ctx, badT); err == nil {
		t.Fatal("a target batch with a row of an unknown run was accepted")
	}
	_, got, _ = s.RunSteps(ctx, "run_b")
	bySID = map[string]store.RunTarget{}
	for _, tg := range got {
		bySID[tg.SID] = tg
	}
	if len(got) != 71 || bySID["h001"].Status != "ok" {
		t.Fatalf("after a failed target batch: %d targets, h001 = %+v", len(got), bySID["h001"])
	}
}
