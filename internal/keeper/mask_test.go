package keeper_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// roleClient creates a token of role with the admin client c and returns a
// client that uses it, and the plain token.
func roleClient(t *testing.T, k *proc, c *client.Client, name, role string) (*client.Client, string) {
	t.Helper()
	tok, err := c.TokenCreate(context.Background(), client.TokenCreate{Name: name, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.New(k.Addr, tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	return rc, tok.Token
}

// stdout is a target's stdout output.
func stdout(t *testing.T, tg client.RunTarget) string {
	t.Helper()
	var out struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(tg.Output, &out); err != nil {
		t.Fatalf("target output %s: %v", tg.Output, err)
	}
	return out.Stdout
}

// answers is every API answer a run's reader sees, as JSON text: the run,
// the run list, the run's event stream, providers and the audit log.
func answers(t *testing.T, c *client.Client, runID string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	enc := func(what string, v any, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := json.Marshal(v)
		out[what] = string(b)
	}
	r, err := c.RunGet(ctx, runID)
	enc("GET /v1/runs/"+runID, r, err)
	l, err := c.RunList(ctx, client.RunListOptions{})
	enc("GET /v1/runs", l, err)
	var evs []client.RunEvent
	err = c.RunEvents(ctx, runID, 0, func(e client.RunEvent) error { evs = append(evs, e); return nil })
	enc("GET /v1/runs/"+runID+"/events", evs, err)
	p, err := c.ProviderList(ctx, client.ListOptions{})
	enc("GET /v1/providers", p, err)
	a, err := c.AuditList(ctx, client.AuditListOptions{})
	enc("GET /v1/audit", a, err)
	return out
}

// TestSecretInputDoesNotRewriteOtherRuns is the reported abuse: an
// operator's run with the secret input "Succeeded". While that run
// executes and after it ended, another run's phase, step statuses, output
// and events, the run list, the providers and the audit log still say
// "Succeeded"; a run started meanwhile prints the same text unmasked; only
// the operator's own run masks its own secret in its own output. (Before
// runs had their own sets, the secret went to a process-global list that
// masked every answer of the keeper: every phase read "***".)
func TestSecretInputDoesNotRewriteOtherRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	operator, _ := roleClient(t, k, admin, "mallory", "operator")
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web.local.test", srv)
	ctx := context.Background()
	if _, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "cloud", Driver: "local", Region: "Succeeded", Config: map[string]any{"note": "Succeeded"}}); err != nil {
		t.Fatal(err)
	}
	echo := func(c *client.Client, text string) *client.Run {
		t.Helper()
		sc := "steps:\n  - name: say\n    on: web.local.test\n    module: core.command.ran\n    params: {cmd: 'echo " + text + "'}\n"
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		return waitRun(t, c, run.ID)
	}
	victim := echo(admin, "Succeeded-before")

	release := filepath.Join(t.TempDir(), "release")
	// However the test ends, the held command ends before sshd stops.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	attack := `inputs:
  pw: {type: string, secret: true}
steps:
  - name: hold
    on: web.local.test
    module: core.command.ran
    params:
      cmd: 'echo "mine: $PW"; while [ ! -e ` + release + ` ]; do sleep 0.05; done'
      env: {PW: "${ input.pw }"}
`
	run, _, err := operator.RunCreate(ctx, client.RunCreate{Scenario: attack, Input: map[string]any{"pw": "Succeeded"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, admin, run.ID, "the attacking run holds", stepRunning("hold"))

	check := func(when string, c *client.Client, victim *client.Run, wantStdout string) {
		t.Helper()
		got, err := c.RunGet(ctx, victim.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Phase != "Succeeded" || got.Steps[0].Status != "changed" || stdout(t, got.Steps[0].Targets[0]) != wantStdout {
			t.Errorf("%s: the other run reads %s / %s / %s", when, got.Phase, got.Steps[0].Status, got.Steps[0].Targets[0].Output)
		}
		for what, text := range answers(t, c, victim.ID) {
			if strings.Contains(text, `"***"`) && what != "GET /v1/audit" && what != "GET /v1/runs" {
				t.Errorf("%s: %s masks something: %s", when, what, text)
			}
			if !strings.Contains(text, "Succeeded") {
				t.Errorf("%s: %s lost the text Succeeded: %s", when, what, text)
			}
		}
		l, err := c.RunList(ctx, client.RunListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.Items {
			if r.ID == victim.ID && r.Phase != "Succeeded" {
				t.Errorf("%s: the run list shows %s", when, r.Phase)
			}
		}
		a, err := c.AuditList(ctx, client.AuditListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range a.Items {
			if e.Action == "run.finished" && e.Object == "run/"+victim.ID {
				found = strings.Contains(string(e.Payload), `"phase":"Succeeded"`)
			}
			if e.Action == "provider.created" && !strings.Contains(string(e.Payload), `"note":"Succeeded"`) {
				t.Errorf("%s: the provider's audit payload changed: %s", when, e.Payload)
			}
		}
		if !found {
			t.Errorf("%s: the audit log lost the other run's phase", when)
		}
		p, err := c.ProviderGet(ctx, "cloud")
		if err != nil || p.Region != "Succeeded" || !strings.Contains(string(p.Config), `"note":"Succeeded"`) {
			t.Errorf("%s: provider = %+v, %v", when, p, err)
		}
	}
	// While the attacking run executes: the victim, read by the admin and
	// by the attacker, and a run started meanwhile.
	check("during the attack (admin)", admin, victim, "Succeeded-before\n")
	check("during the attack (operator)", operator, victim, "Succeeded-before\n")
	meanwhile := echo(admin, "Succeeded-meanwhile")
	check("a run started during the attack", admin, meanwhile, "Succeeded-meanwhile\n")

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	own := waitRun(t, admin, run.ID)
	check("after the attack", admin, victim, "Succeeded-before\n")
	check("a run started after the attack", admin, echo(admin, "Succeeded-after"), "Succeeded-after\n")

	// The attacker's own run: its phase is its phase, its own secret is
	// masked in its own output.
	if own.Phase != "Succeeded" || own.Steps[0].Status != "changed" {
		t.Fatalf("the attacking run = %s %+v", own.Phase, own.Steps)
	}
	if got := stdout(t, own.Steps[0].Targets[0]); got != "mine: ***\n" {
		t.Fatalf("the attacking run's own output = %q, want its secret masked", got)
	}
}

// TestRunSecretMasksOnlyItsOwnRun: a run's secret value masks that run's
// output, events and message, and not the output of another run (by
// another user) that prints the same text, whether the two overlap in time
// or not.
func TestRunSecretMasksOnlyItsOwnRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	alice, _ := roleClient(t, k, admin, "alice", "operator")
	bob, _ := roleClient(t, k, admin, "bob", "operator")
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "db.local.test", srv)
	ctx := context.Background()
	const shared = "shared-text-7d1c0a"
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	aliceSc := `inputs:
  db_pass: {type: string, secret: true}
steps:
  - name: print
    on: db.local.test
    module: core.command.ran
    params:
      cmd: 'echo "alice: $P"; while [ ! -e ` + gate + ` ]; do sleep 0.05; done'
      env: {P: "${ input.db_pass }"}
`
	a, _, err := alice.RunCreate(ctx, client.RunCreate{Scenario: aliceSc, Input: map[string]any{"db_pass": shared}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, admin, a.ID, "alice's run prints", stepRunning("print"))
	bobSc := "inputs:\n  word: {type: string}\nsteps:\n  - name: print\n    on: db.local.test\n    module: core.command.ran\n    params: {cmd: 'echo \"bob: ${ input.word }\"'}\n"
	b, _, err := bob.RunCreate(ctx, client.RunCreate{Scenario: bobSc, Input: map[string]any{"word": shared}})
	if err != nil {
		t.Fatal(err)
	}
	bobRun := waitRun(t, bob, b.ID)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	aliceRun := waitRun(t, alice, a.ID)

	if got := stdout(t, bobRun.Steps[0].Targets[0]); got != "bob: "+shared+"\n" {
		t.Fatalf("bob's output = %q: alice's secret masked another run", got)
	}
	for what, text := range answers(t, bob, b.ID) {
		if (what == "GET /v1/runs/"+b.ID || what == "GET /v1/runs") && !strings.Contains(text, shared) {
			t.Errorf("%s lost bob's text: %s", what, text)
		}
	}
	if got := stdout(t, aliceRun.Steps[0].Targets[0]); got != "alice: ***\n" {
		t.Fatalf("alice's output = %q, want her secret masked", got)
	}
	aliceAnswers := answers(t, alice, a.ID)
	for _, what := range []string{"GET /v1/runs/" + a.ID, "GET /v1/runs/" + a.ID + "/events"} {
		if strings.Contains(aliceAnswers[what], "alice: "+shared) {
			t.Errorf("%s shows alice's secret: %s", what, aliceAnswers[what])
		}
	}
}

// TestTokensMaskedByPattern: an API token (sst_…) and a bootstrap token
// (sbt_…) printed by a command, and handed in as an input nobody declared
// secret, are masked in every answer, the event stream, the audit log, the
// keeper's log and every byte of its data directory, although nobody
// registered them. (Before, only values registered by name were masked:
// a token a step printed was stored and shown in clear.)
func TestTokensMaskedByPattern(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir, "--log-level", "debug")
	admin := adminClient(t, k, data)
	_, viewerToken := roleClient(t, k, admin, "watcher", "viewer")
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web.local.test", srv)
	ctx := context.Background()
	const bootstrap = "sbt_Q2hlY2tpbmcgdGhhdCB0aGlzIGlzIG1hc2tlZC4uLjEyMzQ1Njc4OQ"
	sc := `inputs:
  note: {type: string}
  other: {type: string}
steps:
  - name: leak
    on: web.local.test
    module: core.command.ran
    params:
      cmd: 'echo "api=${ input.note } boot=${ input.other }"; echo "again ${ input.note }" >&2; exit 3'
`
	run, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc, Input: map[string]any{"note": viewerToken, "other": bootstrap}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, admin, run.ID)
	if final.Phase != "Failed" || len(final.Steps) != 1 || len(final.Steps[0].Targets) != 1 {
		t.Fatalf("run = %s %+v", final.Phase, final.Steps)
	}
	var out struct {
		Stdout, Stderr string
	}
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &out)
	if out.Stdout != "api=*** boot=***\n" {
		t.Fatalf("stdout = %q (output %s)", out.Stdout, final.Steps[0].Targets[0].Output)
	}
	for what, text := range answers(t, admin, run.ID) {
		for _, tok := range []string{viewerToken, bootstrap} {
			if strings.Contains(text, tok) {
				t.Errorf("%s shows the token %s: %s", what, tok[:4], text)
			}
		}
	}
	if strings.Contains(string(final.Input), viewerToken) || string(final.Input) != `{"note":"***","other":"***"}` {
		t.Errorf("stored input = %s", final.Input)
	}
	// The token still works: masking is of text, not of the token.
	if vc, err := client.New(k.Addr, viewerToken); err != nil {
		t.Fatal(err)
	} else if _, err := vc.RunGet(ctx, run.ID); err != nil {
		t.Fatalf("the viewer token no longer works: %v", err)
	}
	logs := k.Interrupt(t)
	for _, tok := range []string{viewerToken, bootstrap} {
		if strings.Contains(logs, tok) {
			t.Errorf("the keeper log shows the token %s", tok[:4])
		}
	}
	grepDir(t, data, viewerToken, bootstrap)
}

// grepDir fails the test for every file under dir (database, WAL and all)
// that holds one of needles.
func grepDir(t *testing.T, dir string, needles ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds %s… in clear", path, n[:8])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestProviderConfigSealed: a provider's {"api_key": …} is stored sealed
// (not in the SQLite database, its WAL or anywhere in the data directory),
// masked in the provider answers and the audit log, and handed to the
// driver in clear (the fake driver reports the SHA-256 of what it got).
// (Before, the config went into the providers table as it came.)
func TestProviderConfigSealed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	plugins := filepath.Join(data, "plugins")
	buildFakeDriver(t, plugins)
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	ctx := context.Background()
	const canary = "canary-api-key-6c2f9b81"
	p, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "fake", Driver: "fake", FQDNSuffix: "fake.test", Config: map[string]any{"api_key": canary}})
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Config) != `{"api_key":"***"}` {
		t.Fatalf("POST /v1/providers answered config %s", p.Config)
	}
	// The database and its WAL, while the keeper runs.
	grepDir(t, data, canary)

	sc := `steps:
  - name: make
    on: keeper
    module: core.cloud.created
    params: {provider: fake, profile: {cpus: 1}, count: 1}
`
	run, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, admin, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("run = %s %+v", final.Phase, final.Error)
	}
	var made struct {
		Hosts []struct {
			Attributes map[string]any `json:"attributes"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(final.Steps[0].Targets[0].Output, &made); err != nil || len(made.Hosts) != 1 {
		t.Fatalf("output = %s (%v)", final.Steps[0].Targets[0].Output, err)
	}
	sum := sha256.Sum256([]byte(canary))
	if got := made.Hosts[0].Attributes["config_api_sha256"]; got != hex.EncodeToString(sum[:]) {
		t.Fatalf("the driver got an api_key with SHA-256 %v, want the one of the canary", got)
	}
	for what, text := range answers(t, admin, run.ID) {
		if strings.Contains(text, canary) || strings.Contains(text, "sealed:") {
			t.Errorf("%s shows the api_key or its sealed text: %s", what, text)
		}
	}
	got, err := admin.ProviderGet(ctx, "fake")
	if err != nil || string(got.Config) != `{"api_key":"***"}` {
		t.Fatalf("GET /v1/providers/fake = %s, %v", got.Config, err)
	}
	grepDir(t, data, canary)
	k.Interrupt(t)
	grepDir(t, data, canary)
}

// TestResumedRunStillMasksItsSecrets: what a run stored before its keeper
// was killed stays masked after a restart (it was masked when written),
// and a step that runs after the restart masks the run's secret input
// again: the new keeper process builds the run's set from its sealed input.
func TestResumedRunStillMasksItsSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	up := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "up.local.test", up)
	boot := addBootingSoul(t, c, "booting.local.test", up.User)
	const canary = "resume-canary-0f3e91"
	managed := filepath.Join(t.TempDir(), "managed")
	sc := `inputs:
  pw: {type: string, secret: true}
steps:
  - name: before
    on: up.local.test
    module: core.command.ran
    params: {cmd: 'echo "before: $PW"', env: {PW: "${ input.pw }"}}
  - name: place
    on: booting.local.test
    module: core.file.present
    connect: {retries: 100, delay: 500ms}
    params: {path: ` + managed + `, content: "placed\n"}
  - name: after
    on: up.local.test
    module: core.command.ran
    params: {cmd: 'echo "after: $PW"', env: {PW: "${ input.pw }"}}
`
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"pw": canary}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, run.ID, "step place running", stepRunning("place"))
	if err := k.Cmd.Process.Kill(); err != nil { // SIGKILL: nothing of the run's set survives
		t.Fatal(err)
	}
	<-k.Done()

	boot()
	k = serve(t, dir)
	c = adminClient(t, k, data)
	final := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" || len(final.Steps) != 3 {
		t.Fatalf("resumed run = %s %+v\nsteps %+v", final.Phase, final.Error, final.Steps)
	}
	if got := stdout(t, final.Steps[0].Targets[0]); got != "before: ***\n" {
		t.Errorf("the step before the restart shows %q", got)
	}
	if got := stdout(t, final.Steps[2].Targets[0]); got != "after: ***\n" {
		t.Errorf("the step after the restart shows %q", got)
	}
	for what, text := range answers(t, c, run.ID) {
		if strings.Contains(text, canary) {
			t.Errorf("%s shows the secret: %s", what, text)
		}
	}
	k.Interrupt(t)
	grepDir(t, data, canary)
}

// TestSoulKeyCannotRewriteOtherRuns: a soul whose key_ref names a file
// holding a common word ("Succeeded") — a soul.create holder can point it at
// any file — masks that word only in the run that resolved it. (Before,
// resolving a reference registered its text keeper-wide, and every run's
// phase read "***" from then on.)
func TestSoulKeyCannotRewriteOtherRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web.local.test", srv)
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("Succeeded\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SoulCreate(ctx, client.SoulCreate{SID: "odd.local.test", Address: srv.Addr, Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + keyFile}}); err != nil {
		t.Fatal(err)
	}
	run := func(on string) *client.Run {
		t.Helper()
		sc := "steps:\n  - name: say\n    on: " + on + "\n    module: core.command.ran\n    params: {cmd: 'echo Succeeded-on-" + on + "'}\n"
		r, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		return waitRun(t, admin, r.ID)
	}
	victim := run("web.local.test")
	odd := run("odd.local.test")
	if odd.Phase != "Failed" {
		t.Fatalf("a run with an unusable key = %s", odd.Phase)
	}
	after := run("web.local.test")
	for _, r := range []*client.Run{victim, after} {
		got, err := admin.RunGet(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Phase != "Succeeded" || stdout(t, got.Steps[0].Targets[0]) != "Succeeded-on-web.local.test\n" {
			t.Fatalf("run %s reads %s %s after the odd soul's key was resolved", r.ID, got.Phase, got.Steps[0].Targets[0].Output)
		}
	}
	a, err := admin.AuditList(ctx, client.AuditListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range a.Items {
		if e.Action == "run.finished" && e.Object == "run/"+after.ID && !strings.Contains(string(e.Payload), `"phase":"Succeeded"`) {
			t.Fatalf("the audit log reads %s", e.Payload)
		}
	}
}

// TestTooManySecretsWithholdsOutput: a run that hands the keeper more
// secret values than a run's set holds (1024) cannot use that to get the
// extra ones shown: its output is withheld (every string masked) and it
// fails with run.too_many_secrets; another run is unaffected.
func TestTooManySecretsWithholdsOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	operator, _ := roleClient(t, k, admin, "flood", "operator")
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web.local.test", srv)
	ctx := context.Background()
	values := make([]any, 1100)
	for i := range values {
		values[i] = fmt.Sprintf("flood-secret-%04d", i)
	}
	sc := `inputs:
  api_tokens: {type: list}
steps:
  - name: print
    on: web.local.test
    module: core.command.ran
    params: {cmd: 'echo "last: ${ input.api_tokens[1099] } first: ${ input.api_tokens[0] }"'}
  - name: never
    on: web.local.test
    module: core.command.ran
    params: {cmd: 'echo unreachable'}
`
	run, _, err := operator.RunCreate(ctx, client.RunCreate{Scenario: sc, Input: map[string]any{"api_tokens": values}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, operator, run.ID)
	if final.Phase != "Failed" || final.Error == nil || final.Error.Code != "run.too_many_secrets" {
		t.Fatalf("run = %s %+v", final.Phase, final.Error)
	}
	if len(final.Steps) != 1 {
		t.Fatalf("steps after the overflow ran: %+v", final.Steps)
	}
	if !strings.Contains(final.Error.Message, "more than 1024 secret values") {
		t.Fatalf("the error does not say why: %q", final.Error.Message)
	}
	if got := stdout(t, final.Steps[0].Targets[0]); got != "***" {
		t.Fatalf("the overflowed run's output = %q, want withheld", got)
	}
	for what, text := range answers(t, operator, run.ID) {
		if strings.Contains(text, "flood-secret-") {
			t.Errorf("%s shows a secret: %.300s", what, text)
		}
	}
	other := "steps:\n  - name: say\n    on: web.local.test\n    module: core.command.ran\n    params: {cmd: 'echo still-readable'}\n"
	r2, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: other})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitRun(t, admin, r2.ID); done.Phase != "Succeeded" || stdout(t, done.Steps[0].Targets[0]) != "still-readable\n" {
		t.Fatalf("another run = %s %s", done.Phase, done.Steps[0].Targets[0].Output)
	}
}
