// Package engine executes a scenario's plan for one run: it evaluates each
// step's expressions, resolves its targets, runs the module on every
// target concurrently (bounded by forks), applies changed_when and
// failed_when, records every result and event, checkpoints after each step
// so that a crashed run resumes, and computes the run's outcome.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/approval"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/transport"
)

// DefaultForks bounds how many targets of one step run at once.
const DefaultForks = 50

// Loader turns a run's scenario text and input into a plan (with the
// input's defaults applied).
type Loader func(scenario string, input map[string]any) (*scenario.Plan, error)

// Executor implements runner.Executor.
type Executor struct {
	Store     Registry
	Load      Loader
	KeeperKey []byte
	// ProjectKey returns a project's keeper SSH key (see
	// SoulsConfig.ProjectKey); nil: KeeperKey for every project.
	ProjectKey func(ctx context.Context, project string) ([]byte, error)
	// Resolve reads the secret a soul's key_ref names, in the soul's
	// project (see SoulsConfig.Resolve).
	Resolve func(ctx context.Context, project, ref string) ([]byte, error)
	// Dial opens each run's dialer (see SoulsConfig.Dial): the keeper's
	// agent bus, then its SSH pool.
	Dial     func(transport.HostKeys) transport.Dialer
	FilesDir string
	// Keeper is the target of keeper-side modules.
	Keeper module.Target
	// Base is the engine's logger and clock: Clock times step timeouts,
	// retry delays and durations (nil: the real clock; tests drive a fake
	// one).
	base.Base
	// Modules are this keeper's provisioned modules by ID
	// (module.Provision): a step runs its module's provisioned copy when
	// there is one, the registered value otherwise.
	Modules map[module.ID]module.Module
	// Authorizer re-checks the run's creator when a step whose module
	// declares a permission executes. When nil, every such step fails with
	// auth.forbidden: a keeper that cannot check does not run them.
	Authorizer Authorizer
	// Limits bound what a run keeps of its souls' outputs.
	Limits OutputLimits
	// Approvals holds the steps approval policies hold until another
	// person decides (approval.Gate); nil holds nothing.
	Approvals Approvals
}

// Approvals holds a step until it may run (approval.Gate.Hold).
type Approvals interface {
	Hold(ctx context.Context, s approval.Step) error
}

// Authorizer decides whether the API token tokenID may, now, do what perm
// allows; auth.Checker implements it. It returns an error wrapping
// auth.ErrForbidden when the token is unknown, revoked, expired or lacks
// perm, and another error when it cannot tell.
type Authorizer interface {
	Authorize(ctx context.Context, tokenID string, perm auth.Permission) error
}

var _ runner.Executor = (*Executor)(nil)

var realClock = clockwork.NewRealClock()

// clock is the executor's clock.
func (e *Executor) clock() clockwork.Clock {
	if e.Clock == nil {
		return realClock
	}
	return e.Clock
}

// module is the module step s runs: this keeper's provisioned copy when
// there is one, else the registered value the plan names.
func (e *Executor) module(s *scenario.PlanStep) module.Module {
	if m, ok := e.Modules[s.ID]; ok {
		return m
	}
	return s.Module
}

// state is the checkpoint of a run: what finished steps produced and which
// targets failed, so that a resumed run carries on where it stopped.
type state struct {
	Done     map[string]stepState `json:"done"`
	Failed   map[string]string    `json:"failed"`    // sid -> step it failed in
	InFlight *int                 `json:"in_flight"` // index of the step started last and not finished
	Errors   []string             `json:"errors"`    // first failures ("<step> on <sid>: <code>: <message>"), for the run's message
	// Secrets are the values of the run's secret set, so that a resumed
	// run masks what earlier steps minted or resolved (the checkpoint is
	// sealed).
	Secrets []string `json:"secrets,omitempty"`
	// Check counts a check run's predictions.
	Check checkCounts `json:"check,omitzero"`
}

// checkCounts are a check run's targets by prediction, and the first
// unknowns spelled out for its message.
type checkCounts struct {
	WouldChange int      `json:"would_change,omitempty"`
	Unknown     int      `json:"unknown,omitempty"`
	Unknowns    []string `json:"unknowns,omitempty"`
}

type stepState struct {
	Index   int               `json:"index"`
	Status  client.StepStatus `json:"status"`
	Changed bool              `json:"changed"`
	Output  any               `json:"output"`
	// Unknown and OutputUnknown say, in a check run, why the step's
	// changed (and status) or its output cannot be known.
	Unknown       string `json:"unknown,omitempty"`
	OutputUnknown string `json:"output_unknown,omitempty"`
}

// Execute runs the plan of x.Run.
func (e *Executor) Execute(ctx context.Context, x runner.Execution, rec runner.Recorder) runner.Outcome {
	plan, err := e.Load(x.Run.Scenario, x.Input)
	if err != nil {
		return failed("scenario.invalid", "the stored scenario no longer validates: "+err.Error())
	}
	secrets := x.Secrets
	if secrets == nil {
		secrets = secret.NewSet()
	}
	secrets.AddInput(plan.Input, plan.Secret())
	st, err := resumeState(x.Resume, secrets)
	if err != nil {
		return failed("run.state_unreadable", "the run's checkpoint cannot be decoded: "+err.Error())
	}
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(secrets.LogHandler(log.Handler()))
	souls := NewSouls(SoulsConfig{Store: e.Store, Project: x.Run.Project, KeeperKey: e.KeeperKey, ProjectKey: e.ProjectKey, Resolve: resolveInto(secrets, e.Resolve), Dial: e.Dial, FilesDir: e.FilesDir})
	r := &run{e: e, id: x.Run.ID, creator: x.Run.CreatedBy, project: x.Run.Project, rec: rec, souls: souls, input: plan.Input, secrets: secrets, secretInputs: secretInputNames(plan), st: &st, log: log.With("run", x.Run.ID),
		check: x.Run.Mode == string(client.RunCheck), name: x.Run.Name, drain: x.Drain}
	r.epoch, r.via = x.Run.Epoch, sentVia(x.Commands)
	r.outputLeft.Store(e.Limits.run())
	if out, stop := r.interrupted(plan, &st); stop {
		return out
	}
	for _, s := range plan.Steps {
		if _, done := st.Done[s.Name]; done {
			continue
		}
		if err := ctx.Err(); err != nil {
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.cancelled", ErrorMsg: err.Error(), Outputs: r.outputs()}
		}
		select {
		case <-x.Drain: // the keeper is stopping: the checkpoint is current
			return runner.Outcome{HandBack: true, Outputs: r.outputs()}
		default:
		}
		fatal, err := r.step(ctx, s)
		var rejected *approval.RejectedError
		switch {
		case errors.As(err, &rejected):
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: rejected.Code, ErrorMsg: rejected.Msg, Outputs: r.outputs()} // shown Rejected
		case errors.Is(err, approval.ErrHandBack):
			return runner.Outcome{HandBack: true, Outputs: r.outputs()}
		case err != nil:
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: codeOf(err), ErrorMsg: err.Error(), Outputs: r.outputs()}
		}
		if fatal != "" {
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.fatal_error", ErrorMsg: fatal, Message: failureMessage(&st), Outputs: r.outputs()}
		}
		if secrets.Overflowed() {
			// The runner says why; no later step runs.
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: runner.CodeTooManySecrets, Outputs: r.outputs()}
		}
	}
	out := runner.Outcome{Phase: store.PhaseSucceeded, Outputs: r.outputs()}
	if r.check {
		out.Message = checkMessage(&st)
	}
	if len(st.Failed) > 0 {
		out.Phase, out.ErrorCode = store.PhaseFailed, "run.targets_failed"
		out.Message = failureMessage(&st)
		out.ErrorMsg = fmt.Sprintf("%d target(s) failed: %s", len(st.Failed), out.Message)
	}
	return out
}

// resumeState is the run's state as its last checkpoint left it (empty for
// a first execution), with the secrets earlier executions added (tokens
// minted, keys resolved) put back into the run's set.
func resumeState(resume []byte, secrets *secret.Set) (state, error) {
	st := state{Done: map[string]stepState{}, Failed: map[string]string{}}
	if resume == nil {
		return st, nil
	}
	if err := json.Unmarshal(resume, &st); err != nil {
		return st, err
	}
	if st.Done == nil {
		st.Done = map[string]stepState{}
	}
	if st.Failed == nil {
		st.Failed = map[string]string{}
	}
	for _, v := range st.Secrets {
		secrets.Add(v)
	}
	return st, nil
}

// interrupted ends the run when the step in flight as its last keeper
// stopped cannot be run again: a step in flight is run again, since its
// soul-side commands are durable (those that reached a soul are
// reattached, never started twice) and a check changes nothing; only a
// keeper-side step that is not idempotent (a cloud create) cannot be
// known to have finished.
func (r *run) interrupted(plan *scenario.Plan, st *state) (runner.Outcome, bool) {
	if st.InFlight == nil || r.check {
		return runner.Outcome{}, false
	}
	i := *st.InFlight
	if i >= len(plan.Steps) || !plan.Steps[i].Keeper || plan.Steps[i].Module.Info().Idempotent {
		return runner.Outcome{}, false
	}
	s := plan.Steps[i]
	msg := fmt.Sprintf("the keeper stopped while step %q (%s) was running; it is not idempotent, so it is not repeated — check what it did before running again", s.Name, s.ID)
	r.rec.Event(s.Name, "", client.StepInterruptedData{Index: i, Module: string(s.ID)})
	r.rec.Step(store.RunStep{Index: i, Name: s.Name, Module: string(s.ID), Status: string(client.StepFailed), FinishedAt: r.e.now()})
	return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.interrupted", ErrorMsg: msg, Outputs: r.outputs()}, true
}

// resolveInto returns resolve (or, when nil, the env:/file: resolver) with
// every key it resolves added to the run's secrets.
func resolveInto(secrets *secret.Set, resolve func(ctx context.Context, project, ref string) ([]byte, error)) func(ctx context.Context, project, ref string) ([]byte, error) {
	if resolve == nil {
		resolve = resolveLocal
	}
	return func(ctx context.Context, project, ref string) ([]byte, error) {
		b, err := resolve(ctx, project, ref)
		if err == nil {
			secrets.Add(strings.TrimSpace(string(b)))
		}
		return b, err
	}
}

// maxRunErrors is how many target failures a run's message spells out.
const maxRunErrors = 5

// failureMessage is a failed run's message: each failed target as
// "<step> on <sid>: <code>: <message>", in the order they were recorded,
// joined with "; ", the first maxRunErrors of them and a count of the rest.
func failureMessage(st *state) string {
	more := len(st.Failed) - len(st.Errors)
	switch {
	case more <= 0:
		return strings.Join(st.Errors, "; ")
	case len(st.Errors) == 0:
		return fmt.Sprintf("%d failed target(s)", more)
	default:
		return fmt.Sprintf("%s; and %d more failed target(s)", strings.Join(st.Errors, "; "), more)
	}
}

func failed(code, msg string) runner.Outcome {
	return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: code, ErrorMsg: msg}
}

// now is the time a step's record carries, on the executor's clock.
func (e *Executor) now() *time.Time {
	t := e.clock().Now().UTC()
	return &t
}

// run is the execution state of one run.
type run struct {
	e       *Executor
	id      string
	creator string // API token id of the run's creator
	name    string // the scenario's name
	drain   <-chan struct{}
	project string // the run's project: its targets are that project's souls
	rec     runner.Recorder
	souls   *Souls
	input   map[string]any
	secrets *secret.Set // the run's own secret values
	// secretInputs names the inputs declared secret or under a
	// secret-looking name.
	secretInputs []string
	log          *slog.Logger

	// outputLeft is the bytes of soul output the run may still keep
	// (OutputLimits.Run).
	outputLeft atomic.Int64
	// check says the run is a check run: modules predict, nothing changes.
	check bool
	// epoch is this execution's lease epoch; via the transport earlier
	// executions sent each (step, soul)'s durable commands through.
	epoch int64
	via   map[string]string

	mu sync.Mutex
	st *state
}

// info is what a module learns of the run it executes in.
func (r *run) info(s *scenario.PlanStep) module.RunInfo {
	secretParams := append(s.SecretParams(), s.ParamsUsing(r.secretInputs)...)
	return module.RunInfo{ID: r.id, Step: s.Name, Creator: r.creator, Project: r.project, Secrets: r.secrets, SecretParams: secretParams}
}

// fanOut runs step s on each of sids, up to its forks at once, and
// returns their results in order (a target the run stopped before it
// started fails run.cancelled); each is reported as it ends.
func (r *run) fanOut(ctx context.Context, s *scenario.PlanStep, sids []string, vars expr.Vars) []targetResult {
	forks := s.Forks
	if forks <= 0 {
		forks = DefaultForks
	}
	sem := make(chan struct{}, forks)
	results := make([]targetResult, len(sids))
	var wg sync.WaitGroup
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = targetResult{sid: sid, status: client.TargetFailed, code: "run.cancelled", msg: "the run stopped before this target started"}
				r.report(s, results[i])
				return
			}
			defer func() { <-sem }()
			results[i] = r.target(ctx, s, sid, vars)
			r.boundTarget(s, &results[i])
			r.report(s, results[i])
		}()
	}
	wg.Wait()
	return results
}

// settle records step s as done in the run's state (its status, output
// and, in a check run, what is unknown) and the targets it failed on,
// which it returns.
func (r *run) settle(s *scenario.PlanStep, results []targetResult, status client.StepStatus, changed bool) (failedHere []string) {
	done := stepState{Index: s.Index, Status: status, Changed: changed, Output: stepOutput(s, results)}
	if r.check {
		done.Unknown, done.OutputUnknown = checkStep(results)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Done[s.Name] = done
	r.st.InFlight = nil
	if r.check {
		r.countCheck(s, results)
	}
	for _, t := range results {
		if t.status == client.TargetFailed || t.status == client.TargetUnreachable {
			r.st.Failed[t.sid] = s.Name
			failedHere = append(failedHere, t.sid)
			if len(r.st.Errors) < maxRunErrors {
				r.st.Errors = append(r.st.Errors, fmt.Sprintf("%s on %s: %s: %s", s.Name, t.sid, t.code, t.msg))
			}
		}
	}
	return failedHere
}

// stepOutput is a step's output: a keeper step's own, a soul step's by
// SID (skipped targets left out).
func stepOutput(s *scenario.PlanStep, results []targetResult) any {
	if s.Keeper {
		if len(results) == 1 {
			return results[0].output
		}
		return nil
	}
	bySID := map[string]any{}
	for _, t := range results {
		if t.status != client.TargetSkipped {
			bySID[t.sid] = t.output
		}
	}
	return bySID
}

// secretInputNames names the inputs whose values are secret: declared
// secret, or under a secret-looking name.
func secretInputNames(plan *scenario.Plan) []string {
	names := slices.Clone(plan.SecretInputs)
	for k := range plan.Input {
		if secret.IsSensitiveKey(k) && !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	return names
}

// outputs are the step outputs by step name.
func (r *run) outputs() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]any, len(r.st.Done))
	for name, s := range r.st.Done {
		out[name] = s.Output
	}
	return out
}

// vars are the expression variables of finished steps.
func (r *run) vars() expr.Vars {
	r.mu.Lock()
	defer r.mu.Unlock()
	steps := make(map[string]any, len(r.st.Done))
	for name, s := range r.st.Done {
		status := s.Status
		if r.check {
			status = checkStatus(status)
		}
		steps[name] = expr.StepValue(s.Output, s.Changed, string(status))
	}
	return expr.Vars{Input: r.input, Steps: steps}
}

func (r *run) checkpoint() error {
	r.mu.Lock()
	r.st.Secrets = r.secrets.Values()
	b, err := json.Marshal(r.st)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	return r.rec.Checkpoint(b)
}

// targetResult is one target's outcome in a step.
type targetResult struct {
	sid      string
	status   client.TargetStatus
	changed  bool
	output   any
	code     string
	msg      string
	attempts int
	took     time.Duration
	reached  bool // a command ran on the soul
	// executor is how the commands ran (transport.ExecutorReporter).
	executor string
	// A check run's prediction: why it is unknown, what would change, and
	// whether the output is not the apply's.
	unknown       string
	changes       []client.Change
	outputUnknown bool
	// target is the soul the module ran on, whose durable commands are
	// forgotten once the step's results are stored.
	target *soulTarget
}

// step runs one step; fatal is non-empty when the run must stop: a
// keeper-side step failed, or any_errors_fatal and a target failed.
func (r *run) step(ctx context.Context, s *scenario.PlanStep) (fatal string, err error) {
	idx, id := s.Index, string(s.ID)
	ctx, span := tracing.Tracer().Start(ctx, "step "+s.Name, trace.WithAttributes(tracing.RunID.String(r.id), tracing.Step.String(s.Name), tracing.Module.String(id)))
	defer func() {
		if err != nil || fatal != "" {
			span.SetStatus(codes.Error, fatal)
		}
		span.End()
	}()
	// Held for approval before it is in flight: a run handed back while
	// it waits resumes waiting, not as an interrupted step.
	if err := r.hold(ctx, s); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.st.InFlight = &idx
	r.mu.Unlock()
	if err := r.checkpoint(); err != nil {
		return "", err
	}
	r.rec.Step(store.RunStep{Index: idx, Name: s.Name, Module: id, Status: string(client.StepRunning), StartedAt: r.e.now()})
	vars := r.vars()

	if r.check {
		if why := r.unknownUse(s, "on"); why != "" {
			return "", r.unknownStep(s, why)
		}
	}
	sids, err := s.Targets(ctx, vars)
	if err != nil {
		return "", err
	}
	r.rec.Event(s.Name, "", client.StepStartedData{Index: idx, Module: id, Targets: sids})

	results := r.fanOut(ctx, s, sids, vars)
	if cause := context.Cause(ctx); runner.LeftToResume(cause) {
		// Cut to be resumed: the checkpoint keeps the step in flight, so
		// that the resumed run repeats it if it is idempotent and fails
		// run.interrupted if it is not.
		return "", cause
	}
	if !s.Keeper {
		r.recordContacts(ctx, s, results)
	}

	status, changed := stepStatus(results)
	failedHere := r.settle(s, results, status, changed)
	if err := r.checkpoint(); err != nil {
		return "", err
	}
	targets := make([]*soulTarget, 0, len(results))
	for _, t := range results {
		targets = append(targets, t.target)
	}
	r.forget(targets)
	r.rec.Step(store.RunStep{Index: idx, Name: s.Name, Module: id, Status: string(status), FinishedAt: r.e.now()})
	r.rec.Event(s.Name, "", client.StepFinishedData{Index: idx, Status: status, Changed: changed, Counts: counts(results)})
	if len(failedHere) > 0 && (s.AnyErrorsFatal || s.Keeper) {
		return fmt.Sprintf("step %q failed on %s%s", s.Name, strings.Join(failedHere, ", "), fatalNote(s)), nil
	}
	return "", nil
}

// hold asks the approval gate whether step s may run, and waits while it
// is held (the run shows AwaitingApproval meanwhile). A check run's step
// is asked about as mode "check" (the policies that read context.mode
// decide), except one whose check runs the author's code (a
// module.CodeChecker that says so), which is asked about as its apply
// would be. A keeper-side step whose when is false is not held.
func (r *run) hold(ctx context.Context, s *scenario.PlanStep) error {
	if r.e.Approvals == nil {
		return nil
	}
	vars := r.vars()
	mode := "apply"
	if r.check {
		mode = "check"
		if cc, ok := s.Module.(module.CodeChecker); ok {
			p, err := s.Params(ctx, vars)
			if err != nil || cc.CheckRunsCode(p) {
				mode = "apply"
			}
		}
	}
	var params json.RawMessage
	if s.Keeper {
		if ok, err := s.Enabled(ctx, vars); err != nil || !ok {
			return nil // the step says so itself when it runs
		}
		params, _ = s.Params(ctx, vars)
		// A policy sees no secret: the secret params are left out.
		if secret := append(s.SecretParams(), s.ParamsUsing(r.secretInputs)...); len(secret) > 0 {
			var m map[string]any
			_ = json.Unmarshal(params, &m)
			for _, name := range secret {
				delete(m, name)
			}
			params, _ = json.Marshal(m)
		}
	}
	sids, _ := s.Targets(ctx, vars)
	deadline, _ := ctx.Deadline()
	return r.e.Approvals.Hold(ctx, approval.Step{
		RunID: r.id, RunName: r.name, Mode: mode, Project: r.project, Creator: r.creator,
		Index: s.Index, Name: s.Name, Module: string(s.ID), Keeper: s.Keeper, Targets: len(sids), Params: params,
		Deadline: deadline, Drain: r.drain,
		Waiting: func(waiting bool) {
			phase := client.PhaseRunning
			if waiting {
				phase = client.PhaseAwaitingApproval
			}
			r.rec.Event("", "", client.RunPhaseData{Phase: phase})
		},
	})
}

func fatalNote(s *scenario.PlanStep) string {
	if s.AnyErrorsFatal {
		return " (any_errors_fatal)"
	}
	return ""
}

func counts(results []targetResult) map[client.TargetStatus]int {
	c := map[client.TargetStatus]int{}
	for _, t := range results {
		c[t.status]++
	}
	return c
}

// stepStatus summarises targets with the one rule of client.SummarizeStep.
func stepStatus(results []targetResult) (client.StepStatus, bool) {
	statuses := make([]client.TargetStatus, len(results))
	for i, t := range results {
		statuses[i] = t.status
	}
	return client.SummarizeStep(statuses)
}

// report records one target's result and its event.
func (r *run) report(s *scenario.PlanStep, t targetResult) {
	rt := store.RunTarget{
		StepIndex: s.Index, SID: t.sid, Status: string(t.status), Changed: t.changed, ErrorCode: t.code, ErrorMsg: t.msg,
		Attempts: t.attempts, DurationMS: t.took.Milliseconds(), Unknown: t.unknown,
	}
	if len(t.changes) > 0 {
		rt.Changes, _ = json.Marshal(t.changes)
	}
	r.rec.Target(rt, t.output)
	data := client.TargetResultData{Status: t.status, Changed: t.changed, Attempts: t.attempts, DurationMS: t.took.Milliseconds(),
		Unknown: t.unknown, Changes: t.changes}
	if t.code != "" {
		data.Error = &client.RunError{Code: t.code, Message: t.msg}
	}
	r.rec.Event(s.Name, t.sid, data)
}

// target runs the step on one target: skip or look the soul up, evaluate
// and authorize the step for it, reach it, run the module (with its
// retries), and judge the result (changed_when, failed_when).
func (r *run) target(ctx context.Context, s *scenario.PlanStep, sid string, vars expr.Vars) (res targetResult) {
	start := r.e.clock().Now()
	res = targetResult{sid: sid}
	ctx, span := tracing.Tracer().Start(ctx, "target", trace.WithAttributes(tracing.RunID.String(r.id), tracing.Step.String(s.Name), tracing.SID.String(sid)))
	defer func() {
		res.took = r.e.clock().Since(start)
		span.SetAttributes(tracing.Status.String(string(res.status)))
		if res.code != "" {
			span.SetStatus(codes.Error, res.code)
		}
		span.End()
	}()
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = clockwork.WithTimeout(ctx, r.e.clock(), s.Timeout)
		defer cancel()
	}
	if skip, ok := r.failedEarlier(s, sid); ok {
		return skip
	}
	if !s.Keeper {
		so, err := r.souls.Lookup(ctx, sid)
		if err != nil {
			return fail(res, err)
		}
		vars.Soul = soulVar(so)
	}
	if r.check {
		// when first: a step whose when is known and false is skipped,
		// whatever its params would need.
		if why := r.unknownUse(s, "when"); why != "" {
			res.status, res.unknown, res.outputUnknown = client.TargetUnknown, why, true
			return res
		}
		if ok, err := s.Enabled(ctx, vars); err != nil || !ok {
			if err != nil {
				return fail(res, err)
			}
			res.status = client.TargetSkipped
			return res
		}
		if why := r.unknownUse(s, "params"); why != "" {
			res.status, res.unknown, res.outputUnknown = client.TargetUnknown, why, true
			return res
		}
	}
	raw, run, err := r.prepare(ctx, s, vars)
	if err != nil {
		if a, ok := r.e.module(s).(module.FailureAuditor); ok && !r.check {
			err = a.AuditFailure(ctx, r.info(s), &module.Error{Code: codeOf(err), Message: err.Error(), Err: err})
		}
		return fail(res, err)
	}
	if !run {
		res.status = client.TargetSkipped
		return res
	}
	target, err := r.reach(ctx, s, sid)
	if err != nil {
		res.attempts = 1
		return fail(res, stopped(ctx, err))
	}
	if st, ok := target.(*soulTarget); ok {
		defer func() { r.contacted(ctx, st, &res) }()
		res.target = st
		if !r.check {
			st.durable = &durableTarget{r: r, step: &stepRef{index: s.Index, name: s.Name}, sid: sid}
		}
	}
	if r.check {
		p, err := r.predict(ctx, s, raw, target)
		res.attempts = 1
		return r.judgeCheck(ctx, s, vars, res, p, err)
	}
	out, attempts, err := r.attempt(ctx, s, sid, raw, target)
	res.attempts, res.output = attempts, out.Output
	return r.judge(ctx, s, vars, res, out, err)
}

// failedEarlier skips a soul that failed in an earlier step of the run.
func (r *run) failedEarlier(s *scenario.PlanStep, sid string) (targetResult, bool) {
	r.mu.Lock()
	failedIn, failedBefore := r.st.Failed[sid]
	r.mu.Unlock()
	if !failedBefore || s.Keeper {
		return targetResult{}, false
	}
	return targetResult{sid: sid, status: client.TargetSkipped, code: "target.failed_earlier", msg: fmt.Sprintf("%s failed in step %q", sid, failedIn)}, true
}

// prepare evaluates the step for one target: whether it runs (when), the
// run's creator may still run it, and its params, whose secret ones join
// the run's secrets.
func (r *run) prepare(ctx context.Context, s *scenario.PlanStep, vars expr.Vars) (raw json.RawMessage, run bool, err error) {
	if ok, err := s.Enabled(ctx, vars); err != nil || !ok {
		return nil, false, err
	}
	if err := r.authorize(ctx, s.Module.Info()); err != nil {
		return nil, false, err
	}
	if raw, err = s.Params(ctx, vars); err != nil {
		return nil, false, err
	}
	if names := s.SecretParams(); len(names) > 0 {
		var params map[string]any
		_ = json.Unmarshal(raw, &params)
		for _, name := range names {
			if v, ok := params[name].(string); ok {
				r.secrets.Add(v)
			}
		}
	}
	return raw, true, nil
}

// reach returns the step's target: the keeper, or the soul through its
// agent or SSH with the step's connect policy.
func (r *run) reach(ctx context.Context, s *scenario.PlanStep, sid string) (module.Target, error) {
	if s.Keeper {
		return r.e.Keeper, nil
	}
	retry := transport.RetryPolicy{}
	if s.Connect != nil {
		retry = transport.RetryPolicy{Attempts: s.Connect.Retries + 1, Interval: s.Connect.Delay}
	}
	if r.souls.AwaitsReady(sid) {
		r.rec.Event(s.Name, sid, client.LogData{Message: "first contact with a cloud-made soul: waiting until its cloud-init has finished"})
	}
	return r.souls.Target(ctx, sid, retry, s.Module.Info().NeedsRoot, r.via[viaKey(s.Index, sid)])
}

// attempt runs the module on target, again after RetryDelay while it
// fails and retries are left; a disconnection (outcome unknown) or the
// end of ctx stops the retries. An error at the end of ctx is the run's
// timeout or cancellation.
func (r *run) attempt(ctx context.Context, s *scenario.PlanStep, sid string, raw json.RawMessage, target module.Target) (out module.Result, attempts int, err error) {
	for attempt := 0; ; attempt++ {
		attempts = attempt + 1
		if st, ok := target.(*soulTarget); ok && st.durable != nil {
			st.durable.begin(attempts)
		}
		out, err = r.e.module(s).Run(ctx, r.info(s), raw, target)
		if err == nil || attempt >= s.Retries || ctx.Err() != nil || errors.Is(err, transport.ErrDisconnected) {
			break
		}
		r.rec.Event(s.Name, sid, client.LogData{Message: fmt.Sprintf("attempt %d of %d failed: %s; retrying", attempt+1, s.Retries+1, codeOf(err))})
		select {
		case <-ctx.Done():
		case <-r.e.clock().After(s.RetryDelay):
		}
	}
	return out, attempts, stopped(ctx, err)
}

// stopped is err as the target's failure: when ctx has ended (the run's
// timeout or its cancel, whose cause may be neither context error), the
// run's reason rather than what the interrupted connection or command
// said.
func stopped(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	code := "run.cancelled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = "run.timeout"
	}
	return &module.Error{Code: code, Message: "stopped: " + context.Cause(ctx).Error(), Err: err}
}

// judge decides the target's status from the module's result and error
// with the step's changed_when and failed_when.
func (r *run) judge(ctx context.Context, s *scenario.PlanStep, vars expr.Vars, res targetResult, out module.Result, err error) targetResult {
	errMsg := ""
	if err != nil {
		errMsg = err.Error()
	}
	rv := vars
	rv.Result = expr.ResultValue(out.Output, out.Changed, err != nil, errMsg)
	changed, cerr := s.Changed(ctx, rv, out.Changed)
	if cerr != nil {
		return fail(res, cerr)
	}
	res.changed = changed
	failedNow, ferr := s.Failed(ctx, rv, err != nil)
	if ferr != nil {
		return fail(res, ferr)
	}
	switch {
	case failedNow && err == nil:
		return fail(res, &module.Error{Code: "step.failed_when", Message: "failed_when is true"})
	case failedNow:
		return fail(res, err)
	}
	res.status = client.TargetOK
	if res.changed {
		res.status = client.TargetChanged
	}
	return res
}

// contacted records on res what the target learned of its soul (a
// command ran; how commands run there) and audits a replaced executor.
func (r *run) contacted(ctx context.Context, st *soulTarget, res *targetResult) {
	res.reached = st.ran.Load()
	if x, ok := st.conn.(transport.ExecutorReporter); ok {
		res.executor = x.Executor()
	}
	r.auditReplacedExecutor(ctx, st)
}

// auditReplacedExecutor audits soul.executor_replaced when the target's
// connection found the executor binary on the soul altered (its content
// not its name's hash) and replaced it with the keeper's.
func (r *run) auditReplacedExecutor(ctx context.Context, st *soulTarget) {
	x, ok := st.conn.(interface{ TakeReplacedExecutor() (string, bool) })
	if !ok {
		return
	}
	sum, ok := x.TakeReplacedExecutor()
	if !ok {
		return
	}
	err := r.souls.store.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{Actor: store.ActorKeeper, Action: "soul.executor_replaced",
		Object: "soul/" + st.sid, Project: r.project, Payload: map[string]any{"sid": st.sid, "sha256": sum, "run_id": r.id}})
	if err != nil {
		r.log.Error("audit a replaced executor binary", "sid", st.sid, "err", err)
	}
}

// recordContacts records what the step's targets learned about reaching
// their souls (Souls.Record). A registry that cannot record it does not fail
// the step, whose work on the hosts is done: the run's log says so.
func (r *run) recordContacts(ctx context.Context, s *scenario.PlanStep, results []targetResult) {
	contacts := make([]Contact, 0, len(results))
	for _, t := range results {
		switch {
		case t.reached:
			contacts = append(contacts, Contact{SID: t.sid, Reached: true, Executor: t.executor})
		case t.status == client.TargetUnreachable:
			contacts = append(contacts, Contact{SID: t.sid, Unreachable: true, Code: t.code, Error: r.secrets.MaskString(t.msg)})
		}
	}
	actor := store.Actor(r.creator)
	if err := r.souls.Record(context.WithoutCancel(ctx), r.id, actor, contacts); err != nil {
		r.log.Warn("soul status not recorded", "step", s.Name, "err", err)
		r.rec.Event(s.Name, "", client.LogData{Message: "the souls' status could not be recorded: " + err.Error()})
	}
}

// authorize checks, before a step of a module that declares a permission
// does anything, that the run's creator still holds it: a token revoked,
// expired or stripped of the permission since the run was accepted fails
// the step with auth.forbidden.
func (r *run) authorize(ctx context.Context, info module.Info) error {
	if info.Permission == "" {
		return nil
	}
	perm := auth.Permission(info.Permission)
	if r.e.Authorizer == nil {
		return &module.Error{Code: "auth.forbidden", Message: fmt.Sprintf("%s needs %s and this keeper has no way to check the run's creator", info.ID, perm)}
	}
	err := r.e.Authorizer.Authorize(ctx, r.creator, perm)
	switch {
	case errors.Is(err, auth.ErrForbidden):
		return &module.Error{Code: "auth.forbidden", Message: fmt.Sprintf("the run's creator may no longer run %s: %v; nothing was done", info.ID, err), Err: err}
	case err != nil:
		return &module.Error{Code: "auth.check_failed", Message: fmt.Sprintf("cannot check that the run's creator may run %s: %v; nothing was done", info.ID, err), Err: err}
	}
	return nil
}

// codeOf returns the stable code of err: a step evaluation code, a
// transport code, or the module's.
func codeOf(err error) string {
	var se *scenario.StepError
	if errors.As(err, &se) && se.Code != "" {
		return se.Code
	}
	var me *module.Error
	if errors.As(err, &me) && me.Code != "" {
		return me.Code
	}
	if c := transport.Code(err); c != "" {
		return c
	}
	return module.Code(err)
}

// fail fills res from err: unreachable for connection failures, failed
// otherwise, with the error's stable code.
func fail(res targetResult, err error) targetResult {
	res.status = client.TargetFailed
	if errors.Is(err, transport.ErrUnreachable) {
		res.status = client.TargetUnreachable
	}
	res.code = codeOf(err)
	if errors.Is(err, context.DeadlineExceeded) {
		res.code = "run.timeout"
	} else if errors.Is(err, context.Canceled) {
		res.code = "run.cancelled"
	}
	res.msg = err.Error()
	return res
}

// soulVar is the soul variable of expressions: the registry record.
func soulVar(so store.Soul) map[string]any {
	var attrs map[string]any
	_ = json.Unmarshal(so.Attributes, &attrs)
	return map[string]any{
		"sid": so.SID, "status": so.Status, "address": so.Address, "provider": so.Provider, "vm_id": so.VMID,
		"primary_ip": so.PrimaryIP, "attributes": attrs, "user": so.Connection.User, "port": so.Connection.Port,
	}
}
