package keeper_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// A scenario whose expressions make cel-go panic gets 422 scenario.invalid
// with each problem at its line:column from a real keeper, which keeps
// serving; before, the request's connection was dropped with an empty
// reply by the panic in cel-go's planner.
func TestRunCreateCELCrasherIs422(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	ctx := context.Background()
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "web-1.local.test", Address: "127.0.0.1", Connection: client.Connection{Transport: "ssh", User: "root"}}); err != nil {
		t.Fatal(err)
	}
	crash := "steps:\n  - name: a\n    on: web-1.local.test\n    module: core.command.ran\n" +
		"    when: \"${ {b\\\"0\\\": 1}.size() > 0 }\"\n" +
		"    params:\n      cmd: \"${ string({dyn(b'0'): 1}.size()) }\"\n"
	_, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: crash, File: "crash.yaml"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != 422 || p.Code != "scenario.invalid" {
		t.Fatalf("create: %v, want 422 scenario.invalid", err)
	}
	want := []client.ProblemError{
		{Location: "crash.yaml:5:16", Code: "scenario.bad_expression", Message: `step "a": when: a map key of type bytes; map keys must be int, uint, bool or string`},
		{Location: "crash.yaml:7:16", Code: "expr.invalid", Message: `step "a": params.cmd: CEL cannot handle this expression (runtime error: hash of unhashable type types.Bytes); rewrite it`},
	}
	if len(p.Errors) != len(want) || p.Errors[0] != want[0] || p.Errors[1] != want[1] {
		t.Fatalf("problems = %+v\nwant %+v", p.Errors, want)
	}
	runs, err := c.RunList(ctx, client.RunListOptions{})
	if err != nil || len(runs.Items) != 0 {
		t.Fatalf("the keeper after the crasher: runs %+v, %v", runs, err)
	}
}

// Through a real keeper and sshd: a file written from a secret input is
// never world-readable and its run reports no hash of the secret (a
// four-digit PIN's SHA-256 gives the PIN away at once); a hostile input
// spliced into cmd with quote() reaches the program literally; env and
// stdin reach the command intact.
func TestRunSecretFileAndQuotedCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "web-1.local.test", srv)
	work := t.TempDir()
	pinFile, pwned := filepath.Join(work, "pin"), filepath.Join(work, "pwned")
	scenario := `inputs:
  pin: {type: string, secret: true}
  label: {type: string}
steps:
  - name: pin
    on: web-1.local.test
    module: core.file.present
    params:
      path: ` + pinFile + `
      content: "${ input.pin }"
      mode: "0600"
  - name: show
    on: web-1.local.test
    module: core.command.ran
    params:
      cmd: "printf '%s|%s|' ${ quote(input.label) } \"$PIN\"; cat"
      env: {PIN: "${ input.pin }"}
      stdin: "from stdin"
`
	const pin = "4711"
	label := "'; touch " + pwned + "; '\nsecond line"
	ctx := context.Background()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "holes.yaml", Input: map[string]any{"pin": pin, "label": label}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("run = %+v", final)
	}
	var file map[string]any
	if err := json.Unmarshal(final.Steps[0].Targets[0].Output, &file); err != nil {
		t.Fatal(err)
	}
	if _, ok := file["sha256"]; ok || file["mode"] != "0600" {
		t.Fatalf("file output = %v: want mode 0600 and no sha256", file)
	}
	if fi, err := os.Stat(pinFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pin file: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(pinFile); string(b) != pin {
		t.Fatalf("pin file holds %q", b)
	}
	var show struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(final.Steps[1].Targets[0].Output, &show); err != nil {
		t.Fatal(err)
	}
	// The label and stdin came through whole, and the PIN through env
	// (masked or not, which is the masker's business).
	if show.Stdout != label+"|"+pin+"|from stdin" && show.Stdout != label+"|***|from stdin" {
		t.Fatalf("stdout = %q, want %q", show.Stdout, label+"|"+pin+"|from stdin")
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the quoted label ran a command on the soul")
	}

	// Nowhere in the run's answer or its events is the PIN's hash.
	sum := sha256.Sum256([]byte(pin))
	hash := hex.EncodeToString(sum[:])
	whole, _ := json.Marshal(final)
	var events []client.RunEvent
	if err := c.RunEvents(ctx, run.ID, 0, func(e client.RunEvent) error { events = append(events, e); return nil }); err != nil {
		t.Fatal(err)
	}
	evs, _ := json.Marshal(events)
	if strings.Contains(string(whole), hash) || strings.Contains(string(evs), hash) {
		t.Fatal("the run reports the SHA-256 of the secret input")
	}
}

// Two souls at the same address and user, one with a key the server
// accepts and one registered with a key it does not: in one run, the
// second must fail to authenticate rather than ride on the connection the
// first opened (the pool used to key connections by user@host:port only,
// so the second soul's commands ran with the first one's credentials).
func TestRunSoulWithOtherKeyGetsNoSharedConnection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "good.local.test", srv)
	stranger, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(t.TempDir(), "stranger.key")
	if err := os.WriteFile(keyPath, stranger, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "other.local.test", Address: srv.Addr, Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + keyPath}}); err != nil {
		t.Fatal(err)
	}
	sc := "steps:\n  - name: who\n    on: [good.local.test, other.local.test]\n    module: core.command.ran\n    connect: {retries: 0}\n    params: {cmd: 'id -u'}\n"
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	got := map[string]string{}
	for _, tg := range final.Steps[0].Targets {
		code := ""
		if tg.Error != nil {
			code = tg.Error.Code
		}
		got[tg.SID] = string(tg.Status) + " " + code
	}
	if got["good.local.test"] != "changed " || !strings.HasSuffix(got["other.local.test"], " ssh.auth_failed") {
		t.Fatalf("targets = %v; want good changed and other failing with ssh.auth_failed", got)
	}
}
