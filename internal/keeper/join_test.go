package keeper_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/pki"
)

// buildSoul builds the soul agent into dir and returns its path.
func buildSoul(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "soul")
	out, err := exec.Command("go", "build", "-o", path, "../../cmd/soul").CombinedOutput()
	if err != nil {
		t.Fatalf("build soul: %v\n%s", err, out)
	}
	return path
}

var agentListening = regexp.MustCompile(`msg="agent listener" addr=https://[^ ]*:(\d+)`)

// agentURL is the keeper's agent listener on loopback, from its log.
func agentURL(t *testing.T, k *proc) string {
	t.Helper()
	logs := k.drain()
	m := agentListening.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the keeper logged no agent listener:\n%s", logs)
	}
	return "https://127.0.0.1:" + m[1]
}

// keeperConfig writes a keeper.yml into dir.
func keeperConfig(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// caFingerprint reads the keeper CA of a data dir: its PEM pool and
// fingerprint.
func keeperCA(t *testing.T, data string) (*x509.CertPool, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(data, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(raw)
	ca, err := pki.ParseCertificatePEM(raw)
	if err != nil {
		t.Fatal(err)
	}
	return pool, pki.Fingerprint(ca)
}

// newCSRPEM is a certificate request of a fresh key.
func newCSRPEM(t *testing.T, sid string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: sid}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// postJoin sends a raw join request to the agent listener and returns the
// status and the problem's code (empty on success).
func postJoin(t *testing.T, url string, pool *x509.CertPool, path string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	resp, err := hc.Post(url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p client.Problem
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, p.Code
}

// waitSoul polls a soul until ok says it is as wanted.
func waitSoul(t *testing.T, c *client.Client, sid string, ok func(client.Soul) bool) client.Soul {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		so, err := c.SoulGet(context.Background(), sid)
		if err == nil && ok(*so) {
			return *so
		}
		if time.Now().After(deadline) {
			t.Fatalf("soul %s never got there: %+v, %v", sid, so, err)
			return client.Soul{}
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// fakeHostKeyDir writes an ssh_host_ed25519_key.pub that is no VM's key.
func fakeHostKeyDir(t *testing.T) (string, string) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := gossh.NewPublicKey(pub)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pk)))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ssh_host_ed25519_key.pub"), []byte(line+" root@fake\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, line
}

func auditCount(t *testing.T, c *client.Client, action, needle string) int {
	t.Helper()
	list, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Action == action && strings.Contains(string(e.Payload), needle) {
			n++
		}
	}
	return n
}

// TestSelfOnboardLocalVM: core.cloud.created {self_onboard: true, seeds}
// through a real keeper makes a real local VM that, from its userdata
// alone, fetches the soul binary from the agent listener (checked against
// the CA and its sha256), runs soul join and soul run: the soul becomes
// active with its certificate serial and the VM's own host key pinned,
// the bootstrap token is spent (a replay is refused), the seed's run
// Succeeds on it, and an SSH step verifies against the pinned key.
func TestSelfOnboardLocalVM(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	plugins := filepath.Join(data, "plugins")
	buildLocalDriver(t, plugins)
	soul := buildSoul(t, t.TempDir())
	cfg := keeperConfig(t, dir, "agent_binary: "+soul+"\n")
	k := serve(t, dir, "--config", cfg)
	agent := agentURL(t, k)
	c := adminClient(t, k, data)
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "join.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, plugins, "join.test", state) })

	scenario := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params:
      provider: local
      profile: {cpus: 1, memory_mb: 256}
      self_onboard: true
      name: auto
      seeds:
        - scenario: |
            steps:
              - name: mark
                on: "$${ input.sid }"
                module: core.file.present
                params: {path: /root/seeded, content: "$${ input.greeting }\n"}
          input: {greeting: hello-seed}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "onboard.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("provision = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var out struct {
		Hosts []struct {
			SID   string `json:"sid"`
			Token string `json:"bootstrap_token"`
		} `json:"hosts"`
	}
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &out)
	if len(out.Hosts) != 1 || out.Hosts[0].SID != "auto-1.join.test" {
		t.Fatalf("hosts = %+v", out.Hosts)
	}
	sid := out.Hosts[0].SID
	pinnedAtCreate, _ := c.SoulGet(ctx, sid)

	so := waitSoul(t, c, sid, func(s client.Soul) bool { return s.JoinedAt != nil })
	if so.Status != "active" || so.CertSerial == "" || so.CertNotAfter == nil || so.Connection.HostKey == "" || so.Connection.HostKey != pinnedAtCreate.Connection.HostKey {
		t.Fatalf("joined soul = %+v (pinned at create %q)", so, pinnedAtCreate.Connection.HostKey)
	}
	if n := auditCount(t, c, "soul.joined", so.CertSerial); n != 1 {
		t.Fatalf("%d soul.joined events with serial %s; want 1", n, so.CertSerial)
	}

	// The spent token (read from the VM's userdata: the API masks it) is
	// refused (replay), and nothing changes.
	token := vmToken(t, state, sid)
	pool, _ := keeperCA(t, data)
	csr := newCSRPEM(t, sid)
	if status, code := postJoin(t, agent, pool, "/v1/join", client.JoinRequest{SID: sid, Token: token, CSR: csr}); status != 401 || code != "join.token_used" {
		t.Fatalf("replay = %d %s", status, code)
	}
	if after, _ := c.SoulGet(ctx, sid); after.CertSerial != so.CertSerial {
		t.Fatalf("a refused replay changed the soul: %+v", after)
	}
	if n := auditCount(t, c, "soul.joined", token) + auditCount(t, c, "join.refused", token); n != 0 {
		t.Fatal("the audit log holds the plain token")
	}
	if n := auditCount(t, c, "join.refused", "join.token_used"); n != 1 {
		t.Fatalf("%d join.refused join.token_used events; want 1", n)
	}

	// The seed ran on the soul once it joined, keyed by soul and seed.
	seeds, err := c.SeedList(ctx, sid)
	if err != nil || len(seeds.Items) != 1 {
		t.Fatalf("seeds = %+v, %v", seeds, err)
	}
	key := fmt.Sprintf("seed:%s:%d", sid, seeds.Items[0].ID)
	seedRun := waitKeyedRun(t, c, key)
	if seedRun.Phase != "Succeeded" || seedRun.CreatedBy != final.CreatedBy {
		t.Fatalf("seed run = %s by %s (want by %s) %+v\n%s", seedRun.Phase, seedRun.CreatedBy, final.CreatedBy, seedRun.Error, describeSteps(seedRun.Steps))
	}

	// An SSH step verifies against the pinned key and sees the seed's
	// work, the agent running and the bootstrap file gone.
	check := fmt.Sprintf(`steps:
  - name: look
    on: %s
    module: core.command.ran
    params: {cmd: "cat /root/seeded; test ! -e /etc/soulstack/bootstrap.json && echo spent; stat -c %%a /var/lib/soulstack/soul.key; pgrep -f 'soul run' >/dev/null && echo running"}
`, sid)
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: check, File: "check.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	var look struct{ Stdout string }
	if final.Phase == "Succeeded" {
		_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &look)
	}
	if final.Phase != "Succeeded" || look.Stdout != "hello-seed\nspent\n600\nrunning\n" {
		t.Fatalf("check = %s %q %+v\n%s", final.Phase, look.Stdout, final.Error, describeSteps(final.Steps))
	}
}

var userdataToken = regexp.MustCompile(`"sid": "([^"]+)", "token": "(sbt_[^"]+)"`)

// vmToken reads the plain bootstrap token of sid from the userdata the
// local driver gave its VM (under the state dir).
func vmToken(t *testing.T, state, sid string) string {
	t.Helper()
	var token string
	_ = filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "user-data.txt" {
			return nil
		}
		b, _ := os.ReadFile(path)
		if m := userdataToken.FindSubmatch(b); m != nil && string(m[1]) == sid {
			token = string(m[2])
		}
		return nil
	})
	if token == "" {
		t.Fatalf("no userdata of %s under %s", sid, state)
	}
	return token
}

// waitKeyedRun waits for the run with key to exist and finish.
func waitKeyedRun(t *testing.T, c *client.Client, key string) *client.Run {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := c.RunList(context.Background(), client.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.Items {
			if r.Key == key {
				return waitRun(t, c, r.ID)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("no run with key %s", key)
	return nil
}
