package keeper_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/soulstack/soulstack/client"
)

// oidcKeeper is a real keeper whose keeper.yml signs people in with a real
// OIDC provider on loopback (mockoidc: discovery, JWKS, authorization and
// token endpoints, PKCE).
type oidcKeeper struct {
	idp   *mockoidc.MockOIDC
	k     *proc
	admin *client.Client
	url   string
	// config writes keeper.yml with more of the oidc section; args start
	// the keeper in dir (restart).
	config func(more string) string
	dir    string
	args   []string
}

// restart stops the keeper and starts it again on the same data, address
// and provider, with more as the rest of its oidc section.
func (ok *oidcKeeper) restart(t *testing.T, more string) {
	t.Helper()
	ok.k.Terminate(t)
	ok.config(more)
	ok.k = serve(t, ok.dir, ok.args...)
}

func newOIDCKeeper(t *testing.T) *oidcKeeper {
	t.Helper()
	return newOIDCKeeperWith(t, "")
}

// newOIDCKeeperOn is newOIDCKeeperWith on a backend: sqlite, or postgres
// (a fresh database).
func newOIDCKeeperOn(t *testing.T, backend, more string) *oidcKeeper {
	t.Helper()
	return newOIDCKeeperWith(t, more, databaseArgs(t, backend)...)
}

// newOIDCKeeperWith is newOIDCKeeper with more of the oidc section
// (indented two spaces).
func newOIDCKeeperWith(t *testing.T, more string, args ...string) *oidcKeeper {
	t.Helper()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "oidc.secret")
	if err := os.WriteFile(secretFile, []byte(idp.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := func(more string) string {
		return keeperConfig(t, dir, fmt.Sprintf(`oidc:
  issuer: %s
  client_id: %s
  client_secret_ref: file:%s
  redirect_url: http://%s/v1/auth/oidc/callback
  roles: {sre: operator, platform: admin}
%s`, idp.Issuer(), idp.ClientID, secretFile, addr, more))
	}
	args = append([]string{"--config", config(more), "--listen", addr}, args...)
	k := serve(t, dir, args...)
	return &oidcKeeper{idp: idp, k: k, admin: adminClient(t, k, filepath.Join(dir, ".keeper")), url: "http://" + addr, config: config, dir: dir, args: args}
}

// idpBrowser is a browser's part of a sign-in: it follows the redirects
// from the keeper to the provider and back, keeps cookies, remembers where
// it was sent, and stops where the keeper sends it to the web UI.
type idpBrowser struct {
	c       *http.Client
	visited []*url.URL // the redirects it was sent, in order
	holdAt  string     // a path it is sent to but does not go to ("": none)
}

// sentTo is the last redirect the browser followed to path, or nil.
func (b *idpBrowser) sentTo(path string) *url.URL {
	for i := len(b.visited) - 1; i >= 0; i-- {
		if b.visited[i].Path == path {
			return b.visited[i]
		}
	}
	return nil
}

func newIDPBrowser(t *testing.T) *idpBrowser {
	jar, _ := cookiejar.New(nil)
	b := &idpBrowser{}
	b.c = &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		b.visited = append(b.visited, req.URL)
		if strings.HasPrefix(req.URL.Path, "/ui/") || req.URL.Path == b.holdAt {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

// get returns the status, the Location header and the body of GET u.
func (b *idpBrowser) get(t *testing.T, u string) (int, string, string) {
	t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
}

func problemCode(body string) string {
	var p struct{ Code string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Code
}

// TestOIDCSignIn: a person whose group maps to a role signs in through the
// provider (authorization code with PKCE and a nonce); the keeper mints a
// token for them that names the person (issuer, subject, name) and expires
// with the sign-in, starts a web UI session whose key reaches the page in
// the URL fragment, and audits token.created with actor oidc. The same
// callback cannot be used twice, neither without the sign-in's cookie nor
// with it; a person whose groups map to nothing is refused and gets no
// token; return_to cannot leave the web UI.
func TestOIDCSignIn(t *testing.T) {
	t.Parallel()
	ok := newOIDCKeeper(t)
	ctx := context.Background()
	before, err := ok.admin.TokenList(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-ada", Email: "ada@example.com", PreferredUsername: "ada", Groups: []string{"sre", "dev"}})
	b := newIDPBrowser(t)
	status, loc, body := b.get(t, ok.url+"/v1/auth/oidc/login?return_to=/ui/")
	if status != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/#csrf=") {
		t.Fatalf("sign-in: %d %q %s", status, loc, body)
	}
	callback := b.sentTo("/v1/auth/oidc/callback")
	if callback == nil || callback.Query().Get("code") == "" {
		t.Fatalf("the provider did not send the browser back with a code: %v", b.visited)
	}
	key := strings.TrimPrefix(loc, "/ui/#csrf=")
	req, _ := http.NewRequest(http.MethodGet, ok.url+"/v1/whoami", nil)
	req.Header.Set("X-CSRF-Token", key)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var who client.Session
	_ = json.NewDecoder(resp.Body).Decode(&who)
	resp.Body.Close()
	if resp.StatusCode != 200 || who.Via != "cookie" || who.Role != "operator" || who.Name != "oidc-ada" || who.Person == nil ||
		who.Person.Issuer != ok.idp.Issuer() || who.Person.Subject != "u-ada" || who.Person.Name != "ada@example.com" {
		t.Fatalf("whoami after the sign-in: %d %+v %+v", resp.StatusCode, who, who.Person)
	}
	toks, err := ok.admin.TokenList(ctx, client.ListOptions{})
	if err != nil || len(toks.Items) != len(before.Items)+1 {
		t.Fatalf("tokens after one sign-in: %+v, %v", toks, err)
	}
	var minted *client.Token
	for i := range toks.Items {
		if toks.Items[i].ID == who.ID {
			minted = &toks.Items[i]
		}
	}
	if minted == nil || minted.ExpiresAt == nil || minted.CreatedBy != "oidc" {
		t.Fatalf("the person's token: %+v", minted)
	}
	events, err := ok.admin.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var audited bool
	for _, e := range events.Items {
		if e.Action == "token.created" && e.ActorAID == "oidc" && strings.Contains(string(e.Payload), `"subject":"u-ada"`) && strings.Contains(string(e.Payload), ok.idp.Issuer()) {
			audited = true
		}
	}
	if !audited {
		t.Fatalf("no token.created by oidc naming the person in the audit log: %+v", events.Items)
	}
	// What the person does is theirs in the audit log: signing out (the
	// session's own token revoked) names them as the actor's person.
	req, _ = http.NewRequest(http.MethodPost, ok.url+"/v1/auth/logout", nil)
	req.Header.Set("X-CSRF-Token", key)
	req.Header.Set("Origin", ok.url)
	if resp, err = b.c.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign out: %v %v", resp, err)
	}
	resp.Body.Close()
	events, err = ok.admin.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var theirs bool
	for _, e := range events.Items {
		if e.Action == "token.revoked" && e.ActorAID == who.ID && e.ActorPerson != nil && e.ActorPerson.Subject == "u-ada" && e.ActorPerson.Issuer == ok.idp.Issuer() {
			theirs = true
		}
	}
	if !theirs {
		t.Fatalf("the person's sign-out is not theirs in the audit log: %+v", events.Items)
	}
	if logs := ok.k.Drain(); strings.Contains(logs, ok.idp.ClientSecret) {
		t.Fatal("the client secret is in the keeper's log")
	}

	// The callback again: the sign-in cookie is spent; and with a copy of
	// it, the provider's code is.
	status, _, body = b.get(t, callback.String())
	if status != http.StatusUnauthorized || problemCode(body) != "auth.oidc_state" {
		t.Fatalf("the callback replayed: %d %s", status, body)
	}

	// A sign-in whose cookie an attacker copied: the code is spent too.
	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre"}})
	b2 := newIDPBrowser(t)
	b2.holdAt = "/v1/auth/oidc/callback"
	b2.get(t, ok.url+"/v1/auth/oidc/login")
	held := b2.sentTo(b2.holdAt)
	kurl, _ := url.Parse(ok.url)
	cookies := b2.c.Jar.Cookies(&url.URL{Scheme: "http", Host: kurl.Host, Path: "/v1/auth/oidc/"})
	for i := range 2 {
		thief := newIDPBrowser(t)
		thief.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: kurl.Host, Path: "/v1/auth/oidc/"}, cookies)
		status, _, body = thief.get(t, held.String())
		if i == 0 && status != http.StatusSeeOther {
			t.Fatalf("the held callback: %d %s", status, body)
		}
		if i == 1 && (status != http.StatusUnauthorized || problemCode(body) != "auth.oidc_code") {
			t.Fatalf("the same callback with a copy of its cookie: %d %s, want 401 auth.oidc_code", status, body)
		}
	}

	// Groups that map to no role: refused, no token.
	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-eve", Email: "eve@example.com", Groups: []string{"marketing"}})
	n := len(toks.Items) + 1 // bob's
	status, _, body = newIDPBrowser(t).get(t, ok.url+"/v1/auth/oidc/login")
	if status != http.StatusForbidden || problemCode(body) != "auth.oidc_no_role" || !strings.Contains(body, "marketing") {
		t.Fatalf("a person without a role: %d %s", status, body)
	}
	if toks, err := ok.admin.TokenList(ctx, client.ListOptions{}); err != nil || len(toks.Items) != n {
		t.Fatalf("tokens after a refused sign-in: %d (want %d), %v", len(toks.Items), n, err)
	}

	// return_to may not leave the web UI.
	for _, to := range []string{"https://evil.example/", "//evil.example/ui/", "/v1/tokens"} {
		status, _, body = newIDPBrowser(t).get(t, ok.url+"/v1/auth/oidc/login?return_to="+url.QueryEscape(to))
		if status != http.StatusBadRequest || problemCode(body) != "auth.oidc_return_invalid" {
			t.Fatalf("return_to %s: %d %s", to, status, body)
		}
	}
	if m, err := (&http.Client{}).Get(ok.url + "/v1/auth/methods"); err != nil || m.StatusCode != 200 {
		t.Fatalf("auth methods: %v %v", m, err)
	} else {
		var am client.AuthMethods
		_ = json.NewDecoder(m.Body).Decode(&am)
		m.Body.Close()
		if !am.OIDC {
			t.Fatal("auth methods does not offer OIDC")
		}
	}

}

// TestUIOIDCSignIn: in real Chromium, the web UI's sign-in page offers the
// identity provider; one click goes through the provider and back, and the
// page is signed in as the person (their token's name and role), the
// session's key taken out of the address into the tab's storage; the page
// reports no script error or policy violation.
func TestUIOIDCSignIn(t *testing.T) {
	t.Parallel()
	ok := newOIDCKeeper(t)
	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-ada", Email: "ada@example.com", PreferredUsername: "ada", Groups: []string{"platform"}})
	b := newBrowser(t, ok.url, t.TempDir())
	b.open("", "#sign-in-oidc")
	b.run(chromedp.Click(chromedp.CSS("#sign-in-oidc")))
	// The click leaves the page for the provider and comes back to a new
	// one: wait for it to show who signed in.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.getElementById('who-name') && document.getElementById('who-name').textContent !== '' && location.pathname === '/ui/'`))
		cancel()
		if err == nil && done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not come back signed in: %v\n%s", err, b.mainHTML())
		}
		time.Sleep(200 * time.Millisecond) // a navigation in between: look again
	}
	who := eval[string](b, `document.getElementById('who-name').textContent`)
	if !strings.Contains(who, "ada@example.com (oidc-ada)") || !strings.Contains(who, "admin") {
		t.Fatalf("signed in as %q, want ada@example.com (oidc-ada), admin\n%s", who, b.html())
	}
	if href := eval[string](b, `location.href`); strings.Contains(href, "csrf") || !strings.HasSuffix(href, "#/runs") {
		t.Fatalf("the address after the sign-in: %s", href)
	}
	// The tokens page names the person the token was minted for.
	b.open("#/tokens", "#tokens [data-key]")
	if html := b.mainHTML(); !strings.Contains(html, "ada@example.com") || !strings.Contains(html, "minted by keeper") {
		t.Fatalf("the tokens page does not name the person (and the admin token's minter):\n%s", html)
	}
	if r := b.pageFetch("GET", "/v1/whoami", "", true); r.Status != 200 {
		t.Fatalf("whoami from the page: %+v", r)
	}
	if r := b.pageFetch("POST", "/v1/tokens", `{"name": "x", "role": "viewer"}`, false); r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
		t.Fatalf("a cookie request without the key: %+v", r)
	}
	b.signOut()
	if len(b.problems) > 0 {
		t.Fatalf("the pages reported %d problem(s):\n%s", len(b.problems), strings.Join(b.problems, "\n"))
	}
}

// TestSoulctlLogin: soulctl login, a real subprocess, prints the URL to
// open; a browser following it signs in at the provider and is sent to
// soulctl's loopback listener with a one-time code, which soulctl
// exchanges with its PKCE verifier for the person's token and keeps
// (0600) for that keeper; soulctl whoami then runs as the person. The same
// code cannot be exchanged again, nor with another verifier, and a
// cli_redirect that is not a loopback listener is refused.
func TestSoulctlLogin(t *testing.T) {
	t.Parallel()
	ok := newOIDCKeeper(t)
	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-cli", Email: "cli@example.com", PreferredUsername: "cli", Groups: []string{"sre"}})
	home := t.TempDir()
	env := append(os.Environ(), "XDG_CONFIG_HOME="+home, "SOULSTACK_KEEPER="+ok.url, "SOULSTACK_TOKEN=")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	login := exec.CommandContext(ctx, soulctlBinary(t), "login", "--no-browser", "-o", "json")
	login.Env = env
	stderr, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	login.Stdout = &stdout
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var loginURL string
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, ok.url+"/v1/auth/oidc/login?") {
			loginURL = l
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	if loginURL == "" {
		t.Fatal("soulctl login printed no URL to open")
	}
	// The browser: keeper, provider, keeper, then soulctl's listener.
	br := newIDPBrowser(t)
	if status, _, page := br.get(t, loginURL); status != 200 || !strings.Contains(page, "Signed in") {
		t.Fatalf("the browser at the end of the sign-in: %d %s", status, page)
	}
	toSoulctl := br.sentTo("/callback")
	if err := login.Wait(); err != nil {
		t.Fatalf("soulctl login: %v\n%s", err, stdout.String())
	}
	var got client.TokenCreated
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil || got.Name != "oidc-cli" || got.Role != "operator" || got.Token != "" || got.ExpiresAt == nil {
		t.Fatalf("soulctl login printed %s (%v); want the token's name and role, never the token", stdout.String(), err)
	}
	credFile := filepath.Join(home, "soulstack", "credentials.json")
	if fi, err := os.Stat(credFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the kept credentials: %v %v", fi, err)
	}

	who := exec.CommandContext(ctx, soulctlBinary(t), "whoami", "-o", "json")
	who.Env = env
	out, err := who.CombinedOutput()
	var s client.Session
	if err != nil || json.Unmarshal(out, &s) != nil || s.Name != "oidc-cli" || s.Person == nil || s.Person.Subject != "u-cli" {
		t.Fatalf("soulctl whoami after the login: %v\n%s", err, out)
	}

	// soulctl logout revokes the kept token at the keeper and forgets it.
	raw, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	var kept struct {
		Keepers map[string]struct{ Token string } `json:"keepers"`
	}
	if err := json.Unmarshal(raw, &kept); err != nil || kept.Keepers[ok.url].Token == "" {
		t.Fatalf("the credentials file: %s (%v)", raw, err)
	}
	logout := exec.CommandContext(ctx, soulctlBinary(t), "logout")
	logout.Env = env
	if out, err := logout.CombinedOutput(); err != nil || !strings.Contains(string(out), "revoked") {
		t.Fatalf("soulctl logout: %v\n%s", err, out)
	}
	if raw, _ := os.ReadFile(credFile); strings.Contains(string(raw), kept.Keepers[ok.url].Token) {
		t.Fatalf("the token is still kept after logout: %s", raw)
	}
	old, _ := client.New(ok.url, kept.Keepers[ok.url].Token)
	if _, err := old.Whoami(ctx); err == nil {
		t.Fatal("the logged-out token still authenticates")
	}
	wantProblem(t, ok.admin.Logout(ctx), http.StatusConflict, "token.last_admin") // the last admin token cannot log out

	// The code again, and a code with another verifier: refused.
	anon, err := client.New(ok.url, "")
	if err != nil {
		t.Fatal(err)
	}
	code := toSoulctl.Query().Get("code")
	verifier := strings.Repeat("v", 43)
	_, err = anon.OIDCCodeExchange(ctx, client.OIDCCodeExchange{Code: code, Verifier: verifier})
	wantProblem(t, err, http.StatusUnauthorized, "auth.oidc_code") // the code exchanged twice
	ok.idp.QueueUser(&mockoidc.MockUser{Subject: "u-cli", Email: "cli@example.com", Groups: []string{"sre"}})
	challenge := "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM" // S256 of another verifier
	second := newIDPBrowser(t)
	second.holdAt = "/callback" // nothing listens there: the browser is not sent on
	second.get(t, ok.url+"/v1/auth/oidc/login?"+url.Values{"cli_redirect": {"http://127.0.0.1:9/callback"}, "cli_challenge": {challenge}, "cli_state": {"s"}}.Encode())
	back := second.sentTo("/callback")
	if back == nil || back.Query().Get("code") == "" || back.Query().Get("state") != "s" {
		t.Fatalf("no code for the second login: %v", back)
	}
	_, err = anon.OIDCCodeExchange(ctx, client.OIDCCodeExchange{Code: back.Query().Get("code"), Verifier: verifier})
	wantProblem(t, err, http.StatusUnauthorized, "auth.oidc_code") // a code with another verifier
	for _, to := range []string{"http://evil.example:80/callback", "https://127.0.0.1:8/callback", "http://127.0.0.1/callback"} {
		status, _, body := newIDPBrowser(t).get(t, ok.url+"/v1/auth/oidc/login?"+url.Values{"cli_redirect": {to}, "cli_challenge": {challenge}}.Encode())
		if status != http.StatusBadRequest || problemCode(body) != "auth.oidc_return_invalid" {
			t.Fatalf("cli_redirect %s: %d %s", to, status, body)
		}
	}
}

// TestOIDCProjectRoles: people sign in to projects. keeper.yml's
// oidc.projects gives group devs operator in project a; a binding made
// through the API gives group ops admin in project b, and another one a
// single person viewer in b. A dev gets a token of project a (no
// keeper-wide role); asking for project b, where none of their groups
// has a role, is refused; an ops person asking for b gets admin there;
// the person bound by name gets viewer in b; a platform person (keeper-
// wide admin) gets a keeper-wide token, or one of b when they ask. Only
// who may mint tokens in b may bind there, never above their own role.
func TestOIDCProjectRoles(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			oidcProjectRoles(t, newOIDCKeeperOn(t, backend, "  projects: {a: {devs: operator}}\n"))
		})
	}
}

func oidcProjectRoles(t *testing.T, ok *oidcKeeper) {
	ctx := context.Background()
	for _, p := range []string{"a", "b"} {
		if _, err := ok.admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ok.admin.BindingPut(ctx, "b", client.BindingPut{Kind: "group", Subject: "ops", Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ok.admin.BindingPut(ctx, "b", client.BindingPut{Kind: "person", Subject: ok.idp.Issuer() + " u-eve", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	// signInKeep signs user in to project in a browser of its own and
	// returns what whoami says, and a func that asks whoami again in that
	// browser session (its status).
	signInKeep := func(user *mockoidc.MockUser, project string) (client.Session, int, string, func() int) {
		t.Helper()
		ok.idp.QueueUser(user)
		b := newIDPBrowser(t)
		u := ok.url + "/v1/auth/oidc/login"
		if project != "" {
			u += "?project=" + project
		}
		status, loc, body := b.get(t, u)
		if status != http.StatusSeeOther {
			return client.Session{}, status, problemCode(body), nil
		}
		whoami := func() (client.Session, int) {
			req, _ := http.NewRequest(http.MethodGet, ok.url+"/v1/whoami", nil)
			req.Header.Set("X-CSRF-Token", strings.TrimPrefix(loc, "/ui/#csrf="))
			resp, err := b.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var who client.Session
			_ = json.NewDecoder(resp.Body).Decode(&who)
			return who, resp.StatusCode
		}
		who, status := whoami()
		return who, status, "", func() int { _, status := whoami(); return status }
	}
	signIn := func(user *mockoidc.MockUser, project string) (client.Session, int, string) {
		t.Helper()
		who, status, code, _ := signInKeep(user, project)
		return who, status, code
	}
	dev := &mockoidc.MockUser{Subject: "u-dev", Email: "dev@example.com", Groups: []string{"devs"}}
	who, _, code, devInA := signInKeep(dev, "")
	if who.Project != "a" || who.Role != "operator" {
		t.Fatalf("a dev signs in: %+v %s", who, code)
	}
	if _, status, code := signIn(dev, "b"); status != http.StatusForbidden || code != "auth.oidc_no_role" {
		t.Fatalf("a dev asks for project b: %d %s", status, code)
	}
	ops := &mockoidc.MockUser{Subject: "u-ops", Email: "ops@example.com", Groups: []string{"ops", "devs"}}
	who, _, code, opsInB := signInKeep(ops, "b")
	if who.Project != "b" || who.Role != "admin" {
		t.Fatalf("an ops person asks for b: %+v %s", who, code)
	}
	who, _, code, eveInB := signInKeep(&mockoidc.MockUser{Subject: "u-eve", Email: "eve@example.com", Groups: []string{"nobody"}}, "")
	if who.Project != "b" || who.Role != "viewer" {
		t.Fatalf("the person bound by name: %+v %s", who, code)
	}
	if who, _, code := signIn(&mockoidc.MockUser{Subject: "u-pat", Email: "pat@example.com", Groups: []string{"platform"}}, ""); who.Project != "" || who.Role != "admin" {
		t.Fatalf("a platform person: %+v %s", who, code)
	}
	pat, _, code, patInB := signInKeep(&mockoidc.MockUser{Subject: "u-pat", Email: "pat@example.com", Groups: []string{"platform"}}, "b")
	if pat.Project != "b" || pat.Role != "admin" {
		t.Fatalf("a platform person asks for b: %+v %s", pat, code)
	}
	if _, status, code := signIn(&mockoidc.MockUser{Subject: "u-x", Groups: []string{"devs"}}, "nosuch"); status != http.StatusForbidden || code != "auth.oidc_no_role" {
		t.Fatalf("an unknown project: %d %s", status, code)
	}

	// Binding is minting tokens: an operator of b may not; b's admin may,
	// in b alone, up to admin; the bindings are audited in b.
	mint := func(project, role string) *client.Client {
		tok, err := ok.admin.TokenCreate(ctx, client.TokenCreate{Name: project + "-" + role, Role: role, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(ok.k.Addr, tok.Token)
		return c
	}
	_, err := mint("b", "operator").BindingPut(ctx, "b", client.BindingPut{Kind: "group", Subject: "x", Role: "viewer"})
	wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
	adminB := mint("b", "admin")
	_, err = adminB.BindingPut(ctx, "a", client.BindingPut{Kind: "group", Subject: "x", Role: "viewer"})
	wantProblem(t, err, http.StatusNotFound, "project.not_found")
	if _, err := adminB.BindingPut(ctx, "b", client.BindingPut{Kind: "group", Subject: "devs", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	_, err = adminB.BindingPut(ctx, "b", client.BindingPut{Kind: "person", Subject: "no-space", Role: "viewer"})
	wantProblem(t, err, http.StatusUnprocessableEntity, "binding.subject_invalid")
	who, _, code, devInB := signInKeep(dev, "b")
	if who.Project != "b" || who.Role != "viewer" {
		t.Fatalf("a dev asks for b after the binding: %+v %s", who, code)
	}
	l, err := adminB.BindingList(ctx, "b")
	if err != nil || len(l.Items) != 3 {
		t.Fatalf("b's bindings: %+v, %v", l, err)
	}
	if err := adminB.BindingDelete(ctx, "b", "group", "devs"); err != nil {
		t.Fatal(err)
	}
	if _, status, code := signIn(dev, "b"); status != http.StatusForbidden || code != "auth.oidc_no_role" {
		t.Fatalf("a dev asks for b after the unbinding: %d %s", status, code)
	}

	// A person's token expires with their access: the dev's session in b,
	// whose role the removed binding gave, ends at once; the sessions
	// whose roles still hold (the ops admin's, whose devs group was
	// unbound too; the person bound by name; the keeper-wide admin; the
	// dev's in a, from keeper.yml) go on.
	if got := devInB(); got != http.StatusUnauthorized {
		t.Fatalf("the dev's session in b after the unbinding: %d, want 401", got)
	}
	for name, still := range map[string]func() int{"ops in b": opsInB, "eve in b": eveInB, "pat in b": patInB, "dev in a": devInA} {
		if got := still(); got != http.StatusOK {
			t.Fatalf("%s after b's devs binding is removed: %d, want 200", name, got)
		}
	}
	// A token the ops admin mints with their session (its person: none)
	// ends with their access too: revoked with the person's token.
	ok.idp.QueueUser(ops)
	mb := newIDPBrowser(t)
	status, loc, body := mb.get(t, ok.url+"/v1/auth/oidc/login?project=b")
	if status != http.StatusSeeOther {
		t.Fatalf("ops signs in to b: %d %s", status, body)
	}
	req, _ := http.NewRequest(http.MethodPost, ok.url+"/v1/tokens", strings.NewReader(`{"name":"ops-helper","role":"operator"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", strings.TrimPrefix(loc, "/ui/#csrf="))
	req.Header.Set("Origin", ok.url) // the keeper's own page
	resp, err := mb.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var helper client.TokenCreated
	_ = json.Unmarshal(raw, &helper)
	if resp.StatusCode != http.StatusCreated || helper.Token == "" || helper.Project != "b" {
		t.Fatalf("ops mints a token with their session: %d %s", resp.StatusCode, raw)
	}
	helperC, _ := client.New(ok.k.Addr, helper.Token)
	if _, err := helperC.Whoami(ctx); err != nil {
		t.Fatalf("the minted token before ops loses admin: %v", err)
	}

	// A role lowered ends the sessions above it; signing in again gives
	// the new one.
	if _, err := adminB.BindingPut(ctx, "b", client.BindingPut{Kind: "group", Subject: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	_, err = helperC.Whoami(ctx)
	wantProblem(t, err, http.StatusUnauthorized, "auth.invalid_token")
	if got := opsInB(); got != http.StatusUnauthorized {
		t.Fatalf("the ops admin's session after ops is lowered to operator: %d, want 401", got)
	}
	if got := eveInB(); got != http.StatusOK {
		t.Fatalf("eve's session after ops is lowered: %d, want 200", got)
	}
	if who, _, code := signIn(ops, "b"); who.Role != "operator" {
		t.Fatalf("the ops person signs in again: %+v %s", who, code)
	}

	evs, err := adminB.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	var put, deleted, revoked int
	for _, e := range evs.Items {
		switch e.Action {
		case "binding.put":
			put++
		case "binding.deleted":
			deleted++
		case "token.revoked":
			revoked++
		}
	}
	// Revoked: the dev's token, and ops's two sign-ins' (the one that
	// minted ops-helper, which went with it in the same event).
	if put != 4 || deleted != 1 || revoked != 3 {
		t.Fatalf("b's audit: %d binding.put, %d binding.deleted, %d token.revoked; want 4, 1 and 3", put, deleted, revoked)
	}

	// keeper.yml changed: a, mapped from the devs group there, is no
	// longer; the keeper's next start ends the dev's session in a. The
	// keeper-wide admin's role still holds.
	ok.restart(t, "")
	if got := devInA(); got != http.StatusUnauthorized {
		t.Fatalf("the dev's session in a after keeper.yml dropped a's mapping: %d, want 401", got)
	}
	if got := patInB(); got != http.StatusOK {
		t.Fatalf("the keeper-wide admin's session after the restart: %d, want 200", got)
	}
}
