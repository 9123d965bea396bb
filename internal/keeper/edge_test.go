package keeper_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// These tests attack the keeper's network edge through a real `keeper
// serve` process. "Off loopback" is a listen address of 0.0.0.0 (every
// interface of this machine): the keeper must treat it as reachable from
// the network, while the tests themselves connect through 127.0.0.1 only.

var fingerprintLog = regexp.MustCompile(`ca_fingerprint=(sha256:[0-9a-f]{64})`)

// loopbackURL turns the logged address of a keeper listening on 0.0.0.0
// into the URL a test reaches it by.
func loopbackURL(addr string) string {
	return strings.NewReplacer("0.0.0.0", "127.0.0.1", "[::]", "127.0.0.1").Replace(addr)
}

func adminToken(t *testing.T, dataDir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOwnCAOffLoopback: a keeper listening off loopback without tls config
// serves HTTPS with its own CA (keys 0600, fingerprint logged), so a
// client that does not trust that CA, or speaks plain HTTP, gets nothing.
// Before, the same command served plain HTTP on every interface.
func TestOwnCAOffLoopback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir, "--listen", "0.0.0.0:0")
	if !strings.HasPrefix(k.Addr, "https://") {
		t.Fatalf("keeper listens on %s, want https://", k.Addr)
	}
	url := loopbackURL(k.Addr)
	logs := k.Drain()
	m := fingerprintLog.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the log does not give the CA fingerprint:\n%s", logs)
	}
	fp := m[1]
	for _, f := range []string{pki.CAKeyFile, pki.ServerKeyFile} {
		fi, err := os.Stat(filepath.Join(data, "tls", f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", f, fi.Mode().Perm())
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(data, "tls", pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := pki.ParseCertificatePEM(caPEM)
	if err != nil || client.Fingerprint(caCert) != fp {
		t.Fatalf("ca.crt fingerprint %v (%v), logged %s", client.Fingerprint(caCert), err, fp)
	}
	token := adminToken(t, data)
	ctx := context.Background()

	// Plain HTTP on the port gets no API answer, let alone a token check.
	resp, err := http.Get(strings.Replace(url, "https://", "http://", 1) + "/v1/providers")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Fatalf("plain HTTP to the TLS port answered %d %s", resp.StatusCode, body)
		}
	}

	// A client that does not know the CA refuses the keeper.
	var ce *client.CertificateError
	c, _ := client.New(url, token)
	if _, err := c.ProviderList(ctx, client.ListOptions{}); !errors.As(err, &ce) || ce.Fingerprint != fp {
		t.Fatalf("client without the CA: err = %v, want a CertificateError naming %s", err, fp)
	}
	// A wrong pin is refused too.
	other := "sha256:" + strings.Repeat("ab", 32)
	c, _ = client.NewWithOptions(url, token, client.Options{CAFingerprint: other})
	if _, err := c.ProviderList(ctx, client.ListOptions{}); !errors.As(err, &ce) || !errors.Is(err, client.ErrFingerprintMismatch) {
		t.Fatalf("client with a wrong pin: err = %v", err)
	}
	// The CA file and the logged fingerprint both work.
	for name, o := range map[string]client.Options{
		"ca_file":        {CAFile: filepath.Join(data, "tls", pki.CACertFile)},
		"ca_fingerprint": {CAFingerprint: strings.ToUpper(fp[7:])},
	} {
		c, err := client.NewWithOptions(url, token, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ProviderList(ctx, client.ListOptions{}); err != nil {
			t.Fatalf("client with %s: %v", name, err)
		}
	}
	k.Interrupt(t)

	// A restart keeps the CA. The server certificate is reused, or renewed
	// under the same CA when the machine's addresses changed meanwhile
	// (other tests add and remove bridges; 0.0.0.0 covers them all);
	// package pki tests when each happens.
	k = serve(t, dir, "--listen", "0.0.0.0:0")
	logs = k.Drain()
	if m := fingerprintLog.FindStringSubmatch(logs); m == nil || m[1] != fp || !regexp.MustCompile(`server_cert=(reused|renewed)`).MatchString(logs) {
		t.Fatalf("after restart the CA changed or the server certificate is unaccounted for:\n%s", logs)
	}
	k.Interrupt(t)
}

// TestServeGivenCertificate: with tls.cert_file/key_file the keeper serves
// HTTPS with them even on loopback; a client trusting their CA works.
func TestServeGivenCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ext := filepath.Join(dir, "external-ca")
	ca, err := pki.LoadOrCreateCA(ext, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hosts, _ := pki.ListenHosts("127.0.0.1:0")
	if _, _, err := ca.EnsureServer(ext, hosts, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n",
		filepath.Join(ext, pki.ServerCertFile), filepath.Join(ext, pki.ServerKeyFile)))
	k := serve(t, dir, "--config", cfg)
	if !strings.HasPrefix(k.Addr, "https://127.0.0.1:") {
		t.Fatalf("keeper listens on %s, want https:// on loopback", k.Addr)
	}
	token := adminToken(t, filepath.Join(dir, ".keeper"))
	c, _ := client.New(k.Addr, token)
	var ce *client.CertificateError
	if _, err := c.ProviderList(context.Background(), client.ListOptions{}); !errors.As(err, &ce) {
		t.Fatalf("client without the CA: %v", err)
	}
	c, _ = client.NewWithOptions(k.Addr, token, client.Options{CAFile: filepath.Join(ext, pki.CACertFile)})
	if _, err := c.ProviderList(context.Background(), client.ListOptions{}); err != nil {
		t.Fatalf("client with the CA file: %v", err)
	}
	// The keeper's own CA exists for the souls (the agent listener, the
	// agent bus and their client certificates), but the API listener got
	// no certificate from it.
	if _, err := os.Stat(filepath.Join(dir, ".keeper", "tls", pki.ServerCertFile)); err == nil {
		t.Fatal("the keeper made its own API server certificate although a certificate was configured")
	}
	k.Interrupt(t)
}

// TestPlaintextOffLoopbackNeedsFlag: without its own CA and without a
// certificate, a keeper on a non-loopback address refuses to start, naming
// the options; --insecure-plaintext serves HTTP with a warning.
func TestPlaintextOffLoopbackNeedsFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "tls:\n  auto_ca: false\n")
	cmd := exec.Command(keeperBin, "serve", "--config", cfg, "--listen", "0.0.0.0:0", "--data-dir", filepath.Join(dir, "d"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--insecure-plaintext") || !strings.Contains(string(out), "tls.cert_file") {
		t.Fatalf("keeper serve off loopback without TLS: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "d", "admin.token")); err == nil {
		t.Fatal("the refused keeper created an admin token")
	}

	k := serve(t, dir, "--config", cfg, "--listen", "0.0.0.0:0", "--insecure-plaintext")
	if !strings.HasPrefix(k.Addr, "http://") {
		t.Fatalf("keeper listens on %s, want http://", k.Addr)
	}
	resp, err := http.Get(loopbackURL(k.Addr) + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	logs := k.Interrupt(t)
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "plain HTTP on a non-loopback address") {
		t.Fatalf("no warning about plaintext:\n%s", logs)
	}
}

// closedWithin reports whether the server closes conn (a read ends with
// EOF or a reset) before limit; while it waits it sends one byte of
// trickle every tick, when trickle is not empty.
func closedWithin(conn net.Conn, limit time.Duration, trickle string) bool {
	deadline := time.Now().Add(limit)
	done := make(chan struct{})
	defer close(done)
	if trickle != "" {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := conn.Write([]byte{trickle[i%len(trickle)]}); err != nil {
					return
				}
			}
		}()
	}
	_ = conn.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue // an answer (such as 408) before the close
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestSlowClientsAreCut: a client that sends its headers or its body a
// byte at a time, or holds an idle connection, is disconnected by the
// read and idle timeouts. Before, only the header timeout existed: a slow
// body or an idle keep-alive connection was held as long as the client
// liked.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "http:\n  read_header_timeout: 1s\n  read_timeout: 2s\n  idle_timeout: 1s\n")
	k := serve(t, dir, "--config", cfg)
	host := strings.TrimPrefix(k.Addr, "http://")
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	t.Run("body", func(t *testing.T) {
		conn := dial()
		fmt.Fprintf(conn, "POST /v1/providers HTTP/1.1\r\nHost: k\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		if !closedWithin(conn, 20*time.Second, `"name":"aaaa",`) {
			t.Fatal("a body sent a byte at a time kept its connection for 20 s")
		}
	})
	t.Run("headers", func(t *testing.T) {
		conn := dial()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\n")
		if !closedWithin(conn, 20*time.Second, "X-a: b\r\n") {
			t.Fatal("headers sent a byte at a time kept their connection for 20 s")
		}
	})
	t.Run("idle", func(t *testing.T) {
		conn := dial()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		if !closedWithin(conn, 20*time.Second, "") {
			t.Fatal("an idle keep-alive connection was kept for 20 s")
		}
	})
	k.Interrupt(t)
}

// TestConnectionCapPerClient: one client address cannot hold more than
// max_conns_per_client connections; the next one is closed at once, and a
// place that frees up can be used again. Before, there was no cap.
func TestConnectionCapPerClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "http:\n  max_conns_per_client: 3\n  read_header_timeout: 5m\n  read_timeout: 5m\n  idle_timeout: 5m\n")
	k := serve(t, dir, "--config", cfg)
	host := strings.TrimPrefix(k.Addr, "http://")
	var held []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		held = append(held, conn)
	}
	// The three held connections are served.
	for _, conn := range held {
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	over, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	fmt.Fprintf(over, "GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
	if !closedWithin(over, 20*time.Second, "") {
		t.Fatal("a fourth connection from the same address was served")
	}
	// Freeing a place lets a new connection in (the keeper sees the close
	// asynchronously, so try until it has).
	held[0].Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get(k.Addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection accepted after one was freed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	logs := k.Interrupt(t)
	if !strings.Contains(logs, "over its connection cap") {
		t.Fatalf("the cap was not logged:\n%s", logs)
	}
}

// TestAuthRateLimitAndMetricsListen: through keeper.yml, failed
// authentications from one address are cut off with 429 while the admin's
// known token still works; /metrics needs metrics.read on the API
// listener and no token on metrics_listen.
func TestAuthRateLimitAndMetricsListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mport := freePort(t)
	cfg := writeConfig(t, dir, fmt.Sprintf("http:\n  auth_failure_burst: 2\n  auth_failure_interval: 1h\nmetrics_listen: 127.0.0.1:%d\n", mport))
	k := serve(t, dir, "--config", cfg)
	token := adminToken(t, filepath.Join(dir, ".keeper"))
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get(k.Addr+"/metrics", ""); st != 401 {
		t.Fatalf("/metrics without a token: %d, want 401", st)
	}
	if st, _ := get(k.Addr+"/v1/providers", token); st != 200 {
		t.Fatalf("admin: %d", st)
	}
	for i := range 2 {
		if st, _ := get(k.Addr+"/v1/providers", fmt.Sprintf("sst_guess%d", i)); st != 401 {
			t.Fatalf("guess %d: %d, want 401", i, st)
		}
	}
	if st, body := get(k.Addr+"/v1/providers", "sst_guess2"); st != 429 || !strings.Contains(body, "auth.rate_limited") {
		t.Fatalf("third guess: %d %s, want 429 auth.rate_limited", st, body)
	}
	if st, _ := get(k.Addr+"/v1/providers", token); st != 200 {
		t.Fatalf("the admin's known token after the burst: %d, want 200", st)
	}
	if st, body := get(k.Addr+"/metrics", token); st != 200 || !strings.Contains(body, "soulstack_http_requests_total") {
		t.Fatalf("/metrics with the admin token: %d", st)
	}
	if st, body := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), ""); st != 200 || !strings.Contains(body, "soulstack_http_requests_total") {
		t.Fatalf("metrics_listen: %d %s", st, body)
	}
	k.Interrupt(t)
}

// TestEventStreamOutlivesReadTimeout: the read timeout that cuts slow
// clients does not cut a run's event stream, which lasts as long as the
// run: one SSE connection delivers every event up to stream.end, over
// plain HTTP/1.1 on loopback and over HTTP/2 with the keeper's own CA.
func TestEventStreamOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, listen string
		proto        int
	}{
		{"http1 loopback", "127.0.0.1:0", 1},
		{"http2 own CA", "0.0.0.0:0", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			data := filepath.Join(dir, ".keeper")
			cfg := writeConfig(t, dir, "http:\n  read_timeout: 1s\n  idle_timeout: 1s\n")
			k := serve(t, dir, "--config", cfg, "--listen", tc.listen)
			url := loopbackURL(k.Addr)
			hc := http.DefaultClient
			var opts client.Options
			if tc.proto == 2 {
				opts.CAFile = filepath.Join(data, "tls", pki.CACertFile)
				pem, err := os.ReadFile(opts.CAFile)
				if err != nil {
					t.Fatal(err)
				}
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
			}
			c, err := client.NewWithOptions(url, adminToken(t, data), opts)
			if err != nil {
				t.Fatal(err)
			}
			srv := sshtest.Start(t, sshtest.Options{})
			addSoul(t, c, "slow-1", srv)
			scenario := "name: slow\nsteps:\n  - name: wait\n    on: slow-1\n    module: core.command.ran\n    params:\n      cmd: sleep 4; echo done\n"
			run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: scenario})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("GET", url+"/v1/runs/"+run.ID+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+adminToken(t, data))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ProtoMajor != tc.proto {
				t.Fatalf("stream over %s, want HTTP/%d", resp.Proto, tc.proto)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || !strings.Contains(string(body), "event: stream.end") || !strings.Contains(string(body), "run.finished") {
				t.Fatalf("the event stream ended early (%v):\n%s", err, body)
			}
			k.Interrupt(t)
		})
	}
}

// TestOwnCAOnRealNonLoopbackAddress runs the keeper and soulctl in a
// network namespace of this test, where 198.51.100.7 (a documentation
// address, on a veth pair that exists only in the namespace) is a
// real non-loopback address: the keeper serves HTTPS there with a
// certificate that names it, and soulctl trusts it only with the CA.
func TestOwnCAOnRealNonLoopbackAddress(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a network namespace and needs root")
	}
	ns := fmt.Sprintf("sst-tls-%d", os.Getpid())
	ipCmd := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ipCmd("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd("-n", ns, "link", "set", "lo", "up")
	ipCmd("-n", ns, "link", "add", "edge0", "type", "veth", "peer", "name", "edge1")
	ipCmd("-n", ns, "addr", "add", "198.51.100.7/24", "dev", "edge0")
	ipCmd("-n", ns, "link", "set", "edge0", "up")
	ipCmd("-n", ns, "link", "set", "edge1", "up")

	soulctl := bins.Path(t, "cmd/soulctl")
	dir := t.TempDir()
	cmd := exec.Command("ip", "netns", "exec", ns, keeperBin, "serve", "--listen", "198.51.100.7:8443")
	cmd.Dir = dir
	k := keepertest.Run(t, cmd) // ip netns exec execs the keeper: the PID it kills is the keeper's
	logs := k.Drain()
	if k.Addr != "https://198.51.100.7:8443" {
		t.Fatalf("keeper listens on %s, want https://198.51.100.7:8443:\n%s", k.Addr, logs)
	}
	m := fingerprintLog.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no CA fingerprint in the keeper log:\n%s", logs)
	}
	fp := m[1]
	caFile := filepath.Join(dir, ".keeper", "tls", pki.CACertFile)
	token := adminToken(t, filepath.Join(dir, ".keeper"))
	run := func(args ...string) (string, error) {
		all := append([]string{"netns", "exec", ns, soulctl, "--keeper", "https://198.51.100.7:8443", "--token", token}, args...)
		out, err := exec.Command("ip", all...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("token", "list"); err == nil || !strings.Contains(out, "does not trust") || !strings.Contains(out, "--ca-file") {
		t.Fatalf("soulctl without the CA: %v\n%s", err, out)
	}
	for _, trust := range [][]string{{"--ca-file", caFile}, {"--ca-fingerprint", fp}} {
		if out, err := run(append(trust, "token", "list")...); err != nil || !strings.Contains(out, "admin") {
			t.Fatalf("soulctl %s: %v\n%s", trust[0], err, out)
		}
	}
}

// TestUntrustedPluginRefusedByKeeper: an operator's run that would start
// a world-writable soul-cloud-<driver> in the keeper's plugin dir fails
// with driver.untrusted, and the executable never runs. Before, the
// keeper executed it as its own user.
func TestUntrustedPluginRefusedByKeeper(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	data := filepath.Join(dir, ".keeper")
	c := adminClient(t, k, data)
	plugins := filepath.Join(data, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "executed")
	bin := filepath.Join(plugins, "soul-cloud-evil")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "evil", Driver: "evil", FQDNSuffix: "evil.test"}); err != nil {
		t.Fatal(err)
	}
	scenario := "name: evil\nsteps:\n  - name: provision\n    on: keeper\n    module: core.cloud.created\n    params:\n      provider: evil\n      profile: {cpus: 1}\n      count: 1\n"
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario})
	if err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, c, run.ID)
	steps := describeSteps(r.Steps)
	if r.Phase != "Failed" || !strings.Contains(steps, "driver.untrusted") || !strings.Contains(steps, "world-writable") {
		t.Fatalf("run %s:\n%s", r.Phase, steps)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the keeper executed the world-writable plugin")
	}
	k.Interrupt(t)
}
