package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/crashpoint"
	"github.com/soulstack/soulstack/internal/logctx"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/tracing"
)

// worker executes one run per job.
type worker struct {
	river.WorkerDefaults[RunArgs]
	r *Runner
}

var (
	errCancelRequested = errors.New("cancel requested")
)

// CodeTooManySecrets fails a run whose secret set overflowed
// (secret.MaxRunValues): its output is withheld.
const CodeTooManySecrets = "run.too_many_secrets"

// Work claims the run's lease and executes it. A run that is finished, or
// held by a live keeper, makes the job a no-op.
func (w *worker) Work(ctx context.Context, job *river.Job[RunArgs]) error {
	r := w.r
	id := job.Args.RunID
	if !r.takeOff(id) {
		return nil // executing here already, from another job
	}
	defer r.landed(id)
	run, ok, err := r.cfg.Store.RunClaim(ctx, id, r.cfg.Owner, r.clock.Now().Add(-r.cfg.Lease.StaleAfter))
	if errors.Is(err, store.ErrNotFound) || (err == nil && !ok) {
		return nil
	}
	if err != nil {
		return err
	}
	secrets := r.openSecrets(id)
	defer r.closeSecrets(id)
	log := slog.New(secrets.LogHandler(r.log.Handler())).With(logctx.RunKey, id)
	ctx = logctx.WithRun(ctx, id) // what the run's work logs with its context names the run
	// The run's trace: the API request's, also for an execution that
	// recovers the run after its keeper stopped. The time the job waited
	// in the queue is a span of its own.
	traceParent := run.TraceParent
	if traceParent == "" {
		traceParent = job.Args.TraceParent
	}
	ctx = tracing.Extract(ctx, traceParent)
	_, queued := tracing.Tracer().Start(ctx, "queue", trace.WithTimestamp(job.CreatedAt), trace.WithAttributes(tracing.RunID.String(id)))
	queued.End()
	ctx, span := tracing.Tracer().Start(ctx, "run", trace.WithAttributes(tracing.RunID.String(id), tracing.RunName.String(run.Name), tracing.RunMode.String(run.Mode)))
	defer span.End()
	rec, err := newRecorder(ctx, r, run, secrets)
	if err != nil {
		return err
	}
	resumed := len(rec.steps) > 0 || run.StateSealed != ""
	rec.Event("", "", client.RunPhaseData{Phase: client.PhaseRunning, Resumed: resumed})

	runCtx, cancel, release := r.runContext(ctx, run)
	defer release()
	r.hold(id, cancel)
	defer r.unhold(id)
	out := r.execute(runCtx, run, rec, secrets)
	span.SetAttributes(tracing.Phase.String(string(out.Phase)))
	if out.ErrorCode != "" {
		span.SetStatus(codes.Error, out.ErrorCode)
	}
	cause := context.Cause(runCtx)
	cancel(nil)
	// What the execution buffered is stored however it ended, before the
	// run is finished, handed back or left to be resumed.
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_ = rec.flush(ectx)
	ecancel()

	switch {
	case LeftToResume(cause):
		log.Info("run left to be resumed", "reason", cause.Error())
		return nil
	case out.HandBack:
		r.handBack(ctx, id, log)
		return nil
	}
	return r.finish(ctx, run, rec, secrets, concluded(run, out, cause), log)
}

// runContext is the context run executes in: bounded by the run's
// timeout (from its first start), cancelled with a cause (cancel), and
// cancelled with ErrStopping when the keeper stops (ctx): that abandons
// the run without finishing it, for the next keeper to resume. release
// frees it.
func (r *Runner) runContext(ctx context.Context, run store.Run) (_ context.Context, cancel context.CancelCauseFunc, release func()) {
	deadline := run.CreatedAt.Add(run.Timeout)
	if run.StartedAt != nil {
		deadline = run.StartedAt.Add(run.Timeout)
	}
	runCtx, cancelTimeout := clockwork.WithDeadline(context.WithoutCancel(ctx), r.clock, deadline)
	runCtx, cancel = context.WithCancelCause(runCtx)
	stopped := context.AfterFunc(ctx, func() { cancel(ErrStopping) })
	return runCtx, cancel, func() {
		stopped()
		cancel(nil)
		cancelTimeout()
	}
}

// held is one execution the keeper's heartbeat holds.
type held struct {
	stop  context.CancelCauseFunc
	since time.Time // when it was registered, on the runner's clock
}

func (r *Runner) hold(id string, stop context.CancelCauseFunc) {
	r.flightMu.Lock()
	r.execs[id] = &held{stop: stop, since: r.clock.Now()}
	r.flightMu.Unlock()
}

func (r *Runner) unhold(id string) {
	r.flightMu.Lock()
	delete(r.execs, id)
	r.flightMu.Unlock()
}

// keepAlive renews the keeper's heartbeat row every lease.Heartbeat until
// ctx ends, and looks at the runs the keeper holds (one write and one read
// per heartbeat, however many runs execute here). It stops an execution
// with errLeaseLost when another keeper holds its run, with
// errCancelRequested when a cancel was requested, and every execution with
// errLeaseLost when the heartbeat could not be renewed for its give-up
// time (another keeper may claim the runs soon: better stop here than both
// execute them; their commands go on running on the souls).
func (r *Runner) keepAlive(ctx context.Context) {
	keepAlive(ctx, r.clock, r.cfg.Lease, func(ctx context.Context) (map[string]bool, error) {
		if err := r.cfg.Store.KeeperBeat(ctx, r.cfg.Owner); err != nil {
			return nil, err
		}
		return r.cfg.Store.RunsHeld(ctx, r.cfg.Owner)
	}, r.judgeHeld, r.log)
}

// judgeHeld stops the executions registered before asked whose runs are not
// in held (another keeper took them), or whose cancel was requested; held
// nil (the heartbeat given up) stops them all.
func (r *Runner) judgeHeld(held map[string]bool, asked time.Time) {
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	for id, x := range r.execs {
		cancelReq, ok := held[id]
		switch {
		case held == nil:
			x.stop(errLeaseLost)
		case x.since.After(asked):
			// Claimed after the question was asked: the answer cannot
			// know it yet.
		case !ok:
			x.stop(errLeaseLost)
		case cancelReq:
			x.stop(errCancelRequested)
		}
	}
}

// keepAlive is the heartbeat loop on clock: renew every lease.Heartbeat,
// judge (with the runs held and when they were asked for, or nil once the
// heartbeat has not been renewed for the give-up time).
func keepAlive(ctx context.Context, clock clockwork.Clock, lease Lease, renew func(context.Context) (map[string]bool, error), judge func(map[string]bool, time.Time), log *slog.Logger) {
	t := clock.NewTicker(lease.Heartbeat)
	defer t.Stop()
	renewed := clock.Now()
	gaveUp := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		// Bounded by the give-up time, so that a database that does not
		// answer at all still lets the give-up happen in time.
		giveUp := renewed.Add(lease.giveUp())
		asked := clock.Now()
		// Past the give-up time (the executions are stopped already), a
		// renewal still gets a heartbeat's time to bring the keeper back.
		deadline := giveUp
		if !giveUp.After(asked) {
			deadline = asked.Add(lease.Heartbeat)
		}
		hctx, hcancel := clockwork.WithDeadline(ctx, clock, deadline)
		held, err := renew(hctx)
		hcancel()
		switch {
		case err != nil && !clock.Now().Before(giveUp):
			if !gaveUp {
				log.Error("the keeper's heartbeat could not be renewed in time; stopping its executions here, to be resumed by the keeper that claims them next (their commands go on on the souls)", "since", clock.Since(renewed).Round(time.Second), "err", err)
			}
			gaveUp = true
			judge(nil, asked)
		case err != nil:
			log.Warn("keeper heartbeat failed", "err", err)
		default:
			if gaveUp {
				log.Info("keeper heartbeat renewed again")
			}
			renewed, gaveUp = clock.Now(), false
			judge(held, asked)
		}
	}
}

// execute opens the run's sealed input and checkpoint and has the
// executor run it; a run cancelled while it waited to resume is not
// executed again.
func (r *Runner) execute(ctx context.Context, run store.Run, rec *recorder, secrets *secret.Set) Outcome {
	x := Execution{Run: run, Steps: rec.steps, Targets: rec.targets, Commands: rec.commands, Secrets: secrets, Drain: r.drain}
	input, err := r.cfg.Sealer.Open(run.InputSealed)
	if err == nil {
		err = json.Unmarshal(input, &x.Input)
	}
	if err == nil && run.StateSealed != "" {
		x.Resume, err = r.cfg.Sealer.Open(run.StateSealed)
	}
	switch {
	case err != nil:
		return Outcome{Phase: store.PhaseFailed, ErrorCode: "run.state_unreadable", ErrorMsg: "the run's sealed input or state cannot be opened: " + err.Error()}
	case run.CancelRequested:
		return Outcome{Phase: store.PhaseCancelled, ErrorCode: "run.cancelled", ErrorMsg: "cancelled before it resumed"}
	}
	return r.cfg.Exec.Execute(ctx, x, rec)
}

// handBack releases the lease of a run the executor handed back between
// two steps: it resumes on the next keeper to start.
func (r *Runner) handBack(ctx context.Context, id string, log *slog.Logger) {
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	if err := r.cfg.Store.RunRelease(rctx, id, r.cfg.Owner); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		log.Warn("release the lease of a handed-back run", "err", err)
	}
	log.Info("run handed back between two steps; it resumes on the next keeper to start")
}

// concluded is the outcome as the run ends with it: a cancel request or
// the run's timeout (cause) overrides what the executor reported.
func concluded(run store.Run, out Outcome, cause error) Outcome {
	switch {
	case errors.Is(cause, errCancelRequested):
		out.Phase, out.ErrorCode, out.ErrorMsg, out.Message = store.PhaseCancelled, "run.cancelled", "cancelled by request", ""
	case errors.Is(cause, context.DeadlineExceeded) && out.Phase != store.PhaseSucceeded:
		out.Phase, out.ErrorCode, out.Message = store.PhaseFailed, "run.timeout", ""
		out.ErrorMsg = fmt.Sprintf("the run did not finish within its timeout of %s", run.Timeout)
	}
	return out
}

// finish stores the run's end (phase, masked outputs and message) and its
// run.finished event; a run whose lease another keeper took is left to it.
func (r *Runner) finish(ctx context.Context, run store.Run, rec *recorder, secrets *secret.Set, out Outcome, log *slog.Logger) error {
	errMsg, message := secrets.MaskString(out.ErrorMsg), secrets.MaskString(out.Message)
	if secrets.Overflowed() {
		// Everything the run stored is masked whole; say why, in words
		// that hold no secret.
		out.Phase, out.ErrorCode = store.PhaseFailed, CodeTooManySecrets
		errMsg = fmt.Sprintf("the run registered more than %d secret values; its output is withheld", secret.MaxRunValues)
		message = ""
	}
	masked, _ := json.Marshal(secrets.Mask(orEmpty(out.Outputs)))
	finish := store.RunFinishParams{ID: run.ID, Owner: r.cfg.Owner, Phase: out.Phase, ErrorCode: out.ErrorCode, ErrorMsg: errMsg, Outputs: masked,
		Message: runMessage(out.Phase, out.ErrorCode, errMsg, message, masked, run.Mode == string(client.RunCheck))}
	if r.cfg.Finished != nil && (r.cfg.Follows == nil || r.cfg.Follows(run, out.Phase)) {
		// What follows the run's end commits with it (the outbox): a
		// keeper killed right after still has it done, by the next one.
		finish.Enqueue = func(ctx context.Context, tx *sql.Tx) error {
			return r.EnqueueTx(ctx, tx, FinishedArgs{RunID: run.ID}, nil)
		}
	}
	// Finishing must not be cut short by the keeper stopping.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	if err := r.persist(fctx, "run finish", func(ctx context.Context) error { return r.cfg.Store.RunFinish(ctx, finish) }); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return nil
		}
		return fmt.Errorf("finish run %s: %w", run.ID, err)
	}
	data := client.RunFinishedData{Phase: store.ShownPhase(out.Phase, out.ErrorCode, false)}
	if out.ErrorCode != "" {
		data.Error = &client.RunError{Code: out.ErrorCode, Message: finish.ErrorMsg}
	}
	crashpoint.Here(crashpoint.RunFinished)
	rec.eventCtx(fctx, "", "", data)
	_ = rec.flush(fctx)
	log.Info("run finished", "phase", out.Phase, "code", out.ErrorCode)
	return nil
}

// runMessage is the message a finished run stores, as the second seed's
// job has it: the JSON of the outputs when the run Succeeded (for a check
// run, its summary, which the executor gives as its message), the error
// otherwise (message, already masked, or else "<code>: <errMsg>"). The
// outputs stay in their own field either way.
func runMessage(phase, code, errMsg, message string, outputs []byte, check bool) string {
	switch {
	case phase == store.PhaseSucceeded && check && message != "":
		return message
	case phase == store.PhaseSucceeded:
		return string(outputs)
	case message != "":
		return message
	case errMsg == "":
		return code
	default:
		return code + ": " + errMsg
	}
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// A step's target results and events are written in batches rather than
// one transaction each: the recorder buffers them and flushes the buffer
//   - when it holds FlushAt items (targets and events together), in the
//     goroutine that added the last one;
//   - FlushEvery after the first item entered an empty buffer (a timer);
//   - before any step state is saved and before any checkpoint, so that
//     neither a step marked done nor a checkpoint ever claims results that
//     are not stored;
//   - when the execution returns (run end, drain hand-back, cancel, lost
//     lease) and after the run's final event.
//
// Flushes are serialised and each batch is one transaction (targets first,
// then events), so events reach the store, and the event stream that reads
// them by seq, in seq order: a batch appears at once. A batch is retried
// like any single write (persist); one the database refuses for good is
// written again row by row so that one bad row costs only itself.
//
// What a crash loses: only what was buffered and not yet flushed, i.e. at
// most FlushEvery (or FlushAt items) of results of a step that is not
// checkpointed yet. The next keeper resumes or interrupts that step by the
// existing rules (a step without checkpoint is run again or marked
// interrupted), so no step is ever recorded done without its results.
const (
	FlushAt    = 64
	FlushEvery = 50 * time.Millisecond
)

// recorder is the Recorder of one execution: it numbers events, masks
// what it stores with the run's secrets, writes them in batches and wakes
// SSE readers.
type recorder struct {
	r        *Runner
	ctx      context.Context
	run      store.Run
	secrets  *secret.Set
	steps    []store.RunStep
	targets  []store.RunTarget
	commands []store.RunCommand

	// flushMu serialises flushes, so batches are stored in seq order.
	flushMu sync.Mutex
	// mu guards seq and the buffer.
	mu         sync.Mutex
	seq        int64
	bufEvents  []store.RunEvent
	bufTargets []store.RunTarget
	timer      *time.Timer
	modules    map[int]string // each step's module, by index (for metrics)
}

func newRecorder(ctx context.Context, r *Runner, run store.Run, secrets *secret.Set) (*recorder, error) {
	rec := &recorder{r: r, ctx: ctx, run: run, secrets: secrets}
	for {
		evs, err := r.cfg.Records.RunEvents(ctx, run.ID, rec.seq, 1000)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		rec.seq = evs[len(evs)-1].Seq
	}
	var err error
	if rec.steps, rec.targets, err = r.cfg.Records.RunSteps(ctx, run.ID); err != nil {
		return nil, err
	}
	rec.modules = map[int]string{}
	for _, s := range rec.steps {
		rec.modules[s.Index] = s.Module
	}
	rec.commands, err = r.cfg.Records.RunCommands(ctx, run.ID)
	return rec, err
}

// Command stores a command's write-ahead record in this execution's
// epoch, retried like any write; a lease another execution holds fails it.
func (rec *recorder) Command(ctx context.Context, c store.RunCommand) error {
	c.RunID, c.Epoch = rec.run.ID, rec.run.Epoch
	err := rec.r.persist(context.WithoutCancel(ctx), "run command", func(ctx context.Context) error {
		return rec.r.cfg.Records.RunCommandRecord(ctx, rec.r.cfg.Owner, c)
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	return err
}

func (rec *recorder) Event(step, sid string, data client.EventData) {
	rec.eventCtx(context.WithoutCancel(rec.ctx), step, sid, data)
}

// eventCtx buffers one event: its kind is data's, its data the masked JSON
// of data (the client type's encoding, secrets replaced).
func (rec *recorder) eventCtx(ctx context.Context, step, sid string, data client.EventData) {
	b, err := rec.secrets.MarshalMasked(data)
	if err != nil {
		b = []byte(`{}`)
	}
	rec.mu.Lock()
	rec.seq++
	rec.bufEvents = append(rec.bufEvents, store.RunEvent{RunID: rec.run.ID, Seq: rec.seq, At: time.Now(), Kind: string(data.EventKind()), Step: step, SID: sid, Data: b})
	full := rec.bufferedLocked()
	rec.mu.Unlock()
	if full {
		_ = rec.flushFull(ctx)
	}
}

// bufferedLocked arms the flush timer for a buffer that just stopped
// being empty and reports whether the buffer is full. rec.mu is held.
func (rec *recorder) bufferedLocked() bool {
	if rec.timer == nil {
		rec.timer = time.AfterFunc(FlushEvery, func() { _ = rec.flush(context.WithoutCancel(rec.ctx)) })
	}
	return len(rec.bufEvents)+len(rec.bufTargets) >= FlushAt
}

// flush writes what is buffered: the targets in one transaction, then the
// events in one. It returns the first write that failed for good (after
// persist's retries and the row-by-row fallback).
func (rec *recorder) flush(ctx context.Context) error { return rec.flushIf(ctx, false) }

// flushFull flushes only if the buffer is still full once it is this
// goroutine's turn: of the goroutines that filled it at once, one writes.
func (rec *recorder) flushFull(ctx context.Context) error { return rec.flushIf(ctx, true) }

func (rec *recorder) flushIf(ctx context.Context, onlyFull bool) error {
	rec.flushMu.Lock()
	defer rec.flushMu.Unlock()
	rec.mu.Lock()
	if onlyFull && len(rec.bufEvents)+len(rec.bufTargets) < FlushAt {
		rec.mu.Unlock()
		return nil
	}
	events, targets := rec.bufEvents, rec.bufTargets
	rec.bufEvents, rec.bufTargets = nil, nil
	if rec.timer != nil {
		rec.timer.Stop()
		rec.timer = nil
	}
	rec.mu.Unlock()
	st := rec.r.cfg.Records
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if len(targets) > 0 {
		keep(rec.write(ctx, "run targets", len(targets),
			func(ctx context.Context) error { return st.RunTargetsSave(ctx, targets) },
			func(ctx context.Context, i int) error { return st.RunTargetSave(ctx, targets[i]) }))
	}
	if len(events) > 0 {
		keep(rec.write(ctx, "run events", len(events),
			func(ctx context.Context) error { return st.RunEventsAppend(ctx, events) },
			func(ctx context.Context, i int) error { return st.RunEventAppend(ctx, events[i]) }))
		rec.r.hub.Notify(rec.run.ID)
	}
	return first
}

// write stores one batch with persist's retries; a batch refused for a
// reason retrying does not cure is written again row by row, so that the
// rows the database accepts are kept.
func (rec *recorder) write(ctx context.Context, what string, n int, batch func(context.Context) error, row func(context.Context, int) error) error {
	err := rec.r.persist(ctx, what, batch)
	if err == nil {
		return nil
	}
	if rec.r.transient(err) || n == 1 {
		rec.r.log.Error("store "+what, "run", rec.run.ID, "rows", n, "err", err)
		return err
	}
	rec.r.log.Warn("a batch was refused; storing its rows one by one", "what", what, "run", rec.run.ID, "rows", n, "err", err)
	var first error
	for i := range n {
		if err := rec.r.persist(ctx, what, func(ctx context.Context) error { return row(ctx, i) }); err != nil {
			rec.r.log.Error("store "+what, "run", rec.run.ID, "row", i, "err", err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// Step saves a step's state after flushing the buffer: a step is never
// stored done before its targets' results and events are.
func (rec *recorder) Step(s store.RunStep) {
	s.RunID = rec.run.ID
	rec.mu.Lock()
	rec.modules[s.Index] = s.Module
	rec.mu.Unlock()
	if s.Status == string(client.StepRunning) {
		rec.r.setFlying(rec.run.ID, s.Name)
	}
	ctx := context.WithoutCancel(rec.ctx)
	_ = rec.flush(ctx)
	if err := rec.r.persist(ctx, "run step", func(ctx context.Context) error { return rec.r.cfg.Records.RunStepSave(ctx, s) }); err != nil {
		rec.r.log.Error("store run step", "run", rec.run.ID, "err", err)
	}
}

// Target buffers one target's result, its output and error masked.
func (rec *recorder) Target(t store.RunTarget, output any) {
	t.RunID = rec.run.ID
	b, err := json.Marshal(rec.secrets.Mask(output))
	if err != nil {
		b = []byte("null")
	}
	t.Output = b
	t.ErrorMsg = rec.secrets.MaskString(t.ErrorMsg)
	t.Unknown = rec.secrets.MaskString(t.Unknown)
	if len(t.Changes) > 0 {
		var changes any
		if err := json.Unmarshal(t.Changes, &changes); err == nil {
			t.Changes, _ = json.Marshal(rec.secrets.Mask(changes))
		} else {
			t.Changes = nil
		}
	}
	rec.mu.Lock()
	rec.bufTargets = append(rec.bufTargets, t)
	full := rec.bufferedLocked()
	module := rec.modules[t.StepIndex]
	rec.mu.Unlock()
	rec.r.cfg.Metrics.target(module, t)
	if full {
		_ = rec.flushFull(context.WithoutCancel(rec.ctx))
	}
}

// Checkpoint flushes the buffer, then seals and saves state: a checkpoint
// never claims a step done whose results are not stored, so it fails when
// they could not be.
func (rec *recorder) Checkpoint(state []byte) error {
	ctx := context.WithoutCancel(rec.ctx)
	if err := rec.flush(ctx); err != nil {
		return fmt.Errorf("store the step's results before its checkpoint: %w", err)
	}
	sealed := rec.r.cfg.Sealer.Seal(state)
	return rec.r.persist(ctx, "run checkpoint", func(ctx context.Context) error {
		return rec.r.cfg.Store.RunStateSave(ctx, rec.run.ID, rec.r.cfg.Owner, sealed)
	})
}
