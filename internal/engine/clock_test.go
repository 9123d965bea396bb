package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// waiter is a keeper-side module that runs until its context ends.
type waiter struct{}

func (waiter) Info() module.Info {
	return module.Info{ID: "test.waiter.waited", Summary: "Waits for its context.", Side: module.SideKeeper, Idempotent: true, Permission: "test.change",
		ChangesWhen: "Never.", UnchangedWhen: "Always."}
}

func (waiter) Run(ctx context.Context, _ module.RunInfo, _ json.RawMessage, _ module.Target) (module.Result, error) {
	<-ctx.Done()
	return module.Result{}, ctx.Err()
}

// flaky is a keeper-side module whose first two attempts in a run fail.
type flaky struct{}

var flakyTries sync.Map // run id -> *int

func (flaky) Info() module.Info {
	return module.Info{ID: "test.flaky.tried", Summary: "Fails twice, then works.", Side: module.SideKeeper, Idempotent: true, Permission: "test.change",
		ChangesWhen: "The third attempt.", UnchangedWhen: "Never."}
}

func (flaky) Run(_ context.Context, run module.RunInfo, _ json.RawMessage, _ module.Target) (module.Result, error) {
	v, _ := flakyTries.LoadOrStore(run.ID, new(int))
	n := v.(*int)
	*n++
	if *n <= 2 {
		return module.Result{}, &module.Error{Code: "test.flaky", Message: "not yet"}
	}
	return module.Result{Changed: true}, nil
}

func init() {
	module.Register(waiter{})
	module.Register(flaky{})
}

func clockedExecutor(clock clockwork.Clock) *engine.Executor {
	return &engine.Executor{
		Load: func(text string, input map[string]any) (*scenario.Plan, error) {
			return scenario.Load("s.yaml", []byte(text), input)
		},
		Keeper:     engine.KeeperTarget{},
		Authorizer: &authorizer{},
		Base:       base.Base{Clock: clock},
	}
}

// execute runs text on e in the background and returns its outcome and
// events once it ends.
func execute(e *engine.Executor, id, text string) <-chan *eventRecorder {
	done := make(chan *eventRecorder, 1)
	go func() {
		rec := &eventRecorder{steps: map[string]string{}}
		out := e.Execute(context.Background(), runner.Execution{Run: store.Run{ID: id, Scenario: text, CreatedBy: "tok_c"}}, rec)
		rec.steps["_phase"] = out.Phase
		done <- rec
	}()
	return done
}

// ended waits for the execution of done to end; failing says what did
// not happen when it does not.
func ended(t *testing.T, done <-chan *eventRecorder, failing string) *eventRecorder {
	t.Helper()
	select {
	case rec := <-done:
		return rec
	case <-time.After(10 * time.Second):
		t.Fatal(failing)
		return nil
	}
}

func targetResult(t *testing.T, rec *eventRecorder, step string) client.TargetResultData {
	t.Helper()
	for _, ev := range rec.events {
		if d, ok := ev.data.(client.TargetResultData); ok && ev.step == step {
			return d
		}
	}
	t.Fatalf("no target result of step %s in %+v", step, rec.events)
	return client.TargetResultData{}
}

// TestStepTimeoutOnTheClock: a step's timeout is measured on the
// executor's clock: the target fails with run.timeout when the fake clock
// reaches it, and the step's duration is the clock's. Nothing sleeps.
func TestStepTimeoutOnTheClock(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	const text = "steps:\n  - name: slow\n    on: keeper\n    timeout: 90s\n    module: test.waiter.waited\n"
	done := execute(clockedExecutor(clock), "run_timeout", text)
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil { // the step's deadline timer
		t.Fatal(err)
	}
	clock.Advance(89 * time.Second)
	select {
	case rec := <-done:
		t.Fatalf("the step ended 1s before its timeout: %+v", rec.events)
	default:
	}
	clock.Advance(time.Second)
	rec := ended(t, done, "the step did not end at its timeout on the fake clock")
	res := targetResult(t, rec, "slow")
	if rec.steps["_phase"] != store.PhaseFailed || res.Status != client.TargetFailed || res.Error == nil || res.Error.Code != "run.timeout" {
		t.Fatalf("phase %s, target %+v; want Failed with run.timeout", rec.steps["_phase"], res)
	}
}

// TestRetryDelayOnTheClock: a failing target is tried again after the
// step's retry_delay on the executor's clock, and succeeds on its third
// attempt; each retry waits for the clock.
func TestRetryDelayOnTheClock(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	const text = "steps:\n  - name: flaky\n    on: keeper\n    retries: 2\n    retry_delay: 1m\n    module: test.flaky.tried\n"
	done := execute(clockedExecutor(clock), fmt.Sprintf("run_retry_%p", clock), text) // a fresh count of tries
	for range 2 {
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil { // the retry delay
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	rec := ended(t, done, "the retries did not run on the fake clock")
	res := targetResult(t, rec, "flaky")
	if rec.steps["_phase"] != store.PhaseSucceeded || res.Status != client.TargetChanged || res.Attempts != 3 {
		t.Fatalf("phase %s, target %+v; want Succeeded, changed on attempt 3", rec.steps["_phase"], res)
	}
}
