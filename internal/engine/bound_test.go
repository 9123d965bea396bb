package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/engine"
	_ "github.com/soulstack/soulstack/internal/modules/command"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/transport"
)

// floodConn answers every command with size bytes of stdout and a long
// stderr, as a soul may.
type floodConn struct{ size int }

func (c floodConn) Exec(context.Context, transport.Command) (transport.Result, error) {
	return transport.Result{Stdout: []byte(strings.Repeat("x", c.size)), Stderr: []byte(strings.Repeat("e", c.size/2)), ExitCode: 1}, nil
}

type floodAgents struct{ conn floodConn }

func (a floodAgents) Agent(string) (transport.Conn, bool) { return a.conn, true }

// outputRecorder keeps each target's output as the runner would store it.
type outputRecorder struct {
	eventRecorder
	mu      sync.Mutex
	outputs map[string][]byte
	msgs    map[string]string
}

func (r *outputRecorder) Target(t store.RunTarget, output any) {
	b, _ := json.Marshal(output)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outputs[t.SID], r.msgs[t.SID] = b, t.ErrorMsg
}

// TestRunKeepsBoundedOutput: what souls answer is kept up to the
// per-target limit, and once the run's budget is spent each further
// target keeps MinTargetOutput; a cut output is still the module's shape
// with its streams marked, the run's log says what was cut, and error
// messages quoting stderr are cut too.
func TestRunKeepsBoundedOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	var sids []string
	for i := range 6 {
		sid := fmt.Sprintf("h%d.flood.test", i)
		sids = append(sids, sid)
		if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: sid, Address: "127.0.0.1", Status: store.SoulActive, Connection: store.Connection{User: "root", Port: 1}}, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const perTarget, perRun = 64 << 10, 200 << 10
	e := &engine.Executor{
		Store:     st,
		KeeperKey: key,
		Load: func(text string, input map[string]any) (*scenario.Plan, error) {
			return scenario.Load("s.yaml", []byte(text), input)
		},
		Dial: func(transport.HostKeys) transport.Dialer {
			return transport.AgentFirst(floodAgents{floodConn{4 << 20}}, nil, clockwork.NewRealClock())
		},
		Keeper:     engine.KeeperTarget{},
		Authorizer: &authorizer{},
		Limits:     engine.OutputLimits{Target: perTarget, Run: perRun},
	}
	text := fmt.Sprintf("steps:\n  - name: flood\n    on: [%s]\n    forks: 1\n    module: core.command.ran\n    params: {cmd: \"cat /dev/zero\"}\n", strings.Join(sids, ", "))
	rec := &outputRecorder{eventRecorder: eventRecorder{steps: map[string]string{}}, outputs: map[string][]byte{}, msgs: map[string]string{}}
	out := e.Execute(ctx, runner.Execution{Run: store.Run{ID: "run_flood", Scenario: text, CreatedBy: "tok_c"}}, rec)
	if out.Phase != store.PhaseFailed {
		t.Fatalf("phase %s %s: %s", out.Phase, out.ErrorCode, out.ErrorMsg)
	}
	total, small := 0, 0
	for _, sid := range sids {
		b := rec.outputs[sid]
		total += len(b)
		if len(b) > perTarget {
			t.Errorf("%s kept %d bytes of output, over the %d-byte limit", sid, len(b), perTarget)
		}
		if len(b) <= engine.MinTargetOutput {
			small++
		}
		var o struct{ Stdout, Stderr string }
		if err := json.Unmarshal(b, &o); err != nil || !strings.Contains(o.Stdout, "bytes dropped]") || !strings.HasPrefix(o.Stderr, "eee") {
			t.Errorf("%s: the cut output lost its shape or its marker: %.200s (%v)", sid, b, err)
		}
		if m := rec.msgs[sid]; len(m) > 8<<10 || !strings.Contains(m, "exit status 1") {
			t.Errorf("%s: error message of %d bytes: %.100q", sid, len(m), m)
		}
	}
	if total > perRun+engine.MinTargetOutput*len(sids) || small == 0 {
		t.Errorf("the run kept %d bytes (%d targets at the floor), want about its %d-byte budget", total, small, perRun)
	}
	notes := 0
	for _, ev := range rec.events {
		if d, ok := ev.data.(client.LogData); ok && strings.HasPrefix(d.Message, "output cut from") {
			notes++
		}
	}
	if notes != len(sids) {
		t.Errorf("%d log events say what was cut, want %d", notes, len(sids))
	}
}
