package api_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/testlog"
)

// startLimited is start with a failed-authentication budget of burst per
// interval and a clock the test moves.
func startLimited(t *testing.T, b testdb.Backend, burst int, interval time.Duration) *keeper {
	t.Helper()
	st := b.Open(t)
	logs := &testlog.Buffer{}
	clk := &clock{Clock: clockwork.NewRealClock()}
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(api.New(withStore(st, api.Config{Base: base.Base{Log: slog.New(secretHandler(logs)), Clock: clk}, Version: "test",
		AuthFailureBurst: burst, AuthFailureInterval: interval})))
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

func (k *keeper) auditActions(action string) int {
	k.t.Helper()
	var n int
	if err := k.store.DB().QueryRow(`SELECT COUNT(*) FROM audit_events WHERE action = '` + action + `'`).Scan(&n); err != nil {
		k.t.Fatal(err)
	}
	return n
}

// TestAuthFailuresRateLimited: guessing tokens from one address is cut
// off with 429 auth.rate_limited after the burst, without the guesses
// being checked; each burst is audited once; a token the keeper verified
// before still works during the burst; the budget refills with time.
// Before, every guess was looked up and answered 401, without end.
func TestAuthFailuresRateLimited(t *testing.T) {
	t.Parallel()
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			rateLimited(t, startLimited(t, b, 3, time.Minute))
		})
	}
}

func rateLimited(t *testing.T, k *keeper) {
	k.expect("GET", "/v1/providers", k.admin, "", 200, "")
	viewer := k.token("viewer")
	k.expect("GET", "/v1/providers", viewer, "", 200, "")
	for i := range 3 {
		k.expect("GET", "/v1/providers", "sst_guess"+strings.Repeat("x", i), "", 401, "auth.invalid_token")
	}
	for range 5 {
		k.expect("GET", "/v1/providers", "sst_guess", "", 429, "auth.rate_limited")
	}
	// Known tokens are not slowed.
	k.expect("GET", "/v1/providers", k.admin, "", 200, "")
	k.expect("GET", "/v1/providers", viewer, "", 200, "")
	// A real token the keeper never saw is refused like a guess while the
	// burst lasts: the limiter does not look tokens up.
	fresh, id, hash, _ := auth.NewToken()
	if _, err := k.store.TokenCreate(context.Background(), store.TokenCreateParams{Token: store.APIToken{ID: id, Name: "fresh", Role: "viewer", Hash: hash}, Actor: store.ActorKeeper}); err != nil {
		t.Fatal(err)
	}
	k.expect("GET", "/v1/providers", fresh, "", 429, "auth.rate_limited")
	if n := k.auditActions("auth.rate_limited"); n != 1 {
		t.Fatalf("%d auth.rate_limited audit events for one burst, want 1", n)
	}

	// One interval later one attempt is back: it is checked (401), and the
	// next guess starts a second burst.
	k.now.Set(k.now.Now().Add(time.Minute))
	k.expect("GET", "/v1/providers", "sst_again", "", 401, "auth.invalid_token")
	k.expect("GET", "/v1/providers", "sst_again", "", 429, "auth.rate_limited")
	k.expect("GET", "/v1/providers", "sst_again", "", 429, "auth.rate_limited")
	if n := k.auditActions("auth.rate_limited"); n != 2 {
		t.Fatalf("%d auth.rate_limited audit events for two bursts, want 2", n)
	}
	// A full budget later, the fresh token works.
	k.now.Set(k.now.Now().Add(3 * time.Minute))
	k.expect("GET", "/v1/providers", fresh, "", 200, "")
	if !strings.Contains(k.logs.String(), "rate-limited") {
		t.Fatalf("the burst was not logged:\n%s", k.logs.String())
	}
}

// TestMetricsNeedsPermission: /metrics answers 401 without a token, 403
// to tokens without metrics.read (viewer, operator) and 200 to admin.
// Before, it answered anyone.
func TestMetricsNeedsPermission(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	k.expect("GET", "/metrics", "", "", 401, "auth.missing_token")
	for _, role := range []string{"viewer", "operator"} {
		b := k.expect("GET", "/metrics", k.token(role), "", 403, "auth.forbidden")
		if !strings.Contains(string(b), "metrics.read") {
			t.Fatalf("403 does not name metrics.read: %s", b)
		}
	}
	if b := k.expect("GET", "/metrics", k.admin, "", 200, ""); !strings.Contains(string(b), "soulstack_http_requests_total") {
		t.Fatalf("admin /metrics: %s", b)
	}
}
