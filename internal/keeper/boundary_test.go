package keeper_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// attacker is an HTTP listener standing for an endpoint a project admin
// controls: it records every Authorization header it is sent and answers
// 401 at once.
type attacker struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newAttacker(t *testing.T) *attacker {
	a := &attacker{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"no"}}`))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// received reports whether any request carried s.
func (a *attacker) received(s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range a.seen {
		if strings.Contains(h, s) {
			return true
		}
	}
	return false
}

func (a *attacker) requests() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// TestProjectAdminIsNotKeeperAdmin: a real keeper with the real
// soul-cloud-hcloud plugin; a project's admin tries to make the keeper
// send its own secrets (the admin token, the data key) to an endpoint it
// controls, or the secrets of another project, and every attempt fails:
//   - a file: or env: reference, or a vault: one outside the project's
//     prefix, is refused when a project's token writes it (403,
//     credential.local);
//   - an endpoint keeper.yml does not allow the driver is refused when
//     written (422 provider.endpoint_not_allowed) and where the keeper
//     uses the provider;
//   - a keeper admin's file: reference into the keeper's data dir, or
//     through a symlink into it from an allowed directory, or outside the
//     allowed directories, resolves nowhere (provider.credentials_out_of_reach)
//     and nothing reaches the endpoint;
//   - a shared provider shows its sharee no credentials_ref or config;
//   - a project's credential:NAME resolves in its own project alone: the
//     endpoint gets a's secret for a's provider, and b's provider naming
//     the same credential gets nothing.
func TestProjectAdminIsNotKeeperAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	evil := newAttacker(t)
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	// The endpoint is allowed (a keeper admin's choice, say a private
	// Hetzner-compatible API) so that what it receives is what matters.
	cfg := "credentials:\n  files: [" + creds + "]\n  env: [HCLOUD_*]\n" +
		"drivers:\n  hcloud:\n    endpoints: [" + evil.srv.URL + "]\n" +
		"vault:\n  address: http://127.0.0.1:1\n  token_ref: env:SOULSTACK_TEST_NO_VAULT\n  project_prefix: secret/data/soulstack/{project}/\n"
	s := spawn(t, keepertest.Options{Dir: dir, YAML: cfg, Plugins: []string{"cmd/soul-cloud-hcloud"}})
	k, admin, data := s.Proc, s.Admin, s.Data
	adminToken, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	dataKey, err := os.ReadFile(filepath.Join(data, "data.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "a-admin", Role: "admin", Project: "a"})
	if err != nil {
		t.Fatal(err)
	}
	adminA, _ := client.New(k.Addr, tok.Token)
	tok, err = admin.TokenCreate(ctx, client.TokenCreate{Name: "b-admin", Role: "admin", Project: "b"})
	if err != nil {
		t.Fatal(err)
	}
	adminB, _ := client.New(k.Addr, tok.Token)
	hc := func(name, ref string, cfg map[string]any) client.ProviderCreate {
		if cfg == nil {
			cfg = map[string]any{"endpoint": evil.srv.URL, "retry_base": "1ms", "max_retries": 0}
		}
		return client.ProviderCreate{Name: name, Driver: "hcloud", Region: "fsn1", CredentialsRef: ref, Config: cfg}
	}

	t.Run("a project's token writes no reference to the keeper's machine", func(t *testing.T) {
		for _, ref := range []string{"file:" + filepath.Join(data, "admin.token"), "file:" + filepath.Join(data, "data.key"),
			"env:HCLOUD_TOKEN", "vault:secret/data/keeper#token", "vault:secret/data/soulstack/b/cloud#token"} {
			_, err := adminA.ProviderCreate(ctx, hc("x", ref, nil))
			wantProblem(t, err, http.StatusForbidden, "auth.forbidden", "credential.local")
		}
		_, err := adminA.SoulCreate(ctx, client.SoulCreate{SID: "evil.a.test", Address: "127.0.0.1",
			Connection: client.Connection{Transport: "ssh", KeyRef: "file:" + filepath.Join(data, "ssh", "id_ed25519")}})
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden", "credential.local")
		// Under its own Vault prefix, or from its own registry, it may.
		if _, err := adminA.ProviderCreate(ctx, hc("own-vault", "vault:secret/data/soulstack/a/cloud#token", nil)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an endpoint keeper.yml does not allow", func(t *testing.T) {
		_, err := adminA.ProviderCreate(ctx, hc("y", "credential:hc", map[string]any{"endpoint": "http://127.0.0.1:9/v1"}))
		wantProblem(t, err, http.StatusUnprocessableEntity, "provider.endpoint_not_allowed")
		// A prefix of an allowed endpoint's port is another endpoint.
		_, err = adminA.ProviderCreate(ctx, hc("y", "credential:hc", map[string]any{"endpoint": evil.srv.URL + "9"}))
		wantProblem(t, err, http.StatusUnprocessableEntity, "provider.endpoint_not_allowed")
	})

	t.Run("the keeper's own secrets resolve for nobody", func(t *testing.T) {
		link := filepath.Join(creds, "innocent")
		if err := os.Symlink(filepath.Join(data, "admin.token"), link); err != nil {
			t.Fatal(err)
		}
		outside := filepath.Join(dir, "outside.token")
		if err := os.WriteFile(outside, []byte("CANARY-outside\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for name, ref := range map[string]string{
			"token": "file:" + filepath.Join(data, "admin.token"), "datakey": "file:" + filepath.Join(data, "data.key"),
			"link": "file:" + link, "outside": "file:" + outside, "env": "env:SOULSTACK_TEST_NOT_ALLOWED",
		} {
			// A keeper admin may write them (into project a): the keeper
			// still resolves none of them for a's provider.
			if _, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "k-" + name, Driver: "hcloud", Region: "fsn1", CredentialsRef: ref, Project: "a",
				Config: map[string]any{"endpoint": evil.srv.URL, "retry_base": "1ms", "max_retries": 0}}); err != nil {
				t.Fatal(err)
			}
			_, err := adminA.CloudDriftOf(ctx, "k-"+name)
			wantProblem(t, err, http.StatusUnprocessableEntity, "provider.credentials_out_of_reach")
		}
		if evil.requests() != 0 {
			t.Fatalf("the endpoint was called %d times with references out of reach", evil.requests())
		}
	})

	t.Run("a project's credentials are its own", func(t *testing.T) {
		const secretA = "CANARY-hcloud-token-of-a-5e1f"
		c, err := adminA.CredentialPut(ctx, "a", "hc", secretA)
		if err != nil || c.Ref != "credential:hc" || c.Project != "a" {
			t.Fatalf("put: %+v, %v", c, err)
		}
		_, err = adminA.CredentialPut(ctx, "b", "hc", "x")
		wantProblem(t, err, http.StatusNotFound, "project.not_found")
		list, err := adminA.CredentialList(ctx, "a")
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "hc" {
			t.Fatalf("list: %+v, %v", list, err)
		}
		if _, err := adminA.ProviderCreate(ctx, hc("hetzner-a", "credential:hc", nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := adminB.ProviderCreate(ctx, hc("hetzner-b", "credential:hc", nil)); err != nil {
			t.Fatal(err)
		}
		_, err = adminB.CloudDriftOf(ctx, "hetzner-b")
		wantProblem(t, err, http.StatusBadGateway, "provider.credentials_unavailable", "project b has no credential")
		if evil.received(secretA) {
			t.Fatal("b's provider sent a's credential")
		}
		_, _ = adminA.CloudDriftOf(ctx, "hetzner-a") // the endpoint answers 401
		if !evil.received("Bearer " + secretA) {
			t.Fatalf("a's provider did not use a's credential: %v", evil.seen)
		}
		for _, s := range []string{strings.TrimSpace(string(adminToken)), strings.TrimSpace(string(dataKey))} {
			if evil.received(s) {
				t.Fatal("the endpoint received one of the keeper's own secrets")
			}
		}
	})

	t.Run("a shared provider shares its use, not its reference", func(t *testing.T) {
		if _, err := admin.ProviderShare(ctx, "hetzner-a", "b"); err != nil {
			t.Fatal(err)
		}
		p, err := adminB.ProviderGet(ctx, "hetzner-a")
		if err != nil || p.CredentialsRef != "" || p.Config != nil {
			t.Fatalf("the sharee sees %+v, %v", p, err)
		}
		p, err = adminA.ProviderGet(ctx, "hetzner-a")
		if err != nil || p.CredentialsRef != "credential:hc" {
			t.Fatalf("the owner sees %+v, %v", p, err)
		}
	})
}

// TestProjectHostsAreTheirOwn: a real keeper and real sshd hosts. Each
// project has its own keeper SSH key, and a host of one project's soul
// runs no command of another project's:
//   - a host trusting project b's key refuses project a's runs (a's souls
//     are reached with a's key), and a host trusting only the default
//     project's key refuses them too;
//   - a soul of project a at the address and port of b's soul is refused
//     at registration (409 soul.host_taken);
//   - a soul of a registered under another name of the same host
//     (localhost) is refused at first contact, when the host key it
//     presents is b's soul's: soul.host_taken, and nothing runs.
func TestProjectHostsAreTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	for _, p := range []string{"a", "b"} {
		if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	keyOf := func(p string) string {
		k, err := admin.ProjectSSHKey(ctx, p)
		if err != nil || !strings.HasPrefix(k.PublicKey, "ssh-ed25519 ") {
			t.Fatalf("ssh key of %s: %+v, %v", p, k, err)
		}
		return k.PublicKey
	}
	keyA, keyB, keyDefault := keyOf("a"), keyOf("b"), keyOf("default")
	if keyA == keyB || keyA == keyDefault || keyB == keyDefault {
		t.Fatal("two projects share a keeper SSH key")
	}
	if again := keyOf("a"); again != keyA {
		t.Fatal("a project's key changed between two reads")
	}
	// Host b trusts project b's key (as b's VMs do) and the keeper's
	// default key; host d the default key alone.
	hostB := sshtest.Start(t, sshtest.Options{})
	hostD := sshtest.Start(t, sshtest.Options{})
	authorize := func(h *sshtest.Server, keys ...string) {
		f, err := os.OpenFile(filepath.Join(h.Dir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, key := range keys {
			if _, err := f.WriteString(key + "\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	authorize(hostB, keyB, keyDefault)
	authorize(hostD, keyDefault)

	tokenIn := func(project, role string) *client.Client {
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: project + "-" + role, Role: role, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(k.Addr, tok.Token)
		return c
	}
	adminA, adminB := tokenIn("a", "admin"), tokenIn("b", "admin")
	marker := filepath.Join(t.TempDir(), "ran")
	run := func(c *client.Client, sid string) *client.Run {
		t.Helper()
		sc := "steps:\n  - name: x\n    on: " + sid + "\n    module: core.command.ran\n    params: {cmd: \"id -un >> " + marker + "\"}\n"
		r, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		return waitRun(t, c, r.ID)
	}
	targetError := func(r *client.Run) string {
		if len(r.Steps) == 0 || len(r.Steps[0].Targets) == 0 || r.Steps[0].Targets[0].Error == nil {
			return ""
		}
		return r.Steps[0].Targets[0].Error.Code
	}

	// b's soul, reached with b's key: the host pins its key to b's soul.
	if _, err := adminB.SoulCreate(ctx, client.SoulCreate{SID: "web.b.test", Address: hostB.Addr,
		Connection: client.Connection{Transport: "ssh", User: hostB.User, Port: hostB.Port}}); err != nil {
		t.Fatal(err)
	}
	if r := run(adminB, "web.b.test"); r.Phase != client.PhaseSucceeded {
		t.Fatalf("b's run on its own host: %s %s", r.Phase, describeSteps(r.Steps))
	}
	os.Remove(marker)

	t.Run("registration", func(t *testing.T) {
		_, err := adminA.SoulCreate(ctx, client.SoulCreate{SID: "evil1.a.test", Address: hostB.Addr,
			Connection: client.Connection{Transport: "ssh", User: hostB.User, Port: hostB.Port}})
		wantProblem(t, err, http.StatusConflict, "soul.host_taken")
		// A keeper admin cannot put it in a either.
		_, err = admin.SoulCreate(ctx, client.SoulCreate{SID: "evil1.a.test", Address: hostB.Addr, Project: "a",
			Connection: client.Connection{Transport: "ssh", User: hostB.User, Port: hostB.Port}})
		wantProblem(t, err, http.StatusConflict, "soul.host_taken")
	})

	t.Run("a's key opens neither b's host nor the default key's", func(t *testing.T) {
		if _, err := adminA.SoulCreate(ctx, client.SoulCreate{SID: "d.a.test", Address: hostD.Addr,
			Connection: client.Connection{Transport: "ssh", User: hostD.User, Port: hostD.Port}}); err != nil {
			t.Fatal(err)
		}
		r := run(adminA, "d.a.test")
		if r.Phase != client.PhaseFailed || targetError(r) != "ssh.auth_failed" {
			t.Fatalf("a's run on a host trusting the default key: %s %s", r.Phase, describeSteps(r.Steps))
		}
	})

	t.Run("first contact", func(t *testing.T) {
		// The same host under another name, with a key that opens it (a's
		// admin holds it in a's registry): it reaches the host, whose
		// host key is b's soul's, and runs nothing.
		if _, err := adminA.CredentialPut(ctx, "a", "stolen", string(hostB.ClientKey)); err != nil {
			t.Fatal(err)
		}
		if _, err := adminA.SoulCreate(ctx, client.SoulCreate{SID: "evil2.a.test", Address: "localhost",
			Connection: client.Connection{Transport: "ssh", User: hostB.User, Port: hostB.Port, KeyRef: "credential:stolen"}}); err != nil {
			t.Fatal(err)
		}
		r := run(adminA, "evil2.a.test")
		if r.Phase != client.PhaseFailed || targetError(r) != "soul.host_taken" {
			t.Fatalf("a's run on b's host under another name: %s %s", r.Phase, describeSteps(r.Steps))
		}
		so, err := adminA.SoulGet(ctx, "evil2.a.test")
		if err != nil || so.Connection.HostKey != "" {
			t.Fatalf("the host key was pinned to a's soul: %+v, %v", so, err)
		}
	})
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("a command of project a ran on another project's host: %q", b)
	}
}

// TestMintedTokensFollowTheirMinter: against a real keeper, a token lives
// no longer than the token that minted it and is revoked with it, however
// far down the chain; a revocation that would end the last keeper-wide
// admin token through its chain is refused.
func TestMintedTokensFollowTheirMinter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	k := serve(t, dir)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	lead, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "lead", Role: "admin", Project: "p", ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	leadC, _ := client.New(k.Addr, lead.Token)
	later := expires.Add(24 * time.Hour)
	for _, asked := range []*time.Time{nil, &later} {
		child, err := leadC.TokenCreate(ctx, client.TokenCreate{Name: "child", Role: "operator", ExpiresAt: asked})
		if err != nil || child.ExpiresAt == nil || !child.ExpiresAt.Equal(expires) {
			t.Fatalf("a token minted by one expiring at %s: %+v, %v", expires, child, err)
		}
	}
	sooner := expires.Add(-time.Minute)
	if child, err := leadC.TokenCreate(ctx, client.TokenCreate{Name: "short", Role: "viewer", ExpiresAt: &sooner}); err != nil || !child.ExpiresAt.Equal(sooner) {
		t.Fatalf("a shorter life is kept: %+v, %v", child, err)
	}
	child, err := leadC.TokenCreate(ctx, client.TokenCreate{Name: "child2", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	childC, _ := client.New(k.Addr, child.Token)
	grand, err := childC.TokenCreate(ctx, client.TokenCreate{Name: "grandchild", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	grandC, _ := client.New(k.Addr, grand.Token)
	if _, err := grandC.Whoami(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.TokenRevoke(ctx, lead.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{leadC, childC, grandC} {
		_, err := c.Whoami(ctx)
		wantProblem(t, err, http.StatusUnauthorized, "auth.invalid_token")
	}

	// The keeper's admin mints a second keeper-wide admin; revoking the
	// first would end both: refused.
	second, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "second-admin", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	who, err := admin.Whoami(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, admin.TokenRevoke(ctx, who.ID), http.StatusConflict, "token.last_admin")
	secondC, _ := client.New(k.Addr, second.Token)
	if _, err := secondC.Whoami(ctx); err != nil {
		t.Fatalf("the refused revocation ended the minted admin: %v", err)
	}
}

// TestRunKeysReserved: against a real keeper, a client's run key may not
// take a namespace of the keeper's own runs (drift checks, seed runs,
// remediations): a check run keyed drift:<another project's soul>:… is
// refused before anything starts, through REST and MCP's client alike.
func TestRunKeysReserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	k := serve(t, dir)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	sc := "steps:\n  - name: x\n    on: keeper\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"
	for _, key := range []string{"drift:web.b.test:1:1", "seed:web.b.test:1", "remediate:run_x", "DRIFT:web.b.test:1:1"} {
		_, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc, Key: key, Mode: client.RunCheck})
		wantProblem(t, err, http.StatusUnprocessableEntity, "run.key_reserved")
	}
	runs, err := admin.RunList(ctx, client.RunListOptions{})
	if err != nil || len(runs.Items) != 0 {
		t.Fatalf("a refused run was stored: %+v, %v", runs, err)
	}
}

// TestApprovalPoliciesHoldEveryWay: against a real keeper and a real sshd,
// what an approval policy holds cannot be done another way:
//   - a check run of core.script.ran with check: true runs the script's
//     code, so a policy holding the module holds that check run too (and
//     the code does not run); a policy that reads context.mode holds a
//     check run's step; one that does not read it leaves checks alone;
//   - with the real hcloud plugin against its fake API, a policy holding
//     core.cloud.destroyed refuses deleting a cloud-made soul (which would
//     leave its VM an orphan) and destroying orphans, with 409
//     approval.required, and no VM is deleted.
func TestApprovalPoliciesHoldEveryWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("check runs", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := "approvals:\n  expires_in: 30s\n  policy: |\n" +
			"    @id(\"scripts\")\n    forbid (principal, action == Action::\"core.script.ran\", resource);\n" +
			"    @id(\"file-checks\")\n    forbid (principal, action == Action::\"core.file.present\", resource) when { context.mode == \"check\" };\n" +
			"    @id(\"commands\")\n    forbid (principal, action == Action::\"core.command.ran\", resource);\n"
		k := serve(t, dir, "--config", keeperConfig(t, dir, cfg))
		admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
		srv := sshtest.Start(t, sshtest.Options{})
		addSoul(t, admin, "web.test", srv)
		marker := filepath.Join(t.TempDir(), "script-ran")
		heldOrNot := func(sc string, wantHeld bool) {
			t.Helper()
			r, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc, Mode: client.RunCheck})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				got, err := admin.RunGet(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Phase == client.PhaseAwaitingApproval {
					if !wantHeld {
						t.Fatalf("a check run was held: %s", sc)
					}
					if _, err := admin.RunCancel(ctx, r.ID); err != nil {
						t.Fatal(err)
					}
					return
				}
				if client.Terminal(got.Phase) {
					if wantHeld {
						t.Fatalf("a check run the policy holds ended %s unheld: %s", got.Phase, describeSteps(got.Steps))
					}
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("the check run neither ended nor was held: %s", sc)
		}
		heldOrNot("steps:\n  - name: s\n    on: web.test\n    module: core.script.ran\n    params:\n      check: true\n      source: |\n        touch "+marker+"\n        echo '{\"changed\": false}'\n", true)
		heldOrNot("steps:\n  - name: f\n    on: web.test\n    module: core.file.present\n    params: {path: "+filepath.Join(t.TempDir(), "f")+", content: x}\n", true)
		// A policy that does not read context.mode is about applies: a
		// check of a command runs nothing, and is not held.
		heldOrNot("steps:\n  - name: c\n    on: web.test\n    module: core.command.ran\n    params: {cmd: \"touch "+marker+"\"}\n", false)
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the held check's script, or a checked command, ran")
		}
	})
	t.Run("destroying outside a run", func(t *testing.T) {
		t.Parallel()
		// The policy from keeper.yml's policy_file: the API's checks see
		// it as the runs' gate does.
		policyFile := filepath.Join(t.TempDir(), "destroys.cedar")
		if err := os.WriteFile(policyFile, []byte("@id(\"destroys\")\nforbid (principal, action == Action::\"core.cloud.destroyed\", resource);\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, c, fake := hcloudKeeper(t, "CANARY-hold-destroy-token-3c9a", "approvals:\n  policy_file: "+policyFile+"\n")
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "hcloud.yaml"), File: "hcloud.yaml",
			Input: map[string]any{"count": 1, "greet": false, "networks": []any{"soulstack-net"}}})
		if err != nil {
			t.Fatal(err)
		}
		if done := waitRun(t, c, run.ID); done.Phase != client.PhaseSucceeded {
			t.Fatalf("create: %s %s", done.Phase, describeSteps(done.Steps))
		}
		souls, err := c.SoulList(ctx, client.ListOptions{})
		if err != nil || len(souls.Items) != 1 || souls.Items[0].VMID == "" {
			t.Fatalf("souls: %+v, %v", souls, err)
		}
		so := souls.Items[0]
		wantProblem(t, c.SoulDelete(ctx, so.SID), http.StatusConflict, "approval.required", "destroys")
		if _, err := c.SoulGet(ctx, so.SID); err != nil {
			t.Fatalf("the refused delete removed the soul: %v", err)
		}
		_, err = c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "hetzner", VMIDs: []string{so.VMID}})
		wantProblem(t, err, http.StatusConflict, "approval.required")
		if fake.Deletes() != 0 || len(fake.Servers()) != 1 {
			t.Fatalf("a VM was deleted: %d deletes, %d servers", fake.Deletes(), len(fake.Servers()))
		}
	})
}

// TestDiffsNeverCarrySecrets: against a real keeper and sshd, a run writes
// a file from a secret input; a later check of the same file with other
// content shows no diff of what the file holds (its change says which run
// wrote it from a secret), and the secret is nowhere: not in the run as
// the API answers it, its events, any file of the data dir (database,
// WAL), or a backup of it. A step with diff: false shows no diff either; once a run writes
// the file from content that is no secret, checks diff it again.
func TestDiffsNeverCarrySecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const canary = "CANARY-db-password-7f31c2"
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	admin := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "db.test", srv)
	conf := filepath.Join(t.TempDir(), "app.conf")
	write := `inputs:
  pw: {type: string, secret: true}
steps:
  - name: conf
    on: db.test
    module: core.file.present
    params:
      path: ` + conf + `
      content: "db_password=${ input.pw }\n"
`
	r, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: write, Input: map[string]any{"pw": canary}})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitRun(t, admin, r.ID); done.Phase != client.PhaseSucceeded {
		t.Fatalf("write: %s %s", done.Phase, describeSteps(done.Steps))
	}
	check := func(content string, extra string) *client.Run {
		t.Helper()
		sc := "steps:\n  - name: conf\n    on: db.test\n    module: core.file.present\n    params:\n      path: " + conf + "\n      content: \"" + content + "\"\n" + extra
		r, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc, Mode: client.RunCheck})
		if err != nil {
			t.Fatal(err)
		}
		return waitRun(t, admin, r.ID)
	}
	change := func(run *client.Run) client.Change {
		t.Helper()
		if len(run.Steps) != 1 || len(run.Steps[0].Targets) != 1 || len(run.Steps[0].Targets[0].Changes) == 0 {
			t.Fatalf("check: %s %s", run.Phase, describeSteps(run.Steps))
		}
		return run.Steps[0].Targets[0].Changes[0]
	}
	done := check("db_password=changed\\n", "")
	c := change(done)
	if c.Diff != "" || !strings.Contains(c.Note, r.ID) || !strings.Contains(c.Note, "from a secret") {
		t.Fatalf("the check of a file a run wrote from a secret: %+v", c)
	}
	var events []string
	if err := admin.RunEvents(ctx, done.ID, 0, func(e client.RunEvent) error { events = append(events, string(e.Data)); return nil }); err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(done); strings.Contains(string(raw), canary) || strings.Contains(strings.Join(events, "\n"), canary) {
		t.Fatal("the check run shows the secret another run wrote")
	}
	grepDir(t, data, canary)
	// Nor in a backup of it (read through its gzip).
	archive := filepath.Join(t.TempDir(), "keeper.backup")
	if out, ok := keeperCmd(t, "backup", archive, "--data-dir", data); !ok {
		t.Fatalf("backup: %s", out)
	}
	if f, err := os.Open(archive); err != nil {
		t.Fatal(err)
	} else {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(all), canary) {
			t.Fatal("the backup holds the secret in clear")
		}
	}

	// diff: false, on a file no secret wrote.
	plain := filepath.Join(t.TempDir(), "plain.conf")
	if err := os.WriteFile(plain, []byte("token=undeclared-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := "steps:\n  - name: conf\n    on: db.test\n    module: core.file.present\n    params: {path: " + plain + ", content: \"x\", diff: false}\n"
	dr, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: sc, Mode: client.RunCheck})
	if err != nil {
		t.Fatal(err)
	}
	if c := change(waitRun(t, admin, dr.ID)); c.Diff != "" || !strings.Contains(c.Note, "diff: false") {
		t.Fatalf("diff: false: %+v", c)
	}

	// Written from plain content, the file is diffed again.
	pr, _, err := admin.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: conf\n    on: db.test\n    module: core.file.present\n    params: {path: " + conf + ", content: \"plain=1\\n\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if d := waitRun(t, admin, pr.ID); d.Phase != client.PhaseSucceeded {
		t.Fatalf("plain write: %s", describeSteps(d.Steps))
	}
	if c := change(check("plain=2\\n", "")); !strings.Contains(c.Diff, "-plain=1") || !strings.Contains(c.Diff, "+plain=2") {
		t.Fatalf("the check of a file written from plain content: %+v", c)
	}
}
