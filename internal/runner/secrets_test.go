package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// gatedExec adds the secret named by its run's input to the run's set,
// records an event and a target output that both print the texts of every
// run's secret, and waits for release before it ends.
type gatedExec struct {
	all     []string // every run's secret text
	release chan struct{}
	mu      sync.Mutex
	started int
	seen    chan struct{}
}

func (g *gatedExec) Execute(ctx context.Context, x runner.Execution, rec runner.Recorder) runner.Outcome {
	own, _ := x.Input["own"].(string)
	x.Secrets.Add(own)
	line := "texts: " + strings.Join(g.all, " ")
	rec.Event("s", "", client.LogData{Message: line})
	rec.Target(store.RunTarget{StepIndex: 0, SID: "keeper", Status: "ok", ErrorMsg: line}, map[string]any{"stdout": line})
	g.mu.Lock()
	g.started++
	g.mu.Unlock()
	g.seen <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return runner.Outcome{Phase: store.PhaseSucceeded, Outputs: map[string]any{"said": line}}
}

// TestRunSecretsAreScopedAndReleased: each executing run has its own set;
// what one run adds masks that run's stored events, outputs and errors and
// no other run's, and once the runs end the runner holds no set at all.
func TestRunSecretsAreScopedAndReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	key := make([]byte, 32)
	sealer, err := secret.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	exec := &gatedExec{release: make(chan struct{}), seen: make(chan struct{}, n)}
	for i := range n {
		exec.all = append(exec.all, fmt.Sprintf("run-%d-own-secret", i))
	}
	r, err := runner.New(ctx, runner.Config{Store: st, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: exec, Owner: "keeper-test", Workers: n})
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
	ids := make([]string, n)
	for i := range n {
		run, _, err := r.Submit(ctx, runner.SubmitParams{Name: "scoped", Scenario: "steps: []", Input: map[string]any{"own": exec.all[i]}, Actor: "tok_test"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = run.ID
	}
	for range n {
		<-exec.seen
	}
	if got := r.LiveSecrets(); got != n {
		t.Fatalf("LiveSecrets() = %d while %d runs execute", got, n)
	}
	close(exec.release)
	for _, id := range ids {
		for {
			run, err := st.RunGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if store.Terminal(run.Phase) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The job returns just after the run is stored finished.
	for r.LiveSecrets() != 0 {
		time.Sleep(10 * time.Millisecond)
	}

	for i, id := range ids {
		run, err := st.RunGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		_, targets, err := st.RunSteps(ctx, id)
		if err != nil || len(targets) != 1 {
			t.Fatalf("targets of %s = %v, %v", id, targets, err)
		}
		evs, err := st.RunEvents(ctx, id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var events strings.Builder
		for _, e := range evs {
			events.Write(e.Data)
		}
		stored := map[string]string{
			"outputs": string(run.Outputs), "message": run.Message, "events": events.String(),
			"target output": string(targets[0].Output), "target error": targets[0].ErrorMsg,
		}
		for what, text := range stored {
			for j, s := range exec.all {
				switch {
				case j == i && strings.Contains(text, s):
					t.Errorf("run %d's %s shows its own secret: %s", i, what, text)
				case j != i && !strings.Contains(text, s):
					t.Errorf("run %d's %s lost run %d's secret text, which is not its own: %s", i, what, j, text)
				}
			}
		}
		var in map[string]any
		if err := json.Unmarshal(run.InputMasked, &in); err != nil || in["own"] != exec.all[i] {
			// "own" is neither declared secret nor secret-looking: it is
			// stored as given.
			t.Errorf("stored input = %s", run.InputMasked)
		}
	}
}
