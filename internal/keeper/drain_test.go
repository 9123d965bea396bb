package keeper_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestSIGTERMDrainsRunsInFlight: 20 runs of two commands each are in
// flight when the keeper gets SIGTERM. The keeper lets the steps in
// flight finish, hands the runs back and exits, saying what it waits for;
// the restarted keeper resumes them: all 20 succeed and every command ran
// exactly once.
func TestSIGTERMDrainsRunsInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	const n = 20
	ids, ledger := ledgerRuns(t, c, n)
	for _, id := range ids {
		waitFor(t, c, id, "a step running", func(r *client.Run) bool { return stepRunning("first")(r) || stepRunning("second")(r) })
	}
	stopping := time.Now()
	logs := k.Terminate(t)
	t.Logf("SIGTERM to exit with %d runs in flight: %s", n, time.Since(stopping).Round(time.Millisecond))
	if !strings.Contains(logs, "draining: ") || !strings.Contains(logs, "runs in flight") {
		t.Fatalf("the keeper did not say what it waited for while draining:\n%s", logs)
	}

	restarted := time.Now()
	k = serve(t, dir)
	c = adminClient(t, k, data)
	for _, id := range ids {
		final := waitFor(t, c, id, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
		if final.Phase != "Succeeded" {
			t.Errorf("run %s = %s %+v", id, final.Phase, final.Error)
		}
	}
	t.Logf("restart to all %d runs Succeeded: %s", n, time.Since(restarted).Round(time.Millisecond))
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		count[l]++
	}
	for i := 0; i < n; i++ {
		for _, step := range []string{"first", "second"} {
			if line := fmt.Sprintf("r%02d %s", i, step); count[line] != 1 {
				t.Errorf("command %q ran %d times, want exactly once", line, count[line])
			}
		}
	}
	if len(count) != 2*n {
		t.Errorf("ledger has %d distinct lines, want %d:\n%s", len(count), 2*n, b)
	}
}

// ledgerRuns registers a soul on a real sshd and starts n runs of two
// steps on it, each a command that sleeps 2 s and appends "rNN first" or
// "rNN second" to the ledger file it returns.
func ledgerRuns(t *testing.T, c *client.Client, n int) (ids []string, ledger string) {
	t.Helper()
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	ledger = filepath.Join(t.TempDir(), "ledger")
	sc := `inputs:
  tag: {type: string}
steps:
  - name: first
    on: h.local.test
    module: core.command.ran
    params: {cmd: "sleep 2; echo ${ input.tag } first >> ` + ledger + `"}
  - name: second
    on: h.local.test
    module: core.command.ran
    params: {cmd: "sleep 2; echo ${ input.tag } second >> ` + ledger + `"}
`
	for i := 0; i < n; i++ {
		run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": fmt.Sprintf("r%02d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	return ids, ledger
}

// TestDrainTimeoutHandsRunsBack: with a drain_timeout shorter than the
// steps in flight, the keeper lets go of them and exits; after the restart
// the idempotent step runs again and its run succeeds, without repeating
// the finished step, and the non-idempotent command, which went on on the
// soul, is reattached, not repeated: its run succeeds too.
func TestDrainTimeoutHandsRunsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	cfg := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(cfg, []byte("drain_timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, data)
	up := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "up.local.test", up)

	// The second host is "booting": registered, its sshd not started yet,
	// so that the idempotent step waits for it past the drain timeout.
	boot := addBootingSoul(t, c, "booting.local.test", up.User)
	work := t.TempDir()
	counter, managed, slow := filepath.Join(work, "counter"), filepath.Join(work, "managed"), filepath.Join(work, "slow")
	idem := `steps:
  - name: count
    on: up.local.test
    module: core.command.ran
    params: {cmd: "echo once >> ` + counter + `"}
  - name: place
    on: booting.local.test
    module: core.file.present
    connect: {retries: 100, delay: 500ms}
    params: {path: ` + managed + `, content: "placed\n"}
`
	nonIdem := "steps:\n  - name: slow\n    on: up.local.test\n    module: core.command.ran\n    params: {cmd: 'echo once >> " + slow + "; sleep 4'}\n"
	ctx := context.Background()
	r1, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: idem})
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: nonIdem})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, r1.ID, "step place running", stepRunning("place"))
	waitFor(t, c, r2.ID, "step slow running", stepRunning("slow"))
	for i := 0; i < 100; i++ { // until the command itself has started
		if b, _ := os.ReadFile(slow); len(b) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs := k.Terminate(t)
	if !strings.Contains(logs, "drain timeout reached") {
		t.Fatalf("the keeper did not say it cut the steps in flight:\n%s", logs)
	}

	boot()
	k = serve(t, dir, "--config", cfg)
	c = adminClient(t, k, data)
	final := waitFor(t, c, r1.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" {
		t.Fatalf("resumed run = %s %+v\nsteps %+v", final.Phase, final.Error, final.Steps)
	}
	if b, _ := os.ReadFile(counter); string(b) != "once\n" {
		t.Fatalf("the finished step ran again after the restart: counter = %q", b)
	}
	if b, _ := os.ReadFile(managed); string(b) != "placed\n" {
		t.Fatalf("managed file = %q", b)
	}
	final = waitFor(t, c, r2.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	// The command the drain timeout cut went on on the soul: the resumed
	// run reattached to it.
	if final.Phase != "Succeeded" {
		t.Fatalf("non-idempotent run = %s %+v", final.Phase, final.Error)
	}
	if b, _ := os.ReadFile(slow); string(b) != "once\n" {
		t.Fatalf("the interrupted command ran again: %q", b)
	}
	if got := reattached(t, c, r2.ID); len(got) != 1 || got[0].Why != "resumed" {
		t.Fatalf("command.reattached events = %+v, want one", got)
	}
}
