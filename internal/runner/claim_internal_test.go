package runner

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// blockingExec counts its executions and holds each until release.
type blockingExec struct {
	started atomic.Int32
	running chan struct{}
	release chan struct{}
}

func (b *blockingExec) Execute(ctx context.Context, x Execution, rec Recorder) Outcome {
	b.started.Add(1)
	b.running <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return Outcome{Phase: store.PhaseSucceeded}
}

// TestDuplicateJobsDoNotExecuteARunTwice: when a stale run is re-enqueued
// by several keepers, more than one queue job for it may reach the keeper
// that took it over. Its lease names that keeper, so only the runner's own
// record of what it executes keeps the extra jobs from executing the run a
// second time alongside the first.
func TestDuplicateJobsDoNotExecuteARunTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	exec := &blockingExec{running: make(chan struct{}, 8), release: make(chan struct{})}
	r, err := New(ctx, Config{Store: st, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: exec, Owner: "keeper-test", Workers: 8})
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
	run, _, err := r.Submit(ctx, SubmitParams{Name: "once", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	<-exec.running
	const extra = 3
	for range extra {
		if _, err := r.river.Insert(ctx, RunArgs{RunID: run.ID}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the queue has worked the extra jobs (the first one is
	// still running).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var done int
		if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done == extra {
			break
		}
		if n := exec.started.Load(); n > 1 {
			t.Fatalf("the run is executing %d times at once, want 1", n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d extra jobs completed within 30 s", done, extra)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := exec.started.Load(); n != 1 {
		t.Fatalf("the run was executed %d times at once, want 1", n)
	}
	close(exec.release)
	for {
		got, err := st.RunGet(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if store.Terminal(got.Phase) {
			if got.Phase != store.PhaseSucceeded {
				t.Fatalf("run = %s %s", got.Phase, got.ErrorCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := exec.started.Load(); n != 1 {
		t.Fatalf("the run was executed %d times, want 1", n)
	}
}

// TestStuckJobOfDeadKeeperIsRequeued: a keeper that took a run's queue job
// and died before it claimed the run leaves the job "running" in the queue
// and the run Pending without a lease. Another keeper (here: this one,
// started later) gives the run a fresh job and executes it.
func TestStuckJobOfDeadKeeperIsRequeued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	exec := &blockingExec{running: make(chan struct{}, 8), release: make(chan struct{})}
	close(exec.release)
	r, err := New(ctx, Config{Store: st, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: exec, Owner: "keeper-live", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	run, _, err := r.Submit(ctx, SubmitParams{Name: "stuck", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	// What a keeper dying between taking the job and claiming the run
	// leaves behind.
	res, err := st.DB().ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 minute'), attempted_by = '["keeper-dead"]'`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d queue jobs, want 1", n)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := st.RunGet(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if store.Terminal(got.Phase) {
			if got.Phase != store.PhaseSucceeded {
				t.Fatalf("run = %s %s", got.Phase, got.ErrorCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still %s 30 s after a keeper started: its stuck job was not replaced", got.Phase)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := exec.started.Load(); n != 1 {
		t.Fatalf("the run was executed %d times, want 1", n)
	}
}

// heartbeatFails is a store whose heartbeats fail as when the database is
// unreachable from this keeper, once fail is set.
type heartbeatFails struct {
	store.Store
	fail atomic.Bool
}

func (h *heartbeatFails) KeeperBeat(ctx context.Context, owner string) error {
	if h.fail.Load() {
		return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return h.Store.KeeperBeat(ctx, owner)
}

// causeExec records the cause that ended its execution.
type causeExec struct {
	running chan struct{}
	cause   chan error
}

func (c *causeExec) Execute(ctx context.Context, x Execution, rec Recorder) Outcome {
	c.running <- struct{}{}
	<-ctx.Done()
	c.cause <- context.Cause(ctx)
	return Outcome{Phase: store.PhaseFailed, ErrorCode: "test.stopped"}
}

// TestUnrenewableLeaseStopsExecution: a keeper that cannot renew a run's
// lease (its database unreachable from here, maybe not from the other
// keepers) stops executing the run before the lease goes stale and another
// keeper may claim it, and leaves it to be resumed: the run is not
// finished here, and two keepers never execute it at once.
func TestUnrenewableLeaseStopsExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sqlStore := testdb.SQLite.Open(t)
	st := &heartbeatFails{Store: sqlStore}
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	exec := &causeExec{running: make(chan struct{}, 8), cause: make(chan error, 8)}
	// A short lease (configurable, as keeper.yml's runs: is) keeps the
	// test short; TestLeaseHeartbeatThatStops checks the default timing.
	lease := Lease{Heartbeat: 200 * time.Millisecond, StaleAfter: time.Second}
	r, err := New(ctx, Config{Store: st, DB: sqlStore.DB(), Queue: sqlStore.Queue(), Sealer: sealer, Exec: exec, Owner: "keeper-cut-off", Workers: 2, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	run, _, err := r.Submit(ctx, SubmitParams{Name: "cut-off", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	<-exec.running
	st.fail.Store(true)
	var cause error
	select {
	case cause = <-exec.cause:
	case <-time.After(lease.StaleAfter + 10*time.Second):
		t.Fatalf("the execution went on %s after its lease could no longer be renewed", lease.StaleAfter+10*time.Second)
	}
	if !errors.Is(cause, errLeaseLost) {
		t.Fatalf("the execution ended with %v, want the lease given up", cause)
	}
	got, err := sqlStore.RunGet(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != store.PhaseRunning || got.ErrorCode != "" {
		t.Fatalf("run = %s %q, want it left Running to be resumed", got.Phase, got.ErrorCode)
	}
}

// deadKeepersRun is a runner of keeper-b, not started (its jobs stay in
// the queue), on clock (nil: the real one), over store st with one run
// that keeper-dead claimed and heartbeated just now before it died; jobs
// counts the queue's jobs.
func deadKeepersRun(t *testing.T, clock clockwork.Clock) (*Runner, *sqlstore.Store, store.Run, func() int) {
	t.Helper()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	sealer, err := secret.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(ctx, Config{Store: st, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: &blockingExec{}, Owner: "keeper-b", Base: base.Base{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	run, _, err := r.Submit(ctx, SubmitParams{Name: "stale", Scenario: "steps: []", Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.RunClaim(ctx, run.ID, "keeper-dead", time.Now().Add(-StaleAfter)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	jobs := func() int {
		var n int
		if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM river_job`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return r, st, run, jobs
}

// TestRecoveryEnqueuesAStaleRunOnce: the recovery loop looks every
// RecoverEvery; a stale run whose job waits in the queue (every worker
// busy) gets no second job from the same keeper until StaleAfter has
// passed, so that jobs do not pile up.
func TestRecoveryEnqueuesAStaleRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st, run, jobs := deadKeepersRun(t, nil)
	// Its heartbeat long stale.
	if _, err := st.DB().ExecContext(ctx, `UPDATE runs SET heartbeat_at = ? WHERE id = ?`, time.Now().Add(-time.Minute).UTC(), run.ID); err != nil {
		t.Fatal(err)
	}
	before := jobs()
	for range 3 { // the runner is not started: the jobs stay in the queue
		r.recover(ctx, "")
	}
	if n := jobs() - before; n != 1 {
		t.Fatalf("three recovery passes enqueued %d jobs for one stale run, want 1", n)
	}
}

// TestOwnIdleRunIsRequeued: a run this keeper holds and does not execute
// (its execution stopped to be resumed while the keeper stayed up, so its
// keeper row is fresh and no other keeper takes it) gets a queue job from
// the recovery pass, once per StaleAfter; a run it executes gets none.
func TestOwnIdleRunIsRequeued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st, run, jobs := deadKeepersRun(t, nil)
	if _, ok, err := st.RunClaim(ctx, run.ID, "keeper-b", time.Now().Add(time.Minute)); err != nil || !ok {
		t.Fatalf("claim by keeper-b: %v %v", ok, err)
	}
	if err := st.KeeperBeat(ctx, "keeper-b"); err != nil {
		t.Fatal(err)
	}
	before := jobs()
	r.takeOff(run.ID)
	r.recover(ctx, "keeper-b")
	if n := jobs() - before; n != 0 {
		t.Fatalf("a run the keeper executes was re-enqueued (%d jobs)", n)
	}
	r.landed(run.ID)
	r.recover(ctx, "keeper-b")
	r.recover(ctx, "keeper-b")
	if n := jobs() - before; n != 1 {
		t.Fatalf("%d jobs for a run keeper-b holds and does not execute, want 1", n)
	}
}
