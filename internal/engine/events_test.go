package engine_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// changer is a keeper-side module that always changes something (its
// permission is granted by an authorizer that allows everything).
type changer struct{}

var _ module.Module = changer{}

func (changer) Info() module.Info {
	return module.Info{ID: "test.changer.ran", Summary: "Changes.", Side: module.SideKeeper, Idempotent: true, Permission: "test.change",
		ChangesWhen: "Always.", UnchangedWhen: "Never."}
}

func (changer) Run(context.Context, module.RunInfo, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{Changed: true, Output: map[string]any{"done": true}}, nil
}

func init() { module.Register(changer{}) }

// event is one event as the engine hands it to its Recorder.
type event struct {
	step, sid string
	data      client.EventData
}

// eventRecorder keeps the events and the steps' stored statuses.
type eventRecorder struct {
	mu     sync.Mutex
	events []event
	steps  map[string]string
}

func (r *eventRecorder) Event(step, sid string, data client.EventData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := data.(client.TargetResultData); ok {
		d.DurationMS = 0 // the only field that depends on the clock
		data = d
	}
	r.events = append(r.events, event{step, sid, data})
}

func (r *eventRecorder) Step(s store.RunStep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps[s.Name] = s.Status
}

func (r *eventRecorder) Command(context.Context, store.RunCommand) error { return nil }
func (r *eventRecorder) Checkpoint([]byte) error                         { return nil }
func (r *eventRecorder) Target(store.RunTarget, any)                     {}

// TestEngineEmitsTheVocabulary: the engine reports a run in client's typed
// events, and a step whose targets were all skipped is skipped in its
// event and in the stored step alike.
func TestEngineEmitsTheVocabulary(t *testing.T) {
	t.Parallel()
	const text = "steps:\n  - name: a\n    on: keeper\n    module: test.changer.ran\n" +
		"  - name: b\n    on: keeper\n    when: \"false\"\n    module: test.changer.ran\n"
	e := &engine.Executor{
		Load: func(text string, input map[string]any) (*scenario.Plan, error) {
			return scenario.Load("s.yaml", []byte(text), input)
		},
		Keeper:     engine.KeeperTarget{},
		Authorizer: &authorizer{},
	}
	rec := &eventRecorder{steps: map[string]string{}}
	out := e.Execute(context.Background(), runner.Execution{Run: store.Run{ID: "run_1", Scenario: text, CreatedBy: "tok_c"}}, rec)
	if out.Phase != store.PhaseSucceeded {
		t.Fatalf("outcome %+v", out)
	}
	want := []event{
		{"a", "", client.StepStartedData{Index: 0, Module: "test.changer.ran", Targets: []string{"keeper"}}},
		{"a", "keeper", client.TargetResultData{Status: client.TargetChanged, Changed: true, Attempts: 1}},
		{"a", "", client.StepFinishedData{Index: 0, Status: client.StepChanged, Changed: true, Counts: map[client.TargetStatus]int{client.TargetChanged: 1}}},
		{"b", "", client.StepStartedData{Index: 1, Module: "test.changer.ran", Targets: []string{"keeper"}}},
		{"b", "keeper", client.TargetResultData{Status: client.TargetSkipped}},
		{"b", "", client.StepFinishedData{Index: 1, Status: client.StepSkipped, Counts: map[client.TargetStatus]int{client.TargetSkipped: 1}}},
	}
	if !reflect.DeepEqual(rec.events, want) {
		t.Fatalf("events:\n%+v\nwant:\n%+v", rec.events, want)
	}
	if rec.steps["a"] != string(client.StepChanged) || rec.steps["b"] != string(client.StepSkipped) {
		t.Fatalf("stored step statuses %v", rec.steps)
	}
}
