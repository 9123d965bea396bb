package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/approval"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/testlog"
)

// keeper is a real listening Operator API over a fresh database.
type keeper struct {
	t     testing.TB
	url   string
	store *sqlstore.Store
	admin string // admin token
	logs  *testlog.Buffer
	now   *clock
}

type clock struct {
	clockwork.Clock // the real clock's timers
	mu              sync.Mutex
	t               time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		return time.Now()
	}
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func start(t testing.TB, b testdb.Backend) *keeper {
	t.Helper()
	st := b.Open(t)
	logs := &testlog.Buffer{}
	clk := &clock{Clock: clockwork.NewRealClock()}
	log := slog.New(secretHandler(logs))
	srv := httptest.NewServer(api.New(withStore(st, api.Config{Base: base.Base{Log: log, Clock: clk}, Version: "test",
		VerifyAudit: func(ctx context.Context) (audit.Report, error) { return audit.Verify(ctx, st, testdb.AuditKey, nil) }})))
	t.Cleanup(srv.Close)
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TokenBootstrap(context.Background(), store.TokenCreateParams{Token: store.APIToken{ID: id, Name: "admin", Role: "admin", Hash: hash}, Actor: store.ActorKeeper}); err != nil {
		t.Fatal(err)
	}
	return &keeper{t: t, url: srv.URL, store: st, admin: plain, logs: logs, now: clk}
}

// call sends a raw request and returns the status and body.
func (k *keeper) call(method, path, token, body string) (int, []byte) {
	k.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, k.url+path, r)
	if err != nil {
		k.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		k.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// expect asserts status and, for problems, the code.
func (k *keeper) expect(method, path, token, body string, status int, code string) []byte {
	k.t.Helper()
	got, b := k.call(method, path, token, body)
	if got != status {
		k.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, b)
	}
	if code != "" {
		var p client.Problem
		if err := json.Unmarshal(b, &p); err != nil || p.Code != code || p.Status != status || p.Title == "" {
			k.t.Fatalf("%s %s: problem %s, want code %s", method, path, b, code)
		}
	}
	return b
}

func (k *keeper) client(token string) *client.Client {
	c, err := client.New(k.url, token)
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

func (k *keeper) token(role string) string {
	k.t.Helper()
	tc, err := k.client(k.admin).TokenCreate(context.Background(), client.TokenCreate{Name: role + "-x", Role: role})
	if err != nil {
		k.t.Fatal(err)
	}
	return tc.Token
}

func (k *keeper) auditCount() int {
	k.t.Helper()
	var n int
	if err := k.store.DB().QueryRow(`SELECT COUNT(*) FROM audit_events`).Scan(&n); err != nil {
		k.t.Fatal(err)
	}
	return n
}

func eachBackend(t *testing.T, fn func(t *testing.T, k *keeper)) {
	t.Helper()
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, start(t, b))
		})
	}
}

func TestRegistries(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		a := k.admin
		b := k.expect("POST", "/v1/providers", a, `{"name":"local","driver":"local","region":"here","credentials_ref":"vault:kv/cloud#token","fqdn_suffix":"local.test","config":{"subnet":"10.213.0.0/24"}}`, 201, "")
		var p client.Provider
		if err := json.Unmarshal(b, &p); err != nil || p.Name != "local" || p.CredentialsRef != "vault:kv/cloud#token" || p.CreatedAt.IsZero() || !strings.HasPrefix(p.CreatedBy, "tok_") {
			t.Fatalf("created provider = %s", b)
		}
		k.expect("POST", "/v1/providers", a, `{"name":"local","driver":"local"}`, 409, "provider.exists")
		k.expect("GET", "/v1/providers/local", a, "", 200, "")
		k.expect("GET", "/v1/providers/ghost", a, "", 404, "provider.not_found")
		k.expect("DELETE", "/v1/providers/ghost", a, "", 404, "provider.not_found")

		k.expect("POST", "/v1/profiles", a, `{"name":"small","provider":"ghost","spec":{}}`, 422, "profile.provider_missing")
		k.expect("POST", "/v1/profiles", a, `{"name":"small","provider":"local","spec":{"cpus":1,"memory_mb":512,"ssh_user":"root"}}`, 201, "")
		k.expect("POST", "/v1/profiles", a, `{"name":"small","provider":"local","spec":{}}`, 409, "profile.exists")
		b = k.expect("DELETE", "/v1/providers/local", a, "", 409, "provider.in_use")
		if !strings.Contains(string(b), "small") {
			t.Fatalf("in-use problem does not name the profile: %s", b)
		}
		k.expect("GET", "/v1/profiles/small", a, "", 200, "")
		k.expect("GET", "/v1/profiles/nope", a, "", 404, "profile.not_found")

		k.expect("POST", "/v1/souls", a, `{"sid":"db-1.example.com","address":"127.0.0.2","connection":{"transport":"ssh","user":"deploy","port":2222,"key_ref":"file:/etc/soulstack/id_ed25519"},"attributes":{"role":"db"}}`, 201, "")
		b = k.expect("GET", "/v1/souls/db-1.example.com", a, "", 200, "")
		var so client.Soul
		if err := json.Unmarshal(b, &so); err != nil || so.Connection.Port != 2222 || so.Connection.KeyRef != "file:/etc/soulstack/id_ed25519" || so.Status != "active" || so.CreatedByAID == nil {
			t.Fatalf("soul = %s", b)
		}
		b = k.expect("POST", "/v1/souls", a, `{"sid":"web-1","address":"10.0.0.5","connection":{}}`, 201, "")
		if err := json.Unmarshal(b, &so); err != nil || so.Connection.Port != 22 || so.Connection.User != "root" || so.Connection.Transport != "ssh" {
			t.Fatalf("soul defaults = %s", b)
		}
		k.expect("POST", "/v1/souls", a, `{"sid":"web-1","address":"10.0.0.5","connection":{}}`, 409, "soul.exists")
		k.expect("DELETE", "/v1/souls/web-1", a, "", 204, "")
		k.expect("GET", "/v1/souls/web-1", a, "", 404, "soul.not_found")

		k.expect("DELETE", "/v1/profiles/small", a, "", 204, "")
		k.expect("DELETE", "/v1/providers/local", a, "", 204, "")

		// Every mutation above wrote its event, with the actor's token id.
		events, err := k.client(a).AuditList(context.Background(), client.AuditListOptions{Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range events.Items {
			actions = append(actions, e.Action)
			if e.Seq > 1 && e.ActorAID != p.CreatedBy {
				t.Fatalf("event %d actor = %q, want %q", e.Seq, e.ActorAID, p.CreatedBy)
			}
		}
		want := "token.created provider.created profile.created soul.registered soul.registered soul.deleted profile.deleted provider.deleted"
		if strings.Join(actions, " ") != want {
			t.Fatalf("audit actions = %v\nwant %s", actions, want)
		}
		if events.Verify == nil || !events.Verify.OK || events.Verify.Checked != 8 {
			t.Fatalf("verify = %+v", events.Verify)
		}
	})
}

func TestAuthAndRBAC(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		k.expect("GET", "/v1/providers", "", "", 401, "auth.missing_token")
		k.expect("GET", "/v1/providers", "sst_not-a-token", "", 401, "auth.invalid_token")
		viewer, operator := k.token("viewer"), k.token("operator")
		k.expect("GET", "/v1/providers", viewer, "", 200, "")
		k.expect("GET", "/v1/audit", viewer, "", 200, "")
		k.expect("POST", "/v1/providers", viewer, `{"name":"x","driver":"local"}`, 403, "auth.forbidden")
		k.expect("POST", "/v1/providers", operator, `{"name":"x","driver":"local"}`, 403, "auth.forbidden")
		k.expect("DELETE", "/v1/providers/x", operator, "", 403, "auth.forbidden")
		k.expect("GET", "/v1/tokens", operator, "", 403, "auth.forbidden")
		k.expect("POST", "/v1/tokens", viewer, `{"name":"y","role":"admin"}`, 403, "auth.forbidden")
		k.expect("GET", "/v1/souls", operator, "", 200, "")
		if n := k.auditCount(); n != 3 { // the admin and the two tokens
			t.Fatalf("forbidden requests wrote audit events: %d", n)
		}

		// Revocation takes effect at once.
		list, err := k.client(k.admin).TokenList(context.Background(), client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var viewerID, adminID string
		for _, tk := range list.Items {
			switch tk.Role {
			case "viewer":
				viewerID = tk.ID
			case "admin":
				adminID = tk.ID
			}
		}
		k.expect("DELETE", "/v1/tokens/"+viewerID, k.admin, "", 204, "")
		k.expect("GET", "/v1/providers", viewer, "", 401, "auth.invalid_token")
		k.expect("DELETE", "/v1/tokens/"+viewerID, k.admin, "", 409, "token.revoked")
		k.expect("DELETE", "/v1/tokens/tok_nope", k.admin, "", 404, "token.not_found")
		k.expect("DELETE", "/v1/tokens/"+adminID, k.admin, "", 409, "token.last_admin")

		// An expired token stops working when its time comes.
		exp := time.Now().Add(time.Hour)
		tc, err := k.client(k.admin).TokenCreate(context.Background(), client.TokenCreate{Name: "short", Role: "viewer", ExpiresAt: &exp})
		if err != nil {
			t.Fatal(err)
		}
		k.expect("GET", "/v1/providers", tc.Token, "", 200, "")
		k.now.Set(exp.Add(auth.CacheTTL + time.Second))
		k.expect("GET", "/v1/providers", tc.Token, "", 401, "auth.invalid_token")
		k.now.Set(time.Time{})

		// Public routes need no token.
		k.expect("GET", "/healthz", "", "", 200, "")
		k.expect("GET", "/readyz", "", "", 200, "")
		k.expect("GET", "/nope", "", "", 404, "route.not_found")
	})
}

// TestBadInput: every malformed request gets a precise problem and writes
// nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	big := `{"name":"big","driver":"local","config":{"blob":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, location           string
	}{
		{"malformed JSON", "POST", "/v1/providers", `{"name":"a",`, 400, "request.malformed", "body"},
		{"not an object", "POST", "/v1/providers", `[1,2]`, 422, "request.invalid", "body"},
		{"unknown field", "POST", "/v1/providers", `{"name":"a","driver":"local","colour":"red"}`, 422, "request.invalid", "body.colour"},
		{"missing driver", "POST", "/v1/providers", `{"name":"a"}`, 422, "request.invalid", "body"},
		{"wrong type", "POST", "/v1/providers", `{"name":7,"driver":"local"}`, 422, "request.invalid", "body.name"},
		{"empty name", "POST", "/v1/providers", `{"name":"","driver":"local"}`, 422, "name.invalid", "body.name"},
		{"name too long", "POST", "/v1/providers", `{"name":"` + strings.Repeat("a", 64) + `","driver":"local"}`, 422, "name.invalid", "body.name"},
		{"name not a DNS label", "POST", "/v1/providers", `{"name":"Local_Cloud","driver":"local"}`, 422, "name.invalid", "body.name"},
		{"name with leading dash", "POST", "/v1/providers", `{"name":"-a","driver":"local"}`, 422, "name.invalid", "body.name"},
		{"bad driver", "POST", "/v1/providers", `{"name":"a","driver":"../evil"}`, 422, "name.invalid", "body.driver"},
		{"credentials_ref scheme", "POST", "/v1/providers", `{"name":"a","driver":"local","credentials_ref":"s3://bucket/key"}`, 422, "provider.credentials_ref_invalid", "body.credentials_ref"},
		{"credentials_ref plain secret", "POST", "/v1/providers", `{"name":"a","driver":"local","credentials_ref":"AKIAEXAMPLE"}`, 422, "provider.credentials_ref_invalid", "body.credentials_ref"},
		{"credentials_ref relative file", "POST", "/v1/providers", `{"name":"a","driver":"local","credentials_ref":"file:creds.json"}`, 422, "provider.credentials_ref_invalid", "body.credentials_ref"},
		{"oversized body", "POST", "/v1/providers", big, 413, "request.too_large", ""},
		{"profile bad name", "POST", "/v1/profiles", `{"name":"A","provider":"local","spec":{}}`, 422, "name.invalid", "body.name"},
		{"profile spec not object", "POST", "/v1/profiles", `{"name":"a","provider":"local","spec":"big"}`, 422, "request.invalid", "body.spec"},
		{"soul bad sid", "POST", "/v1/souls", `{"sid":"web_1..x","address":"10.0.0.1","connection":{}}`, 422, "sid.invalid", "body.sid"},
		{"soul bad key_ref", "POST", "/v1/souls", `{"sid":"web-1","address":"10.0.0.1","connection":{"key_ref":"ftp:x"}}`, 422, "soul.key_ref_invalid", "body.connection.key_ref"},
		{"soul bad port", "POST", "/v1/souls", `{"sid":"web-1","address":"10.0.0.1","connection":{"port":70000}}`, 422, "request.invalid", "body.connection.port"},
		{"soul bad transport", "POST", "/v1/souls", `{"sid":"web-1","address":"10.0.0.1","connection":{"transport":"telnet"}}`, 422, "request.invalid", "body.connection.transport"},
		{"soul host key set", "POST", "/v1/souls", `{"sid":"web-1","address":"10.0.0.1","connection":{"host_key":"ssh-ed25519 AAAA"}}`, 422, "request.invalid", "body.connection.host_key"},
		{"unknown role", "POST", "/v1/tokens", `{"name":"ci","role":"root"}`, 422, "token.role_unknown", "body.role"},
		{"token bad name", "POST", "/v1/tokens", `{"name":"","role":"viewer"}`, 422, "name.invalid", "body.name"},
		{"token expiry past", "POST", "/v1/tokens", `{"name":"ci","role":"viewer","expires_at":"2001-01-01T00:00:00Z"}`, 422, "token.expiry_past", "body.expires_at"},
		{"bad limit", "GET", "/v1/providers?limit=0", "", 422, "request.invalid", "query.limit"},
		{"bad audit cursor", "GET", "/v1/audit?after=abc", "", 422, "request.invalid", "query.after"},
	}
	eachBackend(t, func(t *testing.T, k *keeper) {
		k.expect("POST", "/v1/providers", k.admin, `{"name":"local","driver":"local"}`, 201, "")
		before := k.auditCount()
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				k := *k
				k.t = t
				b := k.expect(tc.method, tc.path, k.admin, tc.body, tc.status, tc.code)
				var p client.Problem
				_ = json.Unmarshal(b, &p)
				if p.Detail == "" {
					t.Fatalf("problem without detail: %s", b)
				}
				if tc.location != "" {
					found := false
					for _, e := range p.Errors {
						found = found || e.Location == tc.location
					}
					if !found {
						t.Fatalf("problem %s does not locate %s", b, tc.location)
					}
				}
			})
		}
		if n := k.auditCount(); n != before {
			t.Fatalf("bad requests wrote %d audit events", n-before)
		}
		// The problems above are this API's own: huma's process-wide
		// error constructor is left as huma ships it.
		if _, ok := huma.NewError(http.StatusBadRequest, "x").(*huma.ErrorModel); !ok {
			t.Fatalf("the API replaced huma.NewError for the whole process")
		}
		list, err := k.client(k.admin).ProviderList(context.Background(), client.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("bad requests changed the providers: %+v, %v", list, err)
		}
	})
}

// TestSecretsNeverLeave puts a canary under every secret-looking key and
// proves it appears in no response, no audit row and no log line, while
// references and tokens stay usable.
func TestSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		const canary = "canary-7d41b9e2"
		var keys []string
		for _, key := range []string{"api_token", "password", "client_secret", "ssh_private_key", "credentials", "Token", "DB_PASSWORD"} {
			keys = append(keys, fmt.Sprintf(`%q:%q`, key, canary))
		}
		cfg := `{` + strings.Join(keys, ",") + `,"nested":[{"secret":"` + canary + `"}],"subnet":"10.0.0.0/24"}`
		body := k.expect("POST", "/v1/providers", k.admin, `{"name":"leaky","driver":"local","credentials_ref":"env:CLOUD_CREDENTIALS","config":`+cfg+`}`, 201, "")
		k.expect("POST", "/v1/profiles", k.admin, `{"name":"p","provider":"leaky","spec":{"root_password":"`+canary+`"}}`, 201, "")
		k.expect("POST", "/v1/souls", k.admin, `{"sid":"s1","address":"10.0.0.9","connection":{},"attributes":{"vault_token":"`+canary+`"}}`, 201, "")
		var responses []string
		responses = append(responses, string(body))
		for _, path := range []string{"/v1/providers", "/v1/providers/leaky", "/v1/profiles", "/v1/profiles/p", "/v1/souls", "/v1/souls/s1", "/v1/audit?verify=true"} {
			_, b := k.call("GET", path, k.admin, "")
			responses = append(responses, string(b))
		}
		// A malformed body that carries a secret is not echoed back.
		_, b := k.call("POST", "/v1/providers", k.admin, `{"name":"x","driver":"local","config":{"password":"`+canary+`"}`)
		responses = append(responses, string(b))
		for _, r := range responses {
			if strings.Contains(r, canary) {
				t.Fatalf("a response leaks the secret: %s", r)
			}
		}
		if !strings.Contains(responses[1], "env:CLOUD_CREDENTIALS") || !strings.Contains(responses[1], `"api_token":"***"`) || !strings.Contains(responses[1], "10.0.0.0/24") {
			t.Fatalf("credentials_ref or non-secret config lost: %s", responses[1])
		}
		rows, err := k.store.DB().Query(`SELECT payload FROM audit_events`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var p string
			_ = rows.Scan(&p)
			if strings.Contains(p, canary) {
				t.Fatalf("audit row leaks the secret: %s", p)
			}
		}
		if strings.Contains(k.logs.String(), canary) {
			t.Fatalf("log leaks the secret:\n%s", k.logs.String())
		}

		// API tokens: shown once, stored only as a hash.
		tc, err := k.client(k.admin).TokenCreate(context.Background(), client.TokenCreate{Name: "ci", Role: "viewer"})
		if err != nil || !strings.HasPrefix(tc.Token, "sst_") {
			t.Fatalf("token create = %+v, %v", tc, err)
		}
		hashes := map[string]bool{}
		hrows, err := k.store.DB().Query(`SELECT hash FROM api_tokens`)
		if err != nil {
			t.Fatal(err)
		}
		for hrows.Next() {
			var h string
			_ = hrows.Scan(&h)
			hashes[h] = true
		}
		hrows.Close()
		if !hashes[auth.HashToken(tc.Token)] {
			t.Fatal("the new token's hash is not stored")
		}
		for _, q := range []string{`SELECT id || name || role || hash FROM api_tokens`, `SELECT payload FROM audit_events`} {
			rows, err := k.store.DB().Query(q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				if strings.Contains(s, tc.Token) || strings.Contains(s, k.admin) {
					t.Fatalf("a plain token is stored: %s", s)
				}
			}
			rows.Close()
		}
		for _, path := range []string{"/v1/tokens", "/v1/audit"} {
			_, b := k.call("GET", path, k.admin, "")
			if strings.Contains(string(b), tc.Token) {
				t.Fatalf("%s leaks a token: %s", path, b)
			}
		}
	})
}

func TestConcurrentCreatesOneWins(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		const n = 12
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i], _ = k.call("POST", "/v1/providers", k.admin, fmt.Sprintf(`{"name":"race","driver":"d%d"}`, i))
			}()
		}
		wg.Wait()
		created, conflicts := 0, 0
		for _, s := range statuses {
			switch s {
			case 201:
				created++
			case 409:
				conflicts++
			}
		}
		if created != 1 || conflicts != n-1 {
			t.Fatalf("statuses = %v: want one 201 and %d 409", statuses, n-1)
		}
	})
}

func TestAuditFailureFailsMutation(t *testing.T) {
	t.Parallel()
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			k := start(t, b)
			b.BreakAudit(t, k.store.DB())
			k.expect("POST", "/v1/providers", k.admin, `{"name":"local","driver":"local"}`, 500, "internal.error")
			k.expect("GET", "/v1/providers/local", k.admin, "", 404, "provider.not_found")
			if !strings.Contains(k.logs.String(), "audit") {
				t.Fatalf("the cause is not logged:\n%s", k.logs.String())
			}
		})
	}
}

func TestAuditVerifyNamesTamperedRow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		for _, n := range []string{"a", "b", "c"} {
			k.expect("POST", "/v1/providers", k.admin, `{"name":"`+n+`","driver":"local"}`, 201, "")
		}
		if _, err := k.store.DB().Exec(`UPDATE audit_events SET object = 'provider/z' WHERE seq = 3`); err != nil {
			t.Fatal(err)
		}
		list, err := k.client(k.admin).AuditList(context.Background(), client.AuditListOptions{Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		v := list.Verify
		if v == nil || v.OK || len(v.Problems) == 0 || v.Problems[0].Seq != 3 || v.Problems[0].Kind != "audit.row_tampered" {
			t.Fatalf("verify after edit = %+v", v)
		}
		if _, err := k.store.DB().Exec(`DELETE FROM audit_events WHERE seq = 2`); err != nil {
			t.Fatal(err)
		}
		list, _ = k.client(k.admin).AuditList(context.Background(), client.AuditListOptions{Verify: true})
		found := false
		for _, p := range list.Verify.Problems {
			found = found || (p.Kind == "audit.rows_missing" && strings.Contains(p.Message, "2..2"))
		}
		if !found {
			t.Fatalf("deleted row 2 not named: %+v", list.Verify)
		}
	})
}

func TestPagination(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		for _, n := range []string{"e", "a", "d", "b", "c"} {
			k.expect("POST", "/v1/providers", k.admin, `{"name":"`+n+`","driver":"local"}`, 201, "")
		}
		c := k.client(k.admin)
		var names []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			l, err := c.ProviderList(context.Background(), client.ListOptions{Limit: 2, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				names = append(names, p.Name)
			}
			if l.Next == "" {
				break
			}
			after = l.Next
		}
		if strings.Join(names, "") != "abcde" {
			t.Fatalf("pages = %v", names)
		}
		al, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 4}})
		if err != nil || len(al.Items) != 4 || al.Next != "4" {
			t.Fatalf("audit page = %d items, next %q, %v", len(al.Items), al.Next, err)
		}

		// Lists the keeper holds whole are paged the same way: the
		// catalog, and a project's bindings; the client reads every page.
		all, err := c.ModuleList(context.Background())
		if err != nil || len(all.Items) < 10 {
			t.Fatalf("modules = %d, %v", len(all.Items), err)
		}
		var ids []string
		for after := ""; ; {
			var l client.ModuleList
			_, b := k.call("GET", "/v1/modules?limit=7&after="+after, k.admin, "")
			if err := json.Unmarshal(b, &l); err != nil || len(l.Items) > 7 || len(ids) > len(all.Items) {
				t.Fatalf("a page of modules: %v %d items\n%s", err, len(l.Items), b)
			}
			for _, m := range l.Items {
				ids = append(ids, m.ID)
			}
			if l.Next == "" {
				break
			}
			after = l.Next
		}
		for i, m := range all.Items {
			if i >= len(ids) || ids[i] != m.ID {
				t.Fatalf("modules paged by 7 = %v, want %d in catalog order", ids, len(all.Items))
			}
		}
		for _, g := range []string{"ops", "dev", "audit"} {
			k.expect("PUT", "/v1/projects/default/bindings", k.admin, `{"kind":"group","subject":"`+g+`","role":"viewer"}`, 200, "")
		}
		var first client.BindingList
		_, b := k.call("GET", "/v1/projects/default/bindings?limit=2", k.admin, "")
		if err := json.Unmarshal(b, &first); err != nil || len(first.Items) != 2 || first.Items[0].Subject != "audit" || first.Next == "" {
			t.Fatalf("first page of bindings: %v\n%s", err, b)
		}
		bl, err := c.BindingList(context.Background(), "default")
		if err != nil || len(bl.Items) != 3 || bl.Items[2].Subject != "ops" {
			t.Fatalf("bindings = %+v, %v", bl, err)
		}
	})
}

func TestOpenAPIAndMetrics(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	k.expect("GET", "/v1/providers", k.admin, "", 200, "")
	_, b := k.call("GET", "/openapi.json", "", "")
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for path, methods := range map[string][]string{
		"/v1/providers": {"get", "post"}, "/v1/providers/{name}": {"get", "delete"},
		"/v1/profiles": {"get", "post"}, "/v1/profiles/{name}": {"get", "delete"},
		"/v1/souls": {"get", "post"}, "/v1/souls/{sid}": {"get", "delete"},
		"/v1/tokens": {"get", "post"}, "/v1/tokens/{id}": {"delete"},
		"/v1/audit": {"get"}, "/healthz": {"get"}, "/readyz": {"get"}, "/metrics": {"get"},
		"/v1/whoami": {"get"}, "/v1/session": {"post", "delete"}, "/v1/version": {"get"},
	} {
		for _, m := range methods {
			if _, ok := doc.Paths[path][m]; !ok {
				t.Errorf("openapi.json lacks %s %s", m, path)
			}
		}
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}
	// The run vocabulary: the event envelope and each kind's data, with
	// the kinds and statuses as enums.
	var comps struct {
		Components struct {
			Schemas map[string]struct {
				Description string `json:"description"`
				Properties  map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &comps); err != nil {
		t.Fatal(err)
	}
	schemas := comps.Components.Schemas
	if got := strings.Join(schemas["RunEvent"].Properties["kind"].Enum, ","); got != "run.phase,step.started,target.result,log,step.finished,step.interrupted,command.reattached,run.finished,stream.end,stream.denied" {
		t.Errorf("RunEvent.kind enum = %q", got)
	}
	for name, kind := range map[string]client.EventKind{
		"RunPhaseData": client.EventRunPhase, "StepStartedData": client.EventStepStarted, "TargetResultData": client.EventTargetResult,
		"LogData": client.EventLog, "StepFinishedData": client.EventStepFinished, "StepInterruptedData": client.EventStepInterrupted, "CommandReattachedData": client.EventCommandReattached,
		"RunFinishedData": client.EventRunFinished,
	} {
		if !strings.Contains(schemas[name].Description, string(kind)) {
			t.Errorf("schema %s: description %q does not name kind %s", name, schemas[name].Description, kind)
		}
	}
	if got := strings.Join(schemas["TargetResultData"].Properties["status"].Enum, ","); got != "ok,changed,would_change,unknown,failed,skipped,unreachable" {
		t.Errorf("TargetResultData.status enum = %q", got)
	}
	if got := strings.Join(schemas["StepFinishedData"].Properties["status"].Enum, ","); got != "ok,changed,would_change,unknown,failed,skipped" {
		t.Errorf("StepFinishedData.status enum = %q", got)
	}
	if _, ok := doc.Paths["/v1/providers"]["post"]["responses"].(map[string]any)["409"]; !ok {
		t.Errorf("provider-create does not document 409")
	}
	_, m := k.call("GET", "/metrics", k.admin, "")
	if !strings.Contains(string(m), `soulstack_http_requests_total{method="GET",operation="provider-list",status="200"} 1`) {
		t.Fatalf("metrics lack the request counter:\n%s", m)
	}
}

// withStore is cfg over st, with the access and approval services a
// keeper gives its API.
func withStore(st store.Store, cfg api.Config) api.Config {
	cfg.Stores = api.StoresOf(st)
	if cfg.Access == nil {
		cfg.Access = access.New(st, cfg.OIDC.AccessRoles(), cfg.Base)
	}
	if cfg.Approvals == nil {
		cfg.Approvals = approval.NewService(st, approval.Policy{}, "")
	}
	return cfg
}

// TestMethodNotAllowedAndLocation: a method a route lacks is 405
// route.method_not_allowed with Allow (an unknown path stays 404), and
// every create's 201 says in Location where the new object is — a path
// that answers.
func TestMethodNotAllowedAndLocation(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	do := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, k.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+k.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct{ method, path, allow string }{
		{"PATCH", "/v1/providers/p1", "GET, HEAD, DELETE"},
		{"PUT", "/v1/tokens", "GET, HEAD, POST"},
		{"DELETE", "/v1/audit", "GET, HEAD"},
	} {
		resp := do(c.method, c.path, "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s = %d, Allow %q; want 405, Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.allow)
		}
	}
	k.expect("PATCH", "/v1/providers/p1", k.admin, "", 405, "route.method_not_allowed")
	k.expect("PATCH", "/v1/nothing/here", k.admin, "", 404, "route.not_found")

	for _, c := range []struct{ path, body, want string }{
		{"/v1/providers", `{"name":"p1","driver":"local"}`, "/v1/providers/p1"},
		{"/v1/profiles", `{"name":"small","provider":"p1","spec":{"cpus":1}}`, "/v1/profiles/small"},
		{"/v1/souls", `{"sid":"web-1.example.com","address":"192.0.2.1","connection":{}}`, "/v1/souls/web-1.example.com"},
		{"/v1/projects", `{"name":"team-a"}`, "/v1/projects/team-a"},
		{"/v1/tokens", `{"name":"ci","role":"viewer"}`, "/v1/tokens/tok_"},
	} {
		resp := do("POST", c.path, c.body)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(loc, c.want) {
			t.Errorf("POST %s = %d, Location %q; want 201, Location %s…", c.path, resp.StatusCode, loc, c.want)
			continue
		}
		if c.path != "/v1/tokens" { // a token is revoked there, not read
			k.expect("GET", loc, k.admin, "", 200, "")
		}
	}
}
