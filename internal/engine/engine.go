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
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// Target statuses.
const (
	StatusOK          = "ok"
	StatusChanged     = "changed"
	StatusFailed      = "failed"
	StatusSkipped     = "skipped"
	StatusUnreachable = "unreachable"
)

// DefaultForks bounds how many targets of one step run at once.
const DefaultForks = 50

// Plan is what the engine executes: a scenario's validated steps.
type Plan struct {
	Name  string
	Steps []Step
}

// Step is one validated step.
type Step struct {
	Name   string
	Module module.Module
	// OnKeeper marks a keeper-side step; otherwise On yields the targets:
	// a SID or a list of SIDs.
	OnKeeper bool
	On       *expr.Template
	// When, if set, must be true for the step (keeper-side) or for each
	// target (soul-side, where it may use soul) to run.
	When *expr.Program
	// Params is the params tree; strings are templates.
	Params         map[string]any
	ChangedWhen    *expr.Program
	FailedWhen     *expr.Program
	AnyErrorsFatal bool
	Forks          int
	// Connect is the SSH connection retry policy of the step's targets.
	Connect ssh.RetryPolicy
	// Retries is how many more times a failed module run is tried.
	Retries int
	// RetryDelay is the pause between those tries.
	RetryDelay time.Duration
}

// Loader turns a run's scenario text and input into a plan and the input
// with defaults applied.
type Loader func(scenario string, input map[string]any) (Plan, map[string]any, error)

// Executor implements runner.Executor.
type Executor struct {
	Store     store.Store
	Load      Loader
	KeeperKey []byte
	Resolve   func(ctx context.Context, ref string) ([]byte, error)
	SSH       ssh.Options
	FilesDir  string
	Logger    *slog.Logger
	// Keeper is the target of keeper-side modules.
	Keeper module.Target
}

var _ runner.Executor = (*Executor)(nil)

// state is the checkpoint of a run: what finished steps produced and which
// targets failed, so that a resumed run carries on where it stopped.
type state struct {
	Done     map[string]stepState `json:"done"`
	Failed   map[string]string    `json:"failed"`    // sid -> step it failed in
	InFlight *int                 `json:"in_flight"` // index of the step started last and not finished
	Errors   []string             `json:"errors"`    // first failures, for the run's message
}

type stepState struct {
	Index   int    `json:"index"`
	Status  string `json:"status"`
	Changed bool   `json:"changed"`
	Output  any    `json:"output"`
}

// Execute runs the plan of x.Run.
func (e *Executor) Execute(ctx context.Context, x runner.Execution, rec runner.Recorder) runner.Outcome {
	plan, input, err := e.Load(x.Run.Scenario, x.Input)
	if err != nil {
		return failed("scenario.invalid", "the stored scenario no longer validates: "+err.Error())
	}
	st := state{Done: map[string]stepState{}, Failed: map[string]string{}}
	if x.Resume != nil {
		if err := json.Unmarshal(x.Resume, &st); err != nil {
			return failed("run.state_unreadable", "the run's checkpoint cannot be decoded: "+err.Error())
		}
		if st.Done == nil {
			st.Done = map[string]stepState{}
		}
		if st.Failed == nil {
			st.Failed = map[string]string{}
		}
	}
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	souls := NewSouls(SoulsConfig{Store: e.Store, KeeperKey: e.KeeperKey, Resolve: e.Resolve, Options: e.SSH, FilesDir: e.FilesDir})
	defer souls.Close()
	r := &run{e: e, rec: rec, souls: souls, input: input, st: &st, log: log.With("run", x.Run.ID)}
	if st.InFlight != nil {
		i := *st.InFlight
		if i < len(plan.Steps) && !plan.Steps[i].Module.Info().Idempotent {
			s := plan.Steps[i]
			msg := fmt.Sprintf("the keeper stopped while step %q (%s) was running; it is not idempotent, so it is not repeated — check what it did before running again", s.Name, s.Module.Info().ID)
			rec.Event("step.interrupted", s.Name, "", map[string]any{"index": i, "module": string(s.Module.Info().ID)})
			rec.Step(store.RunStep{Index: i, Name: s.Name, Module: string(s.Module.Info().ID), Status: StatusFailed, FinishedAt: now()})
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.interrupted", ErrorMsg: msg, Outputs: r.outputs()}
		}
	}
	for i, s := range plan.Steps {
		if _, done := st.Done[s.Name]; done {
			continue
		}
		if err := ctx.Err(); err != nil {
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.cancelled", ErrorMsg: err.Error(), Outputs: r.outputs()}
		}
		fatal, err := r.step(ctx, i, s)
		if err != nil {
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: module.Code(err), ErrorMsg: err.Error(), Outputs: r.outputs()}
		}
		if fatal != "" {
			return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: "run.fatal_error", ErrorMsg: fatal, Outputs: r.outputs()}
		}
	}
	out := runner.Outcome{Phase: store.PhaseSucceeded, Outputs: r.outputs()}
	if len(st.Failed) > 0 {
		out.Phase, out.ErrorCode = store.PhaseFailed, "run.targets_failed"
		out.ErrorMsg = fmt.Sprintf("%d target(s) failed: %s", len(st.Failed), strings.Join(st.Errors, "; "))
	}
	return out
}

func failed(code, msg string) runner.Outcome {
	return runner.Outcome{Phase: store.PhaseFailed, ErrorCode: code, ErrorMsg: msg}
}

func now() *time.Time {
	t := time.Now().UTC()
	return &t
}

// run is the execution state of one run.
type run struct {
	e     *Executor
	rec   runner.Recorder
	souls *Souls
	input map[string]any
	log   *slog.Logger

	mu sync.Mutex
	st *state
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
		steps[name] = map[string]any{"output": s.Output, "changed": s.Changed, "status": s.Status}
	}
	return expr.Vars{Input: r.input, Steps: steps}
}

func (r *run) checkpoint() error {
	r.mu.Lock()
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
	status   string
	changed  bool
	output   any
	code     string
	msg      string
	attempts int
	took     time.Duration
}

// step runs one step; fatal is non-empty when any_errors_fatal stops the run.
func (r *run) step(ctx context.Context, idx int, s Step) (fatal string, err error) {
	info := s.Module.Info()
	id := string(info.ID)
	r.mu.Lock()
	r.st.InFlight = &idx
	r.mu.Unlock()
	if err := r.checkpoint(); err != nil {
		return "", err
	}
	r.rec.Step(store.RunStep{Index: idx, Name: s.Name, Module: id, Status: "running", StartedAt: now()})
	vars := r.vars()

	var sids []string
	var results []targetResult
	if s.OnKeeper {
		sids = []string{module.Keeper}
	} else {
		sids, err = r.targets(ctx, s, vars)
		if err != nil {
			return "", err
		}
	}
	r.rec.Event("step.started", s.Name, "", map[string]any{"index": idx, "module": id, "targets": sids})

	forks := s.Forks
	if forks <= 0 {
		forks = DefaultForks
	}
	sem := make(chan struct{}, forks)
	results = make([]targetResult, len(sids))
	var wg sync.WaitGroup
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = targetResult{sid: sid, status: StatusFailed, code: "run.cancelled", msg: "the run stopped before this target started"}
				r.report(idx, s, results[i])
				return
			}
			defer func() { <-sem }()
			results[i] = r.target(ctx, s, sid, vars)
			r.report(idx, s, results[i])
		}()
	}
	wg.Wait()

	status, changed := stepStatus(results)
	output := any(nil)
	if s.OnKeeper {
		if len(results) == 1 {
			output = results[0].output
		}
	} else {
		bySID := map[string]any{}
		for _, t := range results {
			if t.status != StatusSkipped {
				bySID[t.sid] = t.output
			}
		}
		output = bySID
	}
	r.mu.Lock()
	r.st.Done[s.Name] = stepState{Index: idx, Status: status, Changed: changed, Output: output}
	r.st.InFlight = nil
	var failedHere []string
	for _, t := range results {
		if t.status == StatusFailed || t.status == StatusUnreachable {
			r.st.Failed[t.sid] = s.Name
			failedHere = append(failedHere, t.sid)
			if len(r.st.Errors) < 5 {
				r.st.Errors = append(r.st.Errors, fmt.Sprintf("%s on %s: %s", s.Name, t.sid, t.code))
			}
		}
	}
	r.mu.Unlock()
	if err := r.checkpoint(); err != nil {
		return "", err
	}
	r.rec.Step(store.RunStep{Index: idx, Name: s.Name, Module: id, Status: status, FinishedAt: now()})
	r.rec.Event("step.finished", s.Name, "", map[string]any{"index": idx, "status": status, "changed": changed, "counts": counts(results)})
	if len(failedHere) > 0 && (s.AnyErrorsFatal || s.OnKeeper) {
		return fmt.Sprintf("step %q failed on %s%s", s.Name, strings.Join(failedHere, ", "), fatalNote(s)), nil
	}
	return "", nil
}

func fatalNote(s Step) string {
	if s.AnyErrorsFatal {
		return " (any_errors_fatal)"
	}
	return ""
}

func counts(results []targetResult) map[string]int {
	c := map[string]int{}
	for _, t := range results {
		c[t.status]++
	}
	return c
}

// stepStatus summarises targets: failed if any failed or was unreachable,
// else changed if any changed, else ok, or skipped when all were skipped.
func stepStatus(results []targetResult) (string, bool) {
	status, changed, anyRan := StatusSkipped, false, false
	for _, t := range results {
		switch t.status {
		case StatusFailed, StatusUnreachable:
			status = StatusFailed
		case StatusChanged:
			changed = true
		}
		if t.status != StatusSkipped {
			anyRan = true
		}
	}
	if status == StatusFailed {
		return status, changed
	}
	if !anyRan {
		return StatusSkipped, false
	}
	if changed {
		return StatusChanged, true
	}
	return StatusOK, false
}

// report records one target's result and its event.
func (r *run) report(idx int, s Step, t targetResult) {
	r.rec.Target(store.RunTarget{
		StepIndex: idx, SID: t.sid, Status: t.status, Changed: t.changed, ErrorCode: t.code, ErrorMsg: t.msg,
		Attempts: t.attempts, DurationMS: t.took.Milliseconds(),
	}, t.output)
	data := map[string]any{"status": t.status, "changed": t.changed, "attempts": t.attempts, "duration_ms": t.took.Milliseconds()}
	if t.code != "" {
		data["error"] = map[string]any{"code": t.code, "message": t.msg}
	}
	r.rec.Event("target.result", s.Name, t.sid, data)
}

// targets evaluates a soul-side step's on: into SIDs, in order, without
// duplicates.
func (r *run) targets(ctx context.Context, s Step, vars expr.Vars) ([]string, error) {
	v, err := s.On.Eval(ctx, vars)
	if err != nil {
		return nil, &module.Error{Code: "step.targets_invalid", Message: fmt.Sprintf("step %q: on: %v", s.Name, err)}
	}
	var raw []any
	switch x := v.(type) {
	case string:
		raw = []any{x}
	case []any:
		raw = x
	case []string:
		for _, s := range x {
			raw = append(raw, s)
		}
	default:
		return nil, &module.Error{Code: "step.targets_invalid", Message: fmt.Sprintf("step %q: on: must be a SID or a list of SIDs, got %T", s.Name, v)}
	}
	seen := map[string]bool{}
	var sids []string
	for _, item := range raw {
		sid, ok := item.(string)
		if !ok || sid == "" {
			return nil, &module.Error{Code: "step.targets_invalid", Message: fmt.Sprintf("step %q: on: %v is not a SID", s.Name, item)}
		}
		if sid == module.Keeper {
			return nil, &module.Error{Code: "step.targets_invalid", Message: fmt.Sprintf("step %q: %s runs on souls, not on the keeper", s.Name, s.Module.Info().ID)}
		}
		if !seen[sid] {
			seen[sid] = true
			sids = append(sids, sid)
		}
	}
	sort.Strings(sids)
	return sids, nil
}

// target runs the step on one target.
func (r *run) target(ctx context.Context, s Step, sid string, vars expr.Vars) (res targetResult) {
	start := time.Now()
	res = targetResult{sid: sid}
	defer func() { res.took = time.Since(start) }()
	info := s.Module.Info()

	r.mu.Lock()
	failedIn, failedBefore := r.st.Failed[sid]
	r.mu.Unlock()
	if failedBefore && !s.OnKeeper {
		res.status, res.code, res.msg = StatusSkipped, "target.failed_earlier", fmt.Sprintf("%s failed in step %q", sid, failedIn)
		return res
	}
	if !s.OnKeeper {
		so, err := r.souls.Lookup(ctx, sid)
		if err != nil {
			return fail(res, err)
		}
		vars.Soul = soulVar(so)
	}
	if s.When != nil {
		ok, err := s.When.EvalBool(ctx, vars)
		if err != nil {
			return fail(res, &module.Error{Code: "step.when_failed", Message: "when: " + err.Error()})
		}
		if !ok {
			res.status = StatusSkipped
			return res
		}
	}
	params, err := evalParams(ctx, s.Params, vars)
	if err != nil {
		return fail(res, &module.Error{Code: "step.params_failed", Message: err.Error()})
	}
	params = module.ApplyDefaults(info, params)
	for _, name := range info.SecretParams() {
		if v, ok := params[name].(string); ok {
			secret.Register(v)
		}
	}
	var values module.Values
	for k, v := range params {
		values.Set(k, v)
	}
	if problems := module.CheckParams(s.Module, values); len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
		}
		return fail(res, &module.Error{Code: "step.params_invalid", Message: strings.Join(msgs, "; ")})
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return fail(res, &module.Error{Code: "step.params_invalid", Message: err.Error()})
	}

	var target module.Target
	if s.OnKeeper {
		target = r.e.Keeper
	} else {
		target, err = r.souls.Target(ctx, sid, s.Connect, info.NeedsRoot)
		if err != nil {
			res.attempts = 1
			return fail(res, err)
		}
	}

	var out module.Result
	for attempt := 0; ; attempt++ {
		res.attempts = attempt + 1
		out, err = s.Module.Run(ctx, raw, target)
		if err == nil || attempt >= s.Retries || ctx.Err() != nil || errors.Is(err, ssh.ErrDisconnected) {
			break
		}
		r.rec.Event("log", s.Name, sid, map[string]any{"message": fmt.Sprintf("attempt %d of %d failed: %s; retrying", attempt+1, s.Retries+1, module.Code(err))})
		select {
		case <-ctx.Done():
		case <-time.After(s.RetryDelay):
		}
	}
	res.output, res.changed = out.Output, out.Changed
	failedNow := err != nil
	result := map[string]any{"output": out.Output, "changed": out.Changed, "failed": failedNow, "error": nil}
	if err != nil {
		result["error"] = map[string]any{"code": module.Code(err), "message": err.Error()}
	}
	rv := vars
	rv.Result = result
	if s.ChangedWhen != nil && err == nil {
		c, cerr := s.ChangedWhen.EvalBool(ctx, rv)
		if cerr != nil {
			return fail(res, &module.Error{Code: "step.changed_when_failed", Message: "changed_when: " + cerr.Error()})
		}
		res.changed = c
	}
	if s.FailedWhen != nil {
		f, ferr := s.FailedWhen.EvalBool(ctx, rv)
		if ferr != nil {
			return fail(res, &module.Error{Code: "step.failed_when_failed", Message: "failed_when: " + ferr.Error()})
		}
		if !f && err != nil {
			err = nil // failed_when decides
		} else if f && err == nil {
			err = &module.Error{Code: "step.failed_when", Message: "failed_when is true: " + s.FailedWhen.Source()}
		}
	}
	if err != nil {
		return fail(res, err)
	}
	res.status = StatusOK
	if res.changed {
		res.status = StatusChanged
	}
	return res
}

// fail fills res from err: unreachable for connection failures, failed
// otherwise, with the error's stable code.
func fail(res targetResult, err error) targetResult {
	res.status = StatusFailed
	if errors.Is(err, ssh.ErrUnreachable) {
		res.status = StatusUnreachable
	}
	res.code = ssh.Code(err)
	if res.code == "" {
		res.code = module.Code(err)
	}
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

// evalParams evaluates every template in the params tree.
func evalParams(ctx context.Context, params map[string]any, vars expr.Vars) (map[string]any, error) {
	out := make(map[string]any, len(params))
	for k, v := range params {
		ev, err := evalValue(ctx, v, vars)
		if err != nil {
			return nil, fmt.Errorf("params.%s: %w", k, err)
		}
		out[k] = ev
	}
	return out, nil
}

func evalValue(ctx context.Context, v any, vars expr.Vars) (any, error) {
	switch x := v.(type) {
	case *expr.Template:
		return x.Eval(ctx, vars)
	case map[string]any:
		return evalParams(ctx, x, vars)
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			ev, err := evalValue(ctx, item, vars)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = ev
		}
		return out, nil
	default:
		return v, nil
	}
}
