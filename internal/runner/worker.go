package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
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
	run, ok, err := r.cfg.Store.RunClaim(ctx, id, r.cfg.Owner, time.Now().Add(-StaleAfter))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	secrets := r.openSecrets(id)
	defer r.closeSecrets(id)
	log := slog.New(secrets.LogHandler(r.log.Handler())).With("run", id)
	rec, err := newRecorder(ctx, r, run, secrets)
	if err != nil {
		return err
	}
	resumed := false
	if len(rec.steps) > 0 || run.StateSealed != "" {
		resumed = true
	}
	rec.Event("", "", client.RunPhaseData{Phase: client.PhaseRunning, Resumed: resumed})

	deadline := run.CreatedAt.Add(run.Timeout)
	if run.StartedAt != nil {
		deadline = run.StartedAt.Add(run.Timeout)
	}
	runCtx, cancelTimeout := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancelTimeout()
	runCtx, cancel := context.WithCancelCause(runCtx)
	defer cancel(nil)
	// Stopping the keeper (ctx) abandons the run without finishing it: the
	// next keeper to start resumes it.
	stopped := context.AfterFunc(ctx, func() { cancel(ErrStopping) })
	defer stopped()

	var hb sync.WaitGroup
	hb.Add(1)
	go func() {
		defer hb.Done()
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		renewed := time.Now()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				// Bounded by the give-up time, so that a database that does
				// not answer at all still lets the give-up happen in time.
				giveUp := renewed.Add(LeaseGiveUp)
				hctx, hcancel := context.WithDeadline(runCtx, giveUp)
				cancelReq, err := r.cfg.Store.RunHeartbeat(hctx, id, r.cfg.Owner)
				hcancel()
				switch {
				case errors.Is(err, store.ErrLeaseLost):
					cancel(errLeaseLost)
					return
				case err != nil && !time.Now().Before(giveUp):
					// Another keeper may take the run over soon: stop
					// executing it here rather than both at once.
					log.Error("the run's lease could not be renewed in time; stopping it here, to be resumed by the keeper that claims it next", "since", time.Since(renewed).Round(time.Second), "err", err)
					cancel(errLeaseLost)
					return
				case err != nil:
					log.Warn("heartbeat failed", "err", err)
				default:
					renewed = time.Now()
					if cancelReq {
						cancel(errCancelRequested)
					}
				}
			}
		}
	}()

	x := Execution{Run: run, Steps: rec.steps, Targets: rec.targets, Secrets: secrets, Drain: r.drain}
	out := Outcome{Phase: store.PhaseFailed}
	input, err := r.cfg.Sealer.Open(run.InputSealed)
	if err == nil {
		err = json.Unmarshal(input, &x.Input)
	}
	if err == nil && run.StateSealed != "" {
		x.Resume, err = r.cfg.Sealer.Open(run.StateSealed)
	}
	if err != nil {
		out.ErrorCode, out.ErrorMsg = "run.state_unreadable", "the run's sealed input or state cannot be opened: "+err.Error()
	} else if run.CancelRequested {
		out = Outcome{Phase: store.PhaseCancelled, ErrorCode: "run.cancelled", ErrorMsg: "cancelled before it resumed"}
	} else {
		out = r.cfg.Exec.Execute(runCtx, x, rec)
	}
	cause := context.Cause(runCtx)
	cancel(nil)
	hb.Wait()

	switch {
	case LeftToResume(cause):
		log.Info("run left to be resumed", "reason", cause.Error())
		return nil
	case out.HandBack:
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		if err := r.cfg.Store.RunRelease(rctx, id, r.cfg.Owner); err != nil && !errors.Is(err, store.ErrLeaseLost) {
			log.Warn("release the lease of a handed-back run", "err", err)
		}
		log.Info("run handed back between two steps; it resumes on the next keeper to start")
		return nil
	case errors.Is(cause, errCancelRequested):
		out.Phase, out.ErrorCode, out.ErrorMsg, out.Message = store.PhaseCancelled, "run.cancelled", "cancelled by request", ""
	case errors.Is(cause, context.DeadlineExceeded) && out.Phase != store.PhaseSucceeded:
		out.Phase, out.ErrorCode, out.Message = store.PhaseFailed, "run.timeout", ""
		out.ErrorMsg = fmt.Sprintf("the run did not finish within its timeout of %s", run.Timeout)
	}
	errMsg, message := secrets.MaskString(out.ErrorMsg), secrets.MaskString(out.Message)
	if secrets.Overflowed() {
		// Everything the run stored is masked whole; say why, in words
		// that hold no secret.
		out.Phase, out.ErrorCode = store.PhaseFailed, CodeTooManySecrets
		errMsg = fmt.Sprintf("the run registered more than %d secret values; its output is withheld", secret.MaxRunValues)
		message = ""
	}
	masked, _ := json.Marshal(secrets.Mask(orEmpty(out.Outputs)))
	finish := store.RunFinishParams{ID: id, Owner: r.cfg.Owner, Phase: out.Phase, ErrorCode: out.ErrorCode, ErrorMsg: errMsg, Outputs: masked,
		Message: runMessage(out.Phase, out.ErrorCode, errMsg, message, masked)}
	// Finishing must not be cut short by the keeper stopping.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	if err := r.persist(fctx, "run finish", func(ctx context.Context) error { return r.cfg.Store.RunFinish(ctx, finish) }); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return nil
		}
		return fmt.Errorf("finish run %s: %w", id, err)
	}
	data := client.RunFinishedData{Phase: client.Phase(out.Phase)}
	if out.ErrorCode != "" {
		data.Error = &client.RunError{Code: out.ErrorCode, Message: finish.ErrorMsg}
	}
	rec.eventCtx(fctx, "", "", data)
	log.Info("run finished", "phase", out.Phase, "code", out.ErrorCode)
	return nil
}

// runMessage is the message a finished run stores, as the second seed's
// job has it: the JSON of the outputs when the run Succeeded, the error
// otherwise (message, already masked, or else "<code>: <errMsg>"). The
// outputs stay in their own field either way.
func runMessage(phase, code, errMsg, message string, outputs []byte) string {
	switch {
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

// recorder is the Recorder of one execution: it numbers events, masks
// what it stores with the run's secrets and wakes SSE readers.
type recorder struct {
	r       *Runner
	ctx     context.Context
	run     store.Run
	secrets *secret.Set
	mu      sync.Mutex
	seq     int64
	steps   []store.RunStep
	targets []store.RunTarget
}

func newRecorder(ctx context.Context, r *Runner, run store.Run, secrets *secret.Set) (*recorder, error) {
	rec := &recorder{r: r, ctx: ctx, run: run, secrets: secrets}
	for {
		evs, err := r.cfg.Store.RunEvents(ctx, run.ID, rec.seq, 1000)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		rec.seq = evs[len(evs)-1].Seq
	}
	var err error
	rec.steps, rec.targets, err = r.cfg.Store.RunSteps(ctx, run.ID)
	return rec, err
}

func (rec *recorder) Event(step, sid string, data client.EventData) {
	rec.eventCtx(context.WithoutCancel(rec.ctx), step, sid, data)
}

// eventCtx stores one event: its kind is data's, its data the masked JSON
// of data (the client type's encoding, secrets replaced).
func (rec *recorder) eventCtx(ctx context.Context, step, sid string, data client.EventData) {
	b, err := rec.secrets.MarshalMasked(data)
	if err != nil {
		b = []byte(`{}`)
	}
	rec.mu.Lock()
	rec.seq++
	e := store.RunEvent{RunID: rec.run.ID, Seq: rec.seq, At: time.Now(), Kind: string(data.EventKind()), Step: step, SID: sid, Data: b}
	err = rec.r.persist(ctx, "run event", func(ctx context.Context) error { return rec.r.cfg.Store.RunEventAppend(ctx, e) })
	rec.mu.Unlock()
	if err != nil {
		rec.r.log.Error("store run event", "run", rec.run.ID, "err", err)
	}
	rec.r.hub.Notify(rec.run.ID)
}

func (rec *recorder) Step(s store.RunStep) {
	s.RunID = rec.run.ID
	if s.Status == string(client.StepRunning) {
		rec.r.setFlying(rec.run.ID, s.Name)
	}
	if err := rec.r.persist(context.WithoutCancel(rec.ctx), "run step", func(ctx context.Context) error { return rec.r.cfg.Store.RunStepSave(ctx, s) }); err != nil {
		rec.r.log.Error("store run step", "run", rec.run.ID, "err", err)
	}
}

func (rec *recorder) Target(t store.RunTarget, output any) {
	t.RunID = rec.run.ID
	b, err := json.Marshal(rec.secrets.Mask(output))
	if err != nil {
		b = []byte("null")
	}
	t.Output = b
	t.ErrorMsg = rec.secrets.MaskString(t.ErrorMsg)
	if err := rec.r.persist(context.WithoutCancel(rec.ctx), "run target", func(ctx context.Context) error { return rec.r.cfg.Store.RunTargetSave(ctx, t) }); err != nil {
		rec.r.log.Error("store run target", "run", rec.run.ID, "err", err)
	}
}

func (rec *recorder) Checkpoint(state []byte) error {
	sealed := rec.r.cfg.Sealer.Seal(state)
	return rec.r.persist(context.WithoutCancel(rec.ctx), "run checkpoint", func(ctx context.Context) error {
		return rec.r.cfg.Store.RunStateSave(ctx, rec.run.ID, rec.r.cfg.Owner, sealed)
	})
}
