package keeper_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/testdb"
)

// tokenClient issues a token with role through admin and returns a client
// that uses it, with the token's id and the token itself.
func tokenClient(t *testing.T, k *proc, admin *client.Client, name, role string) (*client.Client, string, string) {
	t.Helper()
	tk, err := admin.TokenCreate(context.Background(), client.TokenCreate{Name: name, Role: role})
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	c, err := client.New(k.Addr, tk.Token)
	if err != nil {
		t.Fatal(err)
	}
	return c, tk.ID, tk.Token
}

// auditActions returns the audit log's events with action.
func auditActions(t *testing.T, c *client.Client, action string) []client.AuditEvent {
	t.Helper()
	var out []client.AuditEvent
	after := ""
	for {
		l, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			if e.Action == action {
				out = append(out, e)
			}
		}
		if l.Next == "" {
			return out
		}
		after = l.Next
	}
}

const pinScenario = `inputs:
  host: {type: string}
  pin: {type: string, secret: true}
steps:
  - name: use
    on: "${ input.host }"
    module: core.command.ran
    params: {cmd: "true"}
`

// TestRunKeyScopedToToken performs the re-run key oracle attack: token B
// reuses token A's key with a right and a wrong guess of A's secret input.
// Before keys were scoped, the right guess answered 200 with A's run and
// the wrong one 409; now both answers are the same: a new run of B's own.
func TestRunKeyScopedToToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web-1.local.test", srv)
	a, aID, aToken := tokenClient(t, k, admin, "alice", "operator")
	b, bID, _ := tokenClient(t, k, admin, "bob", "operator")
	c, cID, _ := tokenClient(t, k, admin, "carol", "operator")
	ctx := context.Background()
	create := func(cl *client.Client, pin string) (*client.Run, bool, error) {
		return cl.RunCreate(ctx, client.RunCreate{Scenario: pinScenario, Input: map[string]any{"host": "web-1.local.test", "pin": pin}, Key: "nightly"})
	}

	ra, created, err := create(a, "4711")
	if err != nil || !created || ra.CreatedBy != aID {
		t.Fatalf("A's run: %+v %v %v", ra, created, err)
	}
	waitRun(t, admin, ra.ID)

	// B guesses right, C guesses wrong: the same answer, each its own run.
	for _, g := range []struct {
		cl     *client.Client
		id     string
		pin    string
		result string
	}{{b, bID, "4711", "right"}, {c, cID, "0000", "wrong"}} {
		r, created, err := create(g.cl, g.pin)
		if err != nil || !created {
			t.Fatalf("%s guess: created=%v err=%v; want a new run (201)", g.result, created, err)
		}
		if r.ID == ra.ID || r.CreatedBy != g.id || r.Key != "nightly" {
			t.Fatalf("%s guess answered with run %s by %s; want a new run of %s", g.result, r.ID, r.CreatedBy, g.id)
		}
		if final := waitRun(t, admin, r.ID); final.Phase != "Succeeded" {
			t.Fatalf("%s guess's run: %+v", g.result, final)
		}
	}

	// Nor does the audit log compare contents: run.started carries no
	// digest (equal digests of A's and B's runs told B its guess was right).
	for _, e := range auditActions(t, admin, "run.started") {
		if strings.Contains(string(e.Payload), "digest") {
			t.Fatalf("run.started of %s shows a digest of its content: %s", e.Object, e.Payload)
		}
	}

	// A's own key still works as a re-run id for A.
	again, created, err := create(a, "4711")
	if err != nil || created || again.ID != ra.ID {
		t.Fatalf("A's key, same content: %+v %v %v", again, created, err)
	}
	_, _, err = create(a, "1234")
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusConflict || p.Code != "run.key_conflict" {
		t.Fatalf("A's key, other content: %v; want 409 run.key_conflict", err)
	}
	conflicts := auditActions(t, admin, "run.key_conflict")
	if len(conflicts) != 1 || conflicts[0].ActorAID != aID || conflicts[0].Object != "run/"+ra.ID || strings.Contains(string(conflicts[0].Payload), "1234") {
		t.Fatalf("audit of A's conflict = %+v", conflicts)
	}

	// A burst of conflicts: the budget's conflicts answer 409, then 429
	// with its own code, for any keyed create of A, audited once.
	for i := 1; i < api.KeyConflictBurst; i++ {
		if _, _, err := create(a, "1234"); !errors.As(err, &p) || p.Code != "run.key_conflict" {
			t.Fatalf("conflict %d of the burst: %v; want 409 run.key_conflict", i+1, err)
		}
	}
	limited := false
	for i := 0; i < 100 && !limited; i++ {
		_, _, err := create(a, "1234")
		if !errors.As(err, &p) {
			t.Fatalf("conflict after the burst: %v", err)
		}
		limited = p.Status == http.StatusTooManyRequests && p.Code == "run.key_conflict_rate_limited"
	}
	if !limited {
		t.Fatal("100 conflicts after the burst were never refused with 429 run.key_conflict_rate_limited")
	}
	if _, _, err := create(a, "4711"); !errors.As(err, &p) || p.Code != "run.key_conflict_rate_limited" {
		t.Fatalf("keyed create while limited: %v; want 429 run.key_conflict_rate_limited", err)
	}
	resp := postRun(t, k, aToken, `{"scenario": "steps: []", "key": "nightly"}`)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("limited create: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ev := auditActions(t, admin, "run.key_conflict_rate_limited"); len(ev) != 1 || ev[0].ActorAID != aID {
		t.Fatalf("audit of the limit = %+v; want one event by A", ev)
	}
	// B is not limited by A's conflicts.
	if _, created, err := create(b, "4711"); err != nil || created {
		t.Fatalf("B's own key again: created=%v %v", created, err)
	}
}

// postRun sends POST /v1/runs with body and token.
func postRun(t *testing.T, k *proc, token, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, k.Addr+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestEventStreamEndsWhenTokenStops streams a long run's events with a
// token, revokes the token (and expires another) mid-stream: each
// stream ends with stream.denied while the run goes on. Before the stream
// checked its token again, a revoked token kept receiving the run's
// events until the run ended.
func TestEventStreamEndsWhenTokenStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web-1.local.test", srv)
	ctx := context.Background()
	release := filepath.Join(t.TempDir(), "release")
	// Whatever happens, let the remote command end before sshd stops.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o600) })
	scenario := `steps:
  - name: wait
    on: web-1.local.test
    module: core.command.ran
    params: {cmd: "while [ ! -e ` + release + ` ]; do sleep 0.1; done"}
`
	run, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: scenario})
	if err != nil {
		t.Fatal(err)
	}
	// stream follows the run's events with cl until the stream ends; the
	// first event received closes started.
	stream := func(cl *client.Client) (started chan struct{}, ended chan error) {
		started, ended = make(chan struct{}), make(chan error, 1)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		go func() {
			defer cancel()
			once := false
			ended <- cl.RunEvents(sctx, run.ID, 0, func(client.RunEvent) error {
				if !once {
					once = true
					close(started)
				}
				return nil
			})
		}()
		return started, ended
	}
	// live waits until a stream delivered its first event.
	live := func(started chan struct{}, ended chan error) {
		t.Helper()
		select {
		case <-started:
		case err := <-ended:
			t.Fatalf("the stream ended before its first event: %v", err)
		}
	}
	denied := func(what string, ended chan error) {
		t.Helper()
		err := <-ended
		var p *client.Problem
		if !errors.As(err, &p) || p.Code != "auth.invalid_token" || p.Status != http.StatusUnauthorized {
			t.Fatalf("stream after the token %s ended with %v; want the problem auth.invalid_token", what, err)
		}
		if r, err := admin.RunGet(ctx, run.ID); err != nil || client.Terminal(r.Phase) {
			t.Fatalf("the run is %+v, %v; the stream must have ended because of the token, with the run still going", r, err)
		}
	}

	// A revoked token's stream ends.
	viewer, viewerID, _ := tokenClient(t, k, admin, "watcher", "viewer")
	started, ended := stream(viewer)
	live(started, ended)
	if err := admin.TokenRevoke(ctx, viewerID); err != nil {
		t.Fatal(err)
	}
	denied("was revoked", ended)

	// A token that expires mid-stream: its expiry is moved into the past
	// behind this keeper's back, as another keeper sharing the database
	// would; the stream sees it once the token cache (auth.CacheTTL) lapses.
	brief, briefID, _ := tokenClient(t, k, admin, "brief", "viewer")
	started, ended = stream(brief)
	live(started, ended)
	st, err := sqlite.Open(ctx, filepath.Join(dir, ".keeper", "keeper.db"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.DB().ExecContext(ctx, `UPDATE api_tokens SET expires_at = ? WHERE id = ?`, time.Now().Add(-time.Minute).UTC(), briefID)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	denied("expired", ended)

	// A live token's stream runs to the end of the run.
	started, ended = stream(admin)
	live(started, ended)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("a live token's stream: %v", err)
	}
	if final := waitRun(t, admin, run.ID); final.Phase != "Succeeded" {
		t.Fatalf("run = %+v", final)
	}
}

// TestTokenBootstrapAfterLastAdminExpired lets the only admin token
// expire on a running keeper and mints a new one from the host with
// `keeper token bootstrap`, on both backends. Before, an expired last
// admin token locked every operator out for good (short of editing the
// database by hand), and nothing warned before it happened.
func TestTokenBootstrapAfterLastAdminExpired(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dataDir := filepath.Join(dir, "data")
			args := []string{"--data-dir", dataDir}
			expire := func(t *testing.T, id string) {
				t.Helper()
				st, err := sqlite.Open(context.Background(), filepath.Join(dataDir, "keeper.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if _, err := st.DB().Exec(`UPDATE api_tokens SET expires_at = ? WHERE id = ?`, time.Now().Add(-time.Minute).UTC(), id); err != nil {
					t.Fatal(err)
				}
			}
			if backend == "postgres" {
				url := testdb.FreshPostgres(t)
				args = append(args, "--database-url", url)
				expire = func(t *testing.T, id string) {
					t.Helper()
					st, err := postgres.Open(context.Background(), url)
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					if _, err := st.DB().Exec(`UPDATE api_tokens SET expires_at = $1 WHERE id = $2`, time.Now().Add(-time.Minute).UTC(), id); err != nil {
						t.Fatal(err)
					}
				}
			}
			bootstrapAdmin(t, dir, dataDir, args, expire)
		})
	}
}

// bootstrapAdmin runs the last-admin story on a keeper started in dir with
// args; expire makes a token expire in its database.
func bootstrapAdmin(t *testing.T, dir, dataDir string, args []string, expire func(t *testing.T, id string)) {
	ctx := context.Background()
	k := serve(t, dir, args...)
	first := adminClient(t, k, dataDir)
	tokens, err := first.TokenList(ctx, client.ListOptions{})
	if err != nil || len(tokens.Items) != 1 {
		t.Fatalf("tokens = %+v, %v", tokens, err)
	}
	firstID := tokens.Items[0].ID
	bootstrap := func(extra ...string) (string, error) {
		out, err := exec.Command(keeperBin, append(append([]string{"token", "bootstrap"}, args...), extra...)...).CombinedOutput()
		return string(out), err
	}
	readToken := func() string {
		raw, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(raw))
	}

	firstToken := readToken()

	// Pointed at a directory without a keeper database, bootstrap makes
	// none; on a registry without any token it refuses.
	empty := t.TempDir()
	if out, err := exec.Command(keeperBin, "token", "bootstrap", "--data-dir", empty).CombinedOutput(); err == nil || !strings.Contains(string(out), "no keeper database") {
		t.Fatalf("bootstrap without a database: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("bootstrap without a database left %v behind", entries)
	}
	if out, err := exec.Command(keeperBin, "migrate", "--data-dir", empty).CombinedOutput(); err != nil {
		t.Fatalf("keeper migrate: %v\n%s", err, out)
	}
	// (A migrated registry no keeper served has no data key either, so the
	// audit key that bootstrap's audit event needs is what is missing.)
	if out, err := exec.Command(keeperBin, "token", "bootstrap", "--data-dir", empty).CombinedOutput(); err == nil || !strings.Contains(string(out), "no API token at all") && !strings.Contains(string(out), "no audit key") {
		t.Fatalf("bootstrap on a registry without tokens: %v\n%s", err, out)
	}

	// The last active admin token cannot be revoked.
	var p *client.Problem
	if err := first.TokenRevoke(ctx, firstID); !errors.As(err, &p) || p.Status != http.StatusConflict || p.Code != "token.last_admin" {
		t.Fatalf("revoke the last admin token: %v; want 409 token.last_admin", err)
	}
	// With a live admin token, bootstrap refuses and writes nothing.
	if out, err := bootstrap(); err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, firstID) {
		t.Fatalf("bootstrap with a live admin token: %v\n%s", err, out)
	}
	if readToken() != firstToken {
		t.Fatal("a refused bootstrap rewrote admin.token")
	}

	// An admin token that expires soon is the last one once the first is
	// revoked; a restarted keeper warns about it.
	soon := time.Now().Add(time.Hour)
	second, err := first.TokenCreate(ctx, client.TokenCreate{Name: "brief-admin", Role: "admin", ExpiresAt: &soon})
	if err != nil {
		t.Fatal(err)
	}
	// Revoking the first would revoke the token it minted too, the only
	// other admin: refused. It expires instead (set in the database, as
	// time would); the token it minted lives on, to its own expiry.
	if err := first.TokenRevoke(ctx, firstID); !errors.As(err, &p) || p.Code != "token.last_admin" || !strings.Contains(p.Detail, "minted") {
		t.Fatalf("revoke the first admin token, which minted the only other: %v; want 409 token.last_admin", err)
	}
	expire(t, firstID)
	k.Interrupt(t)
	k = serve(t, dir, args...)
	secondClient, _ := client.New(k.Addr, second.Token)
	if _, err := secondClient.TokenList(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("the second admin token before it expired: %v", err)
	}
	waitLog(t, k, "the last active admin API token expires soon", second.ID)

	// It expires (set in the database, as time would): the operator is
	// locked out, and bootstrap mints a new admin token.
	expire(t, second.ID)
	if _, err := secondClient.TokenList(ctx, client.ListOptions{}); !errors.As(err, &p) || p.Status != http.StatusUnauthorized {
		// The keeper may trust its cached lookup for auth.CacheTTL more.
		waitRefused(t, secondClient)
	}
	out, err := bootstrap()
	if err != nil {
		t.Fatalf("bootstrap after the last admin expired: %v\n%s", err, out)
	}
	path := filepath.Join(dataDir, "admin.token")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token after bootstrap: %v %v", fi, err)
	}
	minted := readToken()
	if !strings.Contains(out, path) || !strings.Contains(out, "tok_") || strings.Contains(out, minted) {
		t.Fatalf("bootstrap output must name the path and the id, never the token:\n%s", out)
	}
	recovered, _ := client.New(k.Addr, minted)
	if _, err := recovered.TokenCreate(ctx, client.TokenCreate{Name: "ops", Role: "operator"}); err != nil {
		t.Fatalf("the minted admin token against the running keeper: %v", err)
	}
	var created []client.AuditEvent
	for _, e := range auditActions(t, recovered, "token.created") {
		if e.ActorAID == "host" {
			created = append(created, e)
		}
	}
	if len(created) != 1 || !strings.Contains(out, strings.TrimPrefix(created[0].Object, "token/")) {
		t.Fatalf("audit token.created by host = %+v (output %s)", created, out)
	}
	// The host's audit event joins the keyed chain: the log still verifies.
	if l, err := recovered.AuditList(ctx, client.AuditListOptions{Verify: true}); err != nil || l.Verify == nil || !l.Verify.OK {
		t.Fatalf("audit verify after bootstrap: %+v %v", l, err)
	}

	// Now an admin token is live again: refused; --force mints anyway.
	if out, err := bootstrap(); err == nil || !strings.Contains(out, "refused") {
		t.Fatalf("second bootstrap: %v\n%s", err, out)
	}
	if out, err := bootstrap("--force"); err != nil || readToken() == minted {
		t.Fatalf("forced bootstrap: %v\n%s", err, out)
	}
	if logs := k.Interrupt(t); strings.Contains(logs, minted) {
		t.Fatal("the keeper log shows the minted token")
	}
}

// waitLog waits until the keeper logged a line holding every part.
func waitLog(t *testing.T, k *proc, parts ...string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-k.Logs():
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return
			}
		case <-deadline:
			t.Fatalf("the keeper never logged %q", parts)
		}
	}
}

// waitRefused waits until the keeper refuses cl's token.
func waitRefused(t *testing.T, cl *client.Client) {
	t.Helper()
	for range 600 {
		_, err := cl.TokenList(context.Background(), client.ListOptions{})
		var p *client.Problem
		if errors.As(err, &p) && p.Status == http.StatusUnauthorized {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the keeper kept accepting an expired token")
}
