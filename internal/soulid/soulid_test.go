package soulid

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/pki"
)

func TestRenewAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		left, want time.Duration
	}{
		"a day left":        {24 * time.Hour, 16 * time.Hour},
		"three seconds":     {3 * time.Second, 2 * time.Second},
		"almost expired":    {100 * time.Millisecond, MinRenewWait},
		"expired already":   {-time.Hour, MinRenewWait},
		"never before 2/3s": {9 * time.Second, 6 * time.Second},
	} {
		if got := RenewAt(now, now.Add(tc.left)).Sub(now); got != tc.want {
			t.Errorf("%s: renew after %s; want %s", name, got, tc.want)
		}
	}
}

func TestReadBootstrap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if b, err := ReadBootstrap(filepath.Join(dir, "none.json")); err != nil || b != (Bootstrap{}) {
		t.Fatalf("a missing file = %+v, %v; want empty", b, err)
	}
	good := filepath.Join(dir, "good.json")
	_ = os.WriteFile(good, []byte(`{"keeper": "https://k:8421", "ca_fingerprint": "sha256:00", "sid": "a.b", "token": "sbt_x"}`), 0o600)
	if b, err := ReadBootstrap(good); err != nil || b.Keeper != "https://k:8421" || b.SID != "a.b" || b.Token != "sbt_x" {
		t.Fatalf("bootstrap = %+v, %v", b, err)
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"keeper": "https://k", "tokn": "sbt_x"}`), 0o600)
	if _, err := ReadBootstrap(bad); err == nil || !strings.Contains(err.Error(), "tokn") {
		t.Fatalf("an unknown key = %v; want an error naming it", err)
	}
}

func TestHostKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "ssh_host_rsa_key.pub"), []byte("ssh-rsa AAAAB root@h\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "ssh_host_ed25519_key.pub"), []byte("ssh-ed25519 AAAAC root@h\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "ssh_host_ed25519_key"), []byte("PRIVATE"), 0o600)
	keys, err := HostKeys(dir)
	if err != nil || len(keys) != 2 || keys[0] != "ssh-ed25519 AAAAC root@h" || keys[1] != "ssh-rsa AAAAB root@h" {
		t.Fatalf("host keys = %q, %v", keys, err)
	}
	if keys, err := HostKeys(t.TempDir()); err != nil || len(keys) != 0 {
		t.Fatalf("no keys = %q, %v", keys, err)
	}
}

// serveTLS serves h with a server certificate of ca on loopback.
func serveTLS(t *testing.T, ca *pki.CA, h http.Handler) string {
	t.Helper()
	dir := t.TempDir()
	hosts, _ := pki.ListenHosts("127.0.0.1:0")
	cert, _, err := ca.EnsureServer(dir, hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().(*net.TCPAddr).String()
}

// TestJoinVerifiesKeeper: a keeper whose chain does not hold the pinned
// CA is refused before the token is sent; the pinned one is trusted
// without a host name check, and its answer fills the state dir.
func TestJoinVerifiesKeeper(t *testing.T) {
	t.Parallel()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreateCA(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var gotToken string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ SID, Token, CSR string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		gotToken = req.Token
		csr, err := x509.ParseCertificateRequest(pemBody(t, req.CSR))
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		c, err := ca.IssueClient(csr, req.SID, time.Hour, time.Now())
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": req.SID, "certificate": string(c.PEM), "ca": string(ca.PEM), "not_after": c.Cert.NotAfter, "nats": map[string]any{"urls": []string{}}})
	})
	url := serveTLS(t, ca, handler)
	impostor := serveTLS(t, other, handler)
	opts := func(keeper, dir string) JoinOptions {
		return JoinOptions{Bootstrap: Bootstrap{Keeper: keeper, SID: "web-1.x.test", Token: "sbt_secret", CAFingerprint: ca.Fingerprint()}, StateDir: dir, HostKeyDir: t.TempDir()}
	}
	if _, err := Join(context.Background(), opts(impostor, t.TempDir())); err == nil || !strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("join with an impostor keeper = %v", err)
	}
	if gotToken != "" {
		t.Fatal("the token reached a keeper of another CA")
	}
	dir := t.TempDir()
	id, err := Join(context.Background(), opts(url, dir))
	if err != nil {
		t.Fatal(err)
	}
	if id.State().SID != "web-1.x.test" || id.State().CAFingerprint != ca.Fingerprint() || gotToken != "sbt_secret" {
		t.Fatalf("state = %+v", id.State())
	}
	loaded, err := Load(dir)
	if err != nil || pki.SerialHex(loaded.Certificate()) != pki.SerialHex(id.Certificate()) {
		t.Fatalf("load = %v", err)
	}
	// The TLS config trusts the keeper CA only.
	cfg := loaded.TLSConfig()
	if _, err := tls.Dial("tcp", strings.TrimPrefix(impostor, "https://"), cfg); err == nil {
		t.Fatal("the identity's TLS config trusted another CA")
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), cfg)
	if err != nil {
		t.Fatalf("the identity's TLS config refused the keeper: %v", err)
	}
	conn.Close()
	var e *Error
	if _, err := Join(context.Background(), JoinOptions{Bootstrap: Bootstrap{Keeper: "http://k:1", SID: "a", Token: "sbt_x", CAFingerprint: ca.Fingerprint()}}); !errors.As(err, &e) || e.Code != "join.keeper_invalid" {
		t.Fatalf("a plain http keeper = %v", err)
	}
}

func pemBody(t *testing.T, text string) []byte {
	t.Helper()
	b, rest := pemDecode(text)
	if b == nil {
		t.Fatalf("no PEM in %q (%q)", text, rest)
	}
	return b
}

func pemDecode(text string) ([]byte, string) {
	block, rest := pem.Decode([]byte(text))
	if block == nil {
		return nil, string(rest)
	}
	return block.Bytes, string(rest)
}

// TestJoinRetries: a token the keeper does not know yet (the VM booted
// before the keeper recorded it) is tried again within RetryFor; a final
// refusal (join.token_used) is not.
func TestJoinRetries(t *testing.T) {
	t.Parallel()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls int
	refuse := "join.token_unknown"
	url := serveTLS(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n, code := calls, refuse
		mu.Unlock()
		var req struct{ SID, CSR string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if n <= 2 || code == "join.token_used" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": 401, "code": code, "detail": "no"})
			return
		}
		csr, _ := x509.ParseCertificateRequest(pemBody(t, req.CSR))
		c, err := ca.IssueClient(csr, req.SID, time.Hour, time.Now())
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": req.SID, "certificate": string(c.PEM), "ca": string(ca.PEM), "not_after": c.Cert.NotAfter, "nats": map[string]any{"urls": []string{}}})
	}))
	opts := JoinOptions{Bootstrap: Bootstrap{Keeper: url, SID: "web-1.x.test", Token: "sbt_x", CAFingerprint: ca.Fingerprint()},
		StateDir: t.TempDir(), HostKeyDir: t.TempDir(), RetryEvery: 10 * time.Millisecond}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	var e *Error
	if _, err := Join(context.Background(), opts); !errors.As(err, &e) || e.Code != "join.token_unknown" || count() != 1 {
		t.Fatalf("without RetryFor: %v after %d calls", err, count())
	}
	opts.RetryFor = time.Minute
	if _, err := Join(context.Background(), opts); err != nil || count() != 3 {
		t.Fatalf("with RetryFor: %v after %d calls; want success on the third", err, count())
	}
	mu.Lock()
	calls, refuse = 0, "join.token_used"
	mu.Unlock()
	opts.StateDir = t.TempDir()
	if _, err := Join(context.Background(), opts); !errors.As(err, &e) || e.Code != "join.token_used" || count() != 1 {
		t.Fatalf("a final refusal: %v after %d calls; want one call", err, count())
	}
}
