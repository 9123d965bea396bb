package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// writeLog is a store that counts the run writes the recorder makes and
// records their order; the first failBatches batch writes fail as a
// database outage does.
type writeLog struct {
	store.Store
	mu          sync.Mutex
	ops         []string
	writes      int // store transactions for targets, events, steps, state
	failBatches atomic.Int32
}

func (w *writeLog) note(op string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, op)
	w.writes++
}

var errOutage = fmt.Errorf("dial tcp 127.0.0.1:5432: connection refused: %w", store.ErrUnavailable)

func (w *writeLog) failing() bool {
	for {
		n := w.failBatches.Load()
		if n <= 0 {
			return false
		}
		if w.failBatches.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (w *writeLog) RunTargetsSave(ctx context.Context, ts []store.RunTarget) error {
	if w.failing() {
		w.note("targets-failed")
		return errOutage
	}
	w.note(fmt.Sprintf("targets:%d", len(ts)))
	return w.Store.RunTargetsSave(ctx, ts)
}

func (w *writeLog) RunEventsAppend(ctx context.Context, es []store.RunEvent) error {
	if w.failing() {
		w.note("events-failed")
		return errOutage
	}
	op := fmt.Sprintf("events:%d", len(es))
	for _, e := range es {
		if e.Step != "" && e.Kind != string(client.EventStepFinished) {
			op += "+results"
			break
		}
	}
	w.note(op)
	return w.Store.RunEventsAppend(ctx, es)
}

func (w *writeLog) RunTargetSave(ctx context.Context, t store.RunTarget) error {
	w.note("target")
	return w.Store.RunTargetSave(ctx, t)
}

func (w *writeLog) RunEventAppend(ctx context.Context, e store.RunEvent) error {
	w.note("event")
	return w.Store.RunEventAppend(ctx, e)
}

func (w *writeLog) RunStepSave(ctx context.Context, s store.RunStep) error {
	w.note("step:" + s.Status)
	return w.Store.RunStepSave(ctx, s)
}

func (w *writeLog) RunStateSave(ctx context.Context, id, owner, sealed string) error {
	w.note("checkpoint")
	return w.Store.RunStateSave(ctx, id, owner, sealed)
}

func (w *writeLog) snapshot() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ops...), w.writes
}

// fanExec reports one fan-out step over n targets the way the engine does:
// the step running, its started event, each target's result and event from
// its own goroutine, the checkpoint, the step done and its finished event.
type fanExec struct{ n int }

func (f fanExec) Execute(ctx context.Context, x Execution, rec Recorder) Outcome {
	rec.Step(store.RunStep{Index: 0, Name: "fan", Module: "test.fan.ran", Status: string(client.StepRunning), StartedAt: new(time.Now())})
	sids := make([]string, f.n)
	for i := range sids {
		sids[i] = fmt.Sprintf("h%03d", i)
	}
	rec.Event("fan", "", client.StepStartedData{Index: 0, Module: "test.fan.ran", Targets: sids})
	var wg sync.WaitGroup
	for _, sid := range sids {
		wg.Go(func() {
			rec.Target(store.RunTarget{StepIndex: 0, SID: sid, Status: string(client.TargetChanged), Changed: true, Attempts: 1}, map[string]any{"sid": sid})
			rec.Event("fan", sid, client.TargetResultData{Status: client.TargetChanged, Changed: true})
		})
	}
	wg.Wait()
	// As the engine's note when the souls' contacts cannot be recorded:
	// one more event of the step, buffered just before the checkpoint.
	rec.Event("fan", "", client.LogData{Message: "contacts recorded"})
	if err := rec.Checkpoint([]byte(`{"done":["fan"]}`)); err != nil {
		return Outcome{Phase: store.PhaseFailed, ErrorCode: "test.checkpoint", ErrorMsg: err.Error()}
	}
	rec.Step(store.RunStep{Index: 0, Name: "fan", Module: "test.fan.ran", Status: string(client.StepChanged), FinishedAt: new(time.Now())})
	rec.Event("fan", "", client.StepFinishedData{Index: 0, Status: client.StepChanged, Changed: true})
	return Outcome{Phase: store.PhaseSucceeded}
}

// runFan executes one n-target run on a real runner over a real SQLite
// store wrapped by w and returns it finished.
func runFan(t *testing.T, w *writeLog, n int) store.Run {
	t.Helper()
	ctx := context.Background()
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	st := testdb.SQLite.Open(t)
	w.Store = st
	r, err := New(ctx, Config{Store: w, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: fanExec{n: n}, Owner: "keeper-test", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	})
	run, _, err := r.Submit(ctx, SubmitParams{Name: "fan", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := w.RunGet(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if store.Terminal(got.Phase) {
			// The finished event is stored just after the phase.
			for {
				evs, _ := w.Store.RunEvents(ctx, run.ID, 0, 10000)
				if len(evs) > 0 && evs[len(evs)-1].Kind == string(client.EventRunFinished) {
					return got
				}
				if time.Now().After(deadline) {
					t.Fatal("the run's finished event was not stored")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkComplete asserts every target row and every event of the run is
// stored exactly once, the events numbered 1..N without a gap.
func checkComplete(t *testing.T, st store.Store, id string, n int) {
	t.Helper()
	ctx := context.Background()
	steps, targets, err := st.RunSteps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Status != string(client.StepChanged) {
		t.Fatalf("steps = %+v", steps)
	}
	seen := map[string]bool{}
	for _, tg := range targets {
		if seen[tg.SID] || tg.Status != string(client.TargetChanged) || string(tg.Output) != fmt.Sprintf(`{"sid":%q}`, tg.SID) {
			t.Fatalf("target %+v (seen before: %v)", tg, seen[tg.SID])
		}
		seen[tg.SID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d target rows, want %d", len(seen), n)
	}
	evs, err := st.RunEvents(ctx, id, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	// run.phase, step.started, n results, a log, step.finished,
	// run.finished.
	if len(evs) != n+5 {
		t.Fatalf("%d events, want %d", len(evs), n+5)
	}
	results := map[string]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Kind == string(client.EventTargetResult) {
			results[e.SID]++
		}
	}
	for sid := range seen {
		if results[sid] != 1 {
			t.Fatalf("target %s has %d result events", sid, results[sid])
		}
	}
	want := []client.EventKind{client.EventRunPhase, client.EventStepStarted}
	for i, k := range want {
		if evs[i].Kind != string(k) {
			t.Fatalf("event %d is %s, want %s", i+1, evs[i].Kind, k)
		}
	}
	if evs[n+2].Kind != string(client.EventLog) || evs[n+3].Kind != string(client.EventStepFinished) || evs[n+4].Kind != string(client.EventRunFinished) {
		t.Fatalf("last events are %s, %s, %s", evs[n+2].Kind, evs[n+3].Kind, evs[n+4].Kind)
	}
}

// checkpointAfterFlush asserts that no target or event of the step is
// written after its checkpoint, and the step is saved done only after it.
func checkpointAfterFlush(t *testing.T, ops []string) {
	t.Helper()
	cp := -1
	for i, op := range ops {
		if op == "checkpoint" {
			cp = i
		}
	}
	if cp < 0 {
		t.Fatalf("no checkpoint in %v", ops)
	}
	for _, op := range ops[cp+1:] {
		if strings.HasPrefix(op, "targets") || op == "target" || strings.HasSuffix(op, "+results") {
			t.Fatalf("a target result written after the checkpoint (%s): %v", op, ops)
		}
	}
	for _, op := range ops[:cp] {
		if op == "step:"+string(client.StepChanged) {
			t.Fatalf("the step was saved done before its checkpoint: %v", ops)
		}
	}
	// The step's last results are flushed right before the checkpoint:
	// the write before it is the batch of the step's remaining events.
	if !strings.HasSuffix(ops[cp-1], "+results") {
		t.Fatalf("the checkpoint does not follow a flush: %v", ops[max(0, cp-3):cp+1])
	}
}

// TestFanOutStepIsWrittenInBatches: a 200-target step stores every target
// row and every event exactly once, in seq order, in far fewer store
// transactions than targets, and the checkpoint comes after the flush.
func TestFanOutStepIsWrittenInBatches(t *testing.T) {
	t.Parallel()
	const n = 200
	w := &writeLog{}
	run := runFan(t, w, n)
	if run.Phase != store.PhaseSucceeded {
		t.Fatalf("run = %s %s %s", run.Phase, run.ErrorCode, run.ErrorMsg)
	}
	checkComplete(t, w.Store, run.ID, n)
	ops, writes := w.snapshot()
	for _, op := range ops {
		if op == "target" || op == "event" {
			t.Fatalf("a single-row write (%s) in a run without failures: %v", op, ops)
		}
	}
	// 400 rows (200 targets, 200 events) at FlushAt = 64 a batch: about 7
	// full batches (each one or two transactions), plus the steps, the
	// checkpoint and the flushes at step and run end. One transaction per
	// row would be > 400.
	t.Logf("%d targets: %d store transactions: %v", n, writes, ops)
	if writes > 30 {
		t.Fatalf("%d store transactions for %d targets, want far fewer: %v", writes, n, ops)
	}
	checkpointAfterFlush(t, ops)
}

// TestBatchFlushIsRetried: batch writes that fail as a database outage are
// retried (persist) and the run's results are still complete, stored once.
func TestBatchFlushIsRetried(t *testing.T) {
	t.Parallel()
	const n = 200
	w := &writeLog{}
	w.failBatches.Store(3)
	run := runFan(t, w, n)
	if run.Phase != store.PhaseSucceeded {
		t.Fatalf("run = %s %s %s", run.Phase, run.ErrorCode, run.ErrorMsg)
	}
	checkComplete(t, w.Store, run.ID, n)
	ops, _ := w.snapshot()
	failed := 0
	for _, op := range ops {
		if strings.HasSuffix(op, "-failed") {
			failed++
		}
	}
	if failed != 3 {
		t.Fatalf("%d failed batch writes, want 3: %v", failed, ops)
	}
	checkpointAfterFlush(t, ops)
}

// TestRefusedBatchIsStoredRowByRow: a batch the database refuses for good
// (one row breaks a constraint) is written again row by row, so the other
// rows are kept.
func TestRefusedBatchIsStoredRowByRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	w := &writeLog{Store: st}
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(ctx, Config{Store: w, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: fanExec{}, Owner: "keeper-test", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	run, _, err := r.Submit(ctx, SubmitParams{Name: "fan", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RunStepSave(ctx, store.RunStep{RunID: run.ID, Index: 0, Name: "fan", Module: "m", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := st.RunEventAppend(ctx, store.RunEvent{RunID: run.ID, Seq: 2, At: time.Now(), Kind: "log", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{r: r, ctx: ctx, run: run, secrets: secret.NewSet()}
	for i := range 3 {
		rec.Event("fan", fmt.Sprintf("h%d", i), client.LogData{Message: "x"}) // seq 1..3; 2 is taken
	}
	if err := rec.flush(ctx); err == nil {
		t.Fatal("a flush with a taken seq reported no error")
	}
	evs, err := st.RunEvents(ctx, run.ID, 0, 100)
	if err != nil || len(evs) != 3 || evs[0].SID != "h0" || evs[1].Kind != "log" || evs[2].SID != "h2" {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	ops, _ := w.snapshot()
	if got := strings.Join(ops, " "); got != "events:3+results event event event" {
		t.Fatalf("writes = %v", ops)
	}
}
