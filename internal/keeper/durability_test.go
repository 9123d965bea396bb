package keeper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// waitFor polls the run until cond holds.
func waitFor(t *testing.T, c *client.Client, id string, what string, cond func(*client.Run) bool) *client.Run {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r, err := c.RunGet(context.Background(), id)
		if err == nil && cond(r) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("run %s: %s did not happen within 60 s", id, what)
	return nil
}

func stepRunning(name string) func(*client.Run) bool {
	return func(r *client.Run) bool {
		for _, s := range r.Steps {
			if s.Name == name && s.Status == "running" {
				return true
			}
		}
		return false
	}
}

// freePort returns a free loopback port below Linux's ephemeral range
// (32768-60999), for a server a test starts later or restarts. A port from
// that range (what 127.0.0.1:0 gives) may meanwhile become the source port
// of a client retrying a connection to it — the keeper waiting for a
// booting host, or for its database — which then connects to itself and
// holds the port, so that the server cannot bind it.
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		port := 20000 + mathrand.IntN(12000)
		if portsFree(port) {
			return port
		}
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return 0
}

// portsFree reports whether a keeper listening on port could bind all it
// binds by default: the API on loopback, the agent listener (port + 1)
// and the agent bus (port + 2) on every address.
func portsFree(port int) bool {
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf(":%d", port+1), fmt.Sprintf(":%d", port+config.NATSPortOffset)}
	var open []net.Listener
	defer func() {
		for _, l := range open {
			l.Close()
		}
	}()
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return false
		}
		open = append(open, l)
	}
	return true
}

// TestKill9ResumesIdempotentStep kills the keeper with SIGKILL while an
// idempotent step waits for a host that is still booting; the restarted
// keeper resumes the run from its checkpoint: the finished step is not
// repeated, the interrupted one runs again and the run succeeds.
func TestKill9ResumesIdempotentStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	up := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "up.local.test", up)

	// The second host is "booting": registered, its sshd not started yet.
	boot := addBootingSoul(t, c, "booting.local.test", up.User)
	work := t.TempDir()
	counter, managed := filepath.Join(work, "counter"), filepath.Join(work, "managed")
	sc := `steps:
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
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, File: "resume.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, run.ID, "step place running", stepRunning("place"))
	if err := k.Cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown at all
		t.Fatal(err)
	}
	<-k.Done()

	boot()
	k = serve(t, dir)
	c = adminClient(t, k, data)
	final := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" {
		t.Fatalf("resumed run = %s %+v\nsteps %+v", final.Phase, final.Error, final.Steps)
	}
	if b, _ := os.ReadFile(counter); string(b) != "once\n" {
		t.Fatalf("the finished step ran again after the restart: counter = %q", b)
	}
	if b, _ := os.ReadFile(managed); string(b) != "placed\n" {
		t.Fatalf("managed file = %q", b)
	}
	var resumed bool
	_ = c.RunEvents(context.Background(), run.ID, 0, func(e client.RunEvent) error {
		if e.Kind == "run.phase" && strings.Contains(string(e.Data), `"resumed":true`) {
			resumed = true
		}
		return nil
	})
	if !resumed {
		t.Fatal("no run.phase event says the run was resumed")
	}
}

// TestKill9ReattachesNonIdempotentStep: a command in flight when the
// keeper dies goes on on the soul; the restarted keeper resumes the run,
// reattaches to the command instead of starting it again (a
// command.reattached event says so), and the run succeeds with the
// command's output. The command ran once.
func TestKill9ReattachesNonIdempotentStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	counter := filepath.Join(t.TempDir(), "counter")
	sc := "steps:\n  - name: slow\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'echo once >> " + counter + "; sleep 3; echo finished'}\n"
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, run.ID, "step slow running", stepRunning("slow"))
	waitCounter(t, counter)
	_ = k.Cmd.Process.Kill()
	<-k.Done()
	k = serve(t, dir)
	c = adminClient(t, k, data)
	final := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" || !strings.Contains(final.Message, "finished") {
		t.Fatalf("run = %s %+v %s", final.Phase, final.Error, final.Message)
	}
	if b, _ := os.ReadFile(counter); string(b) != "once\n" {
		t.Fatalf("the interrupted command ran again: %q", b)
	}
	if got := reattached(t, c, run.ID); len(got) != 1 || got[0].Why != "resumed" || got[0].Epoch != 2 || got[0].Transport != "ssh" {
		t.Fatalf("command.reattached events = %+v, want one, resumed in epoch 2 over ssh", got)
	}
}

// waitCounter waits until the command that appends to path has started.
func waitCounter(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(path); len(b) > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the command writing %s never started", path)
}

// reattached returns the run's command.reattached events.
func reattached(t *testing.T, c *client.Client, id string) []client.CommandReattachedData {
	t.Helper()
	var out []client.CommandReattachedData
	err := c.RunEvents(context.Background(), id, 0, func(ev client.RunEvent) error {
		if d, err := ev.Decode(); err == nil {
			if r, ok := d.(client.CommandReattachedData); ok {
				out = append(out, r)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	return out
}

func TestRunTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	sc := "steps:\n  - name: slow\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'sleep 30'}\n"
	ctx := context.Background()

	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, Timeout: "2s"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitFor(t, c, run.ID, "the timeout", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Failed" || final.Error.Code != "run.timeout" || final.Steps[0].Targets[0].Error.Code != "run.timeout" {
		t.Fatalf("timed out run = %s %+v %+v", final.Phase, final.Error, final.Steps)
	}

	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: sc, Key: "cancel-me"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, run.ID, "step slow running", stepRunning("slow"))
	if _, err := c.RunCancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	final = waitFor(t, c, run.ID, "the cancel", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Cancelled" || final.Error.Code != "run.cancelled" || final.Steps[0].Targets[0].Error.Code != "run.cancelled" {
		t.Fatalf("cancelled run = %s %+v, target %+v", final.Phase, final.Error, final.Steps[0].Targets[0])
	}
	_, err = c.RunCancel(ctx, run.ID)
	if p, ok := err.(*client.Problem); !ok || p.Code != "run.finished" {
		t.Fatalf("cancel a finished run: %v", err)
	}
	if _, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, Timeout: "forever"}); err == nil {
		t.Fatal("a bad timeout was accepted")
	}
}

// TestSecretCanaryNeverInClear puts a canary in a secret input and has a
// script print it; the canary appears in no API answer, event, log line or
// byte of the data directory (database, WAL and all).
func TestSecretCanaryNeverInClear(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir, "--log-level", "debug")
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "db.local.test", srv)
	const canary = "canary-s3cr3t-41d7e0"
	sc := `inputs:
  db_password: {type: string, secret: true}
  api_token: {type: string, required: false}
steps:
  - name: leak
    on: db.local.test
    module: core.script.ran
    params:
      source: |
        read -r event
        printf '{"note":"%s","event":%s}\n' "$PW" "$event"
      env: {PW: "${ input.db_password }"}
      event: {password: "${ input.db_password }", token: "${ input.api_token }"}
  - name: fail
    on: db.local.test
    module: core.command.ran
    params:
      cmd: 'echo "bad password $PW" >&2; exit 1'
      env: {PW: "${ input.db_password }"}
`
	ctx := context.Background()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, Input: map[string]any{"db_password": canary, "api_token": canary + "-tok"}, Key: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Failed" || final.Steps[0].Status != "changed" || final.Steps[1].Targets[0].Error == nil {
		t.Fatalf("run = %s %+v", final.Phase, final.Steps)
	}
	var seen []string
	b, _ := json.Marshal(final)
	seen = append(seen, string(b))
	_ = c.RunEvents(ctx, run.ID, 0, func(e client.RunEvent) error { b, _ := json.Marshal(e); seen = append(seen, string(b)); return nil })
	list, _ := c.RunList(ctx, client.RunListOptions{})
	b, _ = json.Marshal(list)
	seen = append(seen, string(b))
	audit, _ := c.AuditList(ctx, client.AuditListOptions{})
	b, _ = json.Marshal(audit)
	seen = append(seen, string(b))
	for _, s := range seen {
		if strings.Contains(s, canary) {
			t.Fatalf("an API answer shows the secret: %s", s)
		}
	}
	if !strings.Contains(string(final.Steps[0].Targets[0].Output), `"note":"***"`) {
		t.Fatalf("the script's output lost its shape: %s", final.Steps[0].Targets[0].Output)
	}
	logs := k.Interrupt(t)
	if strings.Contains(logs, canary) {
		t.Fatalf("the keeper log shows the secret:\n%s", logs)
	}
	// Every byte the keeper stored: database, WAL, keys, everything.
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds the secret in clear", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addBootingSoul registers sid as a host that is still booting: its sshd
// is not started yet, so steps on it wait in their connect retries. The
// returned boot starts that sshd, for user, with the soul's key.
func addBootingSoul(t *testing.T, c *client.Client, sid, user string) (boot func()) {
	t.Helper()
	priv, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	keyPath := filepath.Join(t.TempDir(), "booting.key")
	if err := os.WriteFile(keyPath, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SoulCreate(context.Background(), client.SoulCreate{SID: sid, Address: "127.0.0.1", Connection: client.Connection{User: user, Port: port, KeyRef: "file:" + keyPath}}); err != nil {
		t.Fatal(err)
	}
	return func() { sshtest.Start(t, sshtest.Options{Port: port, ClientKey: priv, User: user}) }
}

// countReattached counts the command.reattached events of the runs.
func countReattached(t *testing.T, c *client.Client, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		n += len(reattached(t, c, id))
	}
	return n
}
