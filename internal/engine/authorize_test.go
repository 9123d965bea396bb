package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// guarded is a keeper-side module that needs the permission test.use and
// counts its runs.
type guarded struct {
	mu    sync.Mutex
	calls []module.RunInfo
}

var _ module.Module = (*guarded)(nil)

func (*guarded) Info() module.Info {
	return module.Info{ID: "test.guarded.used", Summary: "Needs test.use.", Side: module.SideKeeper, Permission: "test.use",
		ChangesWhen: "Always.", UnchangedWhen: "Never."}
}

func (g *guarded) Run(_ context.Context, run module.RunInfo, _ json.RawMessage, _ module.Target) (module.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, run)
	return module.Result{Changed: true}, nil
}

func (g *guarded) ran() []module.RunInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]module.RunInfo(nil), g.calls...)
}

var theGuarded = new(guarded)

func init() { module.Register(theGuarded) }

// authorizer answers with err and remembers what it was asked.
type authorizer struct {
	err   error
	asked []string
}

func (a *authorizer) Authorize(_ context.Context, tokenID string, perm auth.Permission) error {
	a.asked = append(a.asked, tokenID+" "+string(perm))
	return a.err
}

// recorder keeps the targets' results.
type recorder struct {
	mu      sync.Mutex
	targets []store.RunTarget
}

func (r *recorder) Event(string, string, client.EventData) {}
func (r *recorder) Step(store.RunStep)                     {}
func (r *recorder) Checkpoint([]byte) error                { return nil }
func (r *recorder) Command(context.Context, store.RunCommand) error {
	return nil
}
func (r *recorder) Target(t store.RunTarget, _ any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets = append(r.targets, t)
}

const guardedScenario = "steps:\n  - name: use\n    on: keeper\n    module: test.guarded.used\n"

// TestStepPermissionRechecked: a step whose module declares a permission
// asks the Authorizer about the run's creator before the module runs; a
// refusal or a failed check fails the step without running the module, and
// a keeper without an Authorizer refuses such steps.
func TestStepPermissionRechecked(t *testing.T) {
	t.Parallel()
	forbidden := &auth.ForbiddenError{TokenID: "tok_c", Permission: "test.use", Reason: "was revoked; it no longer authorizes test.use"}
	tests := []struct {
		name     string
		authz    *authorizer
		wantCode string
		wantMsg  string
	}{
		{"allowed", &authorizer{}, "", ""},
		{"forbidden", &authorizer{err: forbidden}, "auth.forbidden", "token tok_c was revoked"},
		{"check failed", &authorizer{err: errors.New("database is locked")}, "auth.check_failed", "database is locked"},
		{"no authorizer", nil, "auth.forbidden", "no way to check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the cases share the registered module's
			// call log.
			before := len(theGuarded.ran())
			e := &engine.Executor{
				Load: func(text string, input map[string]any) (*scenario.Plan, error) {
					return scenario.Load("s.yaml", []byte(text), input)
				},
				Keeper: engine.KeeperTarget{},
			}
			if tt.authz != nil {
				e.Authorizer = tt.authz
			}
			rec := &recorder{}
			out := e.Execute(context.Background(), runner.Execution{Run: store.Run{ID: "run_1", Scenario: guardedScenario, CreatedBy: "tok_c"}}, rec)
			calls := theGuarded.ran()[before:]
			if tt.authz != nil && strings.Join(tt.authz.asked, ";") != "tok_c test.use" {
				t.Fatalf("authorizer asked %v; want the run's creator and the module's permission once", tt.authz.asked)
			}
			if len(rec.targets) != 1 {
				t.Fatalf("targets = %+v", rec.targets)
			}
			tg := rec.targets[0]
			if tt.wantCode == "" {
				if out.Phase != store.PhaseSucceeded || len(calls) != 1 || calls[0].Creator != "tok_c" || calls[0].ID != "run_1" || calls[0].Step != "use" {
					t.Fatalf("outcome %+v, calls %+v", out, calls)
				}
				return
			}
			if out.Phase != store.PhaseFailed || tg.ErrorCode != tt.wantCode || !strings.Contains(tg.ErrorMsg, tt.wantMsg) {
				t.Fatalf("outcome %+v, target %+v; want %s saying %q", out, tg, tt.wantCode, tt.wantMsg)
			}
			if len(calls) != 0 {
				t.Fatalf("the module ran although the check refused: %+v", calls)
			}
		})
	}
}
