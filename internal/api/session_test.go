package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/testdb"
)

// send is one raw request with the given headers.
func send(t *testing.T, hc *http.Client, method, url string, headers map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func problemCode(b []byte) string {
	var p client.Problem
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// signIn posts token to POST /v1/session from the keeper's own origin and
// returns the session cookie and the session's key.
func signIn(t *testing.T, k *keeper, token string) (*http.Cookie, string) {
	t.Helper()
	resp, b := send(t, http.DefaultClient, "POST", k.url+"/v1/session", map[string]string{"Origin": k.url}, `{"token":"`+token+`"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, b)
	}
	var s client.Session
	if err := json.Unmarshal(b, &s); err != nil || s.Via != "cookie" || s.CSRF == "" {
		t.Fatalf("sign-in answer %s", b)
	}
	if strings.Contains(string(b), token) {
		t.Fatalf("sign-in answer returns the token: %s", b)
	}
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			return c, s.CSRF
		}
	}
	t.Fatalf("sign-in set no %s cookie: %v", api.SessionCookie, resp.Header["Set-Cookie"])
	return nil, ""
}

// TestSessionCookieBoundary performs each cross-site attack on the cookie
// session against a real listening API and checks that it changes nothing,
// while the keeper's own page and bearer clients go through.
func TestSessionCookieBoundary(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	viewer := k.token("viewer")
	cookie, csrf := signIn(t, k, k.admin)
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Secure {
		t.Fatalf("cookie over plain HTTP = %+v, want HttpOnly, SameSite=Strict, Path=/, not Secure", cookie)
	}
	sess := "soulstack_session=" + cookie.Value
	body := func(name string) string { return `{"name":"` + name + `","driver":"local"}` }
	_, otherKey := signIn(t, k, viewer)
	tests := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		body    string
		status  int
		code    string
		created string // a provider that must (status 201) or must not exist after
	}{
		{"sign-in without Origin", "POST", "/v1/session", nil, `{"token":"` + k.admin + `"}`, 403, "auth.csrf_failed", ""},
		{"sign-in from another origin", "POST", "/v1/session", map[string]string{"Origin": "http://evil.test"}, `{"token":"` + k.admin + `"}`, 403, "auth.csrf_failed", ""},
		{"sign-in with a bad token", "POST", "/v1/session", map[string]string{"Origin": k.url}, `{"token":"sst_nope"}`, 401, "auth.invalid_token", ""},
		{"cookie GET with its key", "GET", "/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf}, "", 200, "", ""},
		{"the cookie alone opens nothing", "GET", "/v1/providers", map[string]string{"Cookie": sess}, "", 401, "auth.session_invalid", ""},
		{"the cookie with another session's key", "GET", "/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": otherKey}, "", 401, "auth.session_invalid", ""},
		{"the session id is no bearer token", "GET", "/v1/providers", map[string]string{"Authorization": "Bearer " + cookie.Value}, "", 401, "auth.invalid_token", ""},
		{"the key is no bearer token", "GET", "/v1/providers", map[string]string{"Authorization": "Bearer " + csrf}, "", 401, "auth.invalid_token", ""},
		{"cookie POST without Origin", "POST", "/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf}, body("a1"), 403, "auth.csrf_failed", "a1"},
		{"cookie POST from another origin", "POST", "/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf, "Origin": "http://127.0.0.1:1"}, body("a2"), 403, "auth.csrf_failed", "a2"},
		{"cookie POST said cross-site", "POST", "/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf, "Origin": k.url, "Sec-Fetch-Site": "same-site"}, body("a3"), 403, "auth.csrf_failed", "a3"},
		{"cookie POST without its key", "POST", "/v1/providers", map[string]string{"Cookie": sess, "Origin": k.url}, body("a4"), 401, "auth.session_invalid", "a4"},
		{"cookie POST with a wrong key", "POST", "/v1/providers", map[string]string{"Cookie": sess, "Origin": k.url, "X-CSRF-Token": otherKey}, body("a5"), 401, "auth.session_invalid", "a5"},
		{"cookie DELETE without its key", "DELETE", "/v1/providers/kept", map[string]string{"Cookie": sess, "Origin": k.url}, "", 401, "auth.session_invalid", "kept"},
		{"cookie POST from the page", "POST", "/v1/providers", map[string]string{"Cookie": sess, "Origin": k.url, "X-CSRF-Token": csrf, "Sec-Fetch-Site": "same-origin"}, body("ok1"), 201, "", "ok1"},
		{"bearer POST is unaffected", "POST", "/v1/providers", map[string]string{"Authorization": "Bearer " + k.admin}, body("ok2"), 201, "", "ok2"},
		{"bearer wins over a cookie", "POST", "/v1/providers", map[string]string{"Authorization": "Bearer " + viewer, "Cookie": sess, "X-CSRF-Token": csrf}, body("a6"), 403, "auth.forbidden", "a6"},
		{"a token as the cookie opens nothing", "GET", "/v1/providers", map[string]string{"Cookie": "soulstack_session=" + k.admin, "X-CSRF-Token": csrf}, "", 401, "auth.session_invalid", ""},
	}
	if _, err := k.client(k.admin).ProviderCreate(context.Background(), client.ProviderCreate{Name: "kept", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := k.auditCount()
			resp, b := send(t, http.DefaultClient, tc.method, k.url+tc.path, tc.headers, tc.body)
			if resp.StatusCode != tc.status || problemCode(b) != tc.code {
				t.Fatalf("%s %s = %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, b, tc.status, tc.code)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: no X-Content-Type-Options: nosniff", tc.method, tc.path)
			}
			if tc.created == "" {
				return
			}
			_, err := k.client(k.admin).ProviderGet(context.Background(), tc.created)
			switch {
			case tc.status < 300 && err != nil:
				t.Fatalf("provider %s missing after success: %v", tc.created, err)
			case tc.status >= 300 && tc.created != "kept" && err == nil:
				t.Fatalf("a refused request created provider %s", tc.created)
			case tc.status >= 300 && tc.created == "kept" && err != nil:
				t.Fatalf("a refused request deleted provider kept: %v", err)
			case tc.status >= 300 && k.auditCount() != before:
				t.Fatal("a refused request wrote an audit event")
			}
		})
	}

	t.Run("whoami", func(t *testing.T) {
		_, b := send(t, http.DefaultClient, "GET", k.url+"/v1/whoami", map[string]string{"Authorization": "Bearer " + viewer}, "")
		var s client.Session
		if err := json.Unmarshal(b, &s); err != nil || s.Role != "viewer" || s.Via != "bearer" || s.CSRF != "" ||
			strings.Join(s.Permissions, ",") != "provider.read,profile.read,soul.read,run.read,audit.read" {
			t.Fatalf("whoami for a viewer bearer = %s", b)
		}
		if me, err := k.client(viewer).Whoami(context.Background()); err != nil || me.Role != "viewer" || me.Via != "bearer" || len(me.Permissions) != 5 {
			t.Fatalf("client.Whoami = %+v, %v", me, err)
		}
		_, b = send(t, http.DefaultClient, "GET", k.url+"/v1/whoami", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf}, "")
		s = client.Session{}
		if err := json.Unmarshal(b, &s); err != nil || s.Role != "admin" || s.Via != "cookie" || s.CSRF != "" {
			t.Fatalf("whoami for the cookie session = %s (the key is only in the sign-in answer)", b)
		}
	})

}

// TestSessionEnds: sign-out (with the session's key) and revoking the
// token end a session; the ended session's cookie and key open nothing.
func TestSessionEnds(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	cookie, csrf := signIn(t, k, k.admin)
	sess := "soulstack_session=" + cookie.Value
	t.Run("sign-out ends the session", func(t *testing.T) {
		resp, _ := send(t, http.DefaultClient, "DELETE", k.url+"/v1/session", map[string]string{"Cookie": sess, "Origin": k.url}, "")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("sign-out without the key = %d, want 401", resp.StatusCode)
		}
		resp, b := send(t, http.DefaultClient, "DELETE", k.url+"/v1/session", map[string]string{"Cookie": sess, "Origin": k.url, "X-CSRF-Token": csrf}, "")
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sign-out = %d %s", resp.StatusCode, b)
		}
		var cleared bool
		for _, c := range resp.Cookies() {
			cleared = cleared || c.Name == api.SessionCookie && c.Value == "" && c.MaxAge < 0
		}
		if !cleared {
			t.Fatalf("sign-out did not clear the cookie: %v", resp.Header["Set-Cookie"])
		}
		resp, b = send(t, http.DefaultClient, "GET", k.url+"/v1/providers", map[string]string{"Cookie": sess, "X-CSRF-Token": csrf}, "")
		if resp.StatusCode != http.StatusUnauthorized || problemCode(b) != "auth.session_invalid" {
			t.Fatalf("the ended session = %d %s", resp.StatusCode, b)
		}
		resp, _ = send(t, http.DefaultClient, "DELETE", k.url+"/v1/session", map[string]string{"Origin": "http://evil.test"}, "")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("sign-out from another origin = %d, want 403", resp.StatusCode)
		}
	})

	t.Run("revoking the token ends its sessions", func(t *testing.T) {
		op := k.token("operator")
		c, key := signIn(t, k, op)
		h := map[string]string{"Cookie": "soulstack_session=" + c.Value, "X-CSRF-Token": key}
		if resp, b := send(t, http.DefaultClient, "GET", k.url+"/v1/whoami", h, ""); resp.StatusCode != 200 {
			t.Fatalf("the operator's session = %d %s", resp.StatusCode, b)
		}
		me, err := k.client(op).Whoami(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := k.client(k.admin).TokenRevoke(context.Background(), me.ID); err != nil {
			t.Fatal(err)
		}
		if resp, b := send(t, http.DefaultClient, "GET", k.url+"/v1/whoami", h, ""); resp.StatusCode != 401 || problemCode(b) != "auth.session_invalid" {
			t.Fatalf("the revoked token's session = %d %s", resp.StatusCode, b)
		}
	})
}

// TestSessionCookieSecureOverTLS: over HTTPS the cookie is Secure and the
// origin the checks expect is https://.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	srv := httptest.NewTLSServer(api.New(withStore(k.store, api.Config{})))
	defer srv.Close()
	hc := srv.Client()
	resp, b := send(t, hc, "POST", srv.URL+"/v1/session", map[string]string{"Origin": strings.Replace(srv.URL, "https://", "http://", 1)}, `{"token":"`+k.admin+`"}`)
	if resp.StatusCode != http.StatusForbidden || problemCode(b) != "auth.csrf_failed" {
		t.Fatalf("sign-in from the http:// origin of an https keeper = %d %s", resp.StatusCode, b)
	}
	resp, b = send(t, hc, "POST", srv.URL+"/v1/session", map[string]string{"Origin": srv.URL}, `{"token":"`+k.admin+`"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in = %d %s", resp.StatusCode, b)
	}
	var secure bool
	for _, c := range resp.Cookies() {
		secure = secure || c.Name == api.SecureSessionCookie && c.Secure && c.HttpOnly && c.Path == "/" && c.Domain == ""
	}
	if !secure {
		t.Fatalf("cookie over TLS is not a Secure __Host- cookie: %v", resp.Header["Set-Cookie"])
	}
}

// TestUIServed: the keeper hands /ui/ to the UI handler, and /ui and /
// redirect there; other unknown paths stay problems.
func TestUIServed(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	srv := httptest.NewServer(api.New(withStore(k.store, api.Config{UI: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ui "+r.URL.Path)
	})})))
	defer srv.Close()
	resp, b := send(t, http.DefaultClient, "GET", srv.URL+"/ui/js/app.js", nil, "")
	if resp.StatusCode != 200 || string(b) != "ui /ui/js/app.js" {
		t.Fatalf("GET /ui/js/app.js = %d %q", resp.StatusCode, b)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ = send(t, noRedirect, "GET", srv.URL+"/ui", nil, "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui = %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = send(t, noRedirect, "GET", srv.URL+"/", nil, "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, b = send(t, http.DefaultClient, "GET", srv.URL+"/nothing", nil, "")
	if resp.StatusCode != http.StatusNotFound || problemCode(b) != "route.not_found" {
		t.Fatalf("GET /nothing = %d %s", resp.StatusCode, b)
	}
	resp, b = send(t, http.DefaultClient, "POST", srv.URL+"/ui/", nil, "x")
	if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /ui/ = %d %s", resp.StatusCode, b)
	}
}
