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
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"errors"
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
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/soulid"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/testlog"
)

// buildSoul puts the soul agent (built once per test binary) into dir
// and returns its path.
func buildSoul(t *testing.T, dir string) string {
	t.Helper()
	return bins.Install(t, "cmd/soul", dir, "soul")
}

var agentListening = regexp.MustCompile(`msg="agent listener" addr=https://[^ ]*:(\d+)`)

// agentURL is the keeper's agent listener on loopback, from its log.
func agentURL(t *testing.T, k *proc) string {
	t.Helper()
	logs := k.Drain()
	m := agentListening.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the keeper logged no agent listener:\n%s", logs)
	}
	return "https://127.0.0.1:" + m[1]
}

// testCredentials lets a test keeper resolve the SSH keys and credential
// files tests keep in their temporary directories, and any variable; the
// keeper's own data dir (under the same root) stays out of reach.
var testCredentials = keepertest.Credentials

// keeperConfig writes a keeper.yml into dir: text, with testCredentials
// unless text has a credentials section of its own.
func keeperConfig(t testing.TB, dir, text string) string {
	t.Helper()
	if !strings.Contains(text, "credentials:") {
		text = testCredentials + text
	}
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
	return pool, client.Fingerprint(ca)
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
func waitSoul(t testing.TB, c *client.Client, sid string, ok func(client.Soul) bool) client.Soul {
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

// TestSelfOnboardLocalVM: examples/onboard-local.yaml (core.cloud.created
// {self_onboard: true, seeds}) through a real keeper makes a real local VM that, from its userdata
// alone, fetches the soul binary from the agent listener (checked against
// the CA and its sha256), runs soul join and soul run: the soul becomes
// active with its certificate serial and the VM's own host key pinned,
// the bootstrap token is spent (a replay is refused), the seed's run
// Succeeds on it, and an SSH step verifies against the pinned key.
func TestSelfOnboardLocalVM(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	s := spawn(t, keepertest.Options{YAML: "agent_binary: " + soul + "\n", Plugins: []string{localDriver}})
	k, data, plugins := s.Proc, s.Data, filepath.Join(s.Data, "plugins")
	// A loopback keeper's agent listener (and bus) are on loopback alone;
	// the VM below still joins, at its gateway.
	logs := k.Drain()
	if !strings.Contains(logs, `msg="agent listener" addr=https://127.0.0.1:`) {
		t.Fatalf("the agent listener of a keeper on 127.0.0.1 is not on loopback alone:\n%s", logs)
	}
	m := agentListening.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the keeper logged no agent listener:\n%s", logs)
	}
	agent := "https://127.0.0.1:" + m[1]
	c := adminClient(t, k, data)
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "join.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, plugins, "join.test", state) })

	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "onboard-local.yaml"), File: "onboard-local.yaml", Input: map[string]any{"count": 1}})
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
	if final.FinishedAt != nil {
		t.Logf("the VM joined %s after its create finished", so.JoinedAt.Sub(*final.FinishedAt).Round(time.Millisecond))
	}
	if n := auditCount(t, c, "soul.joined", so.CertSerial); n != 1 {
		t.Fatalf("%d soul.joined events with serial %s; want 1", n, so.CertSerial)
	}
	// The keeper's bus counted the VM it made and the soul that joined.
	metrics := scrapeMetrics(t, k.Addr, data)
	if metricValue(metrics, `soulstack_cloud_vms_total{op="created",provider="local"}`) != 1 || metricValue(metrics, "soulstack_souls_joined_total") != 1 {
		t.Fatalf("/metrics does not count the VM made and joined:\n%s\n%s", grepLines(metrics, "soulstack_cloud_vms"), grepLines(metrics, "soulstack_souls_joined"))
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

	// The seed's run is keyed by soul and seed: asking for it again (as a
	// re-join or a second keeper would) returns the same run; a client's
	// run cannot take the key.
	again, err := c.SeedApply(ctx, sid, seeds.Items[0].ID)
	if err != nil || again.ID != seedRun.ID {
		t.Fatalf("the seed's run again = %+v, %v; want run %s", again, err, seedRun.ID)
	}
	_, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: seeds.Items[0].Scenario, File: "seed.yaml", Key: key,
		Input: map[string]any{"greeting": "hello-seed", "sid": sid}})
	wantProblem(t, err, http.StatusUnprocessableEntity, "run.key_reserved")

	// POST /v1/souls/{sid}/seeds: checked with input.sid (a precise 422,
	// nothing stored), refused to a viewer, and on a joined soul it runs
	// at once, created by the caller.
	_, err = c.SeedAdd(ctx, sid, client.SeedCreate{Scenario: "steps:\n  - name: x\n    on: \"${ input.sid }\"\n    module: core.nope.done\n"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != 422 || p.Code != "seed.scenario_invalid" || len(p.Errors) == 0 || !strings.HasPrefix(p.Errors[0].Location, "seed.yaml:") {
		t.Fatalf("invalid seed = %v", err)
	}
	viewer, err := c.TokenCreate(ctx, client.TokenCreate{Name: "looker", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := client.New(k.Addr, viewer.Token)
	if _, err := vc.SeedAdd(ctx, sid, client.SeedCreate{Scenario: seeds.Items[0].Scenario}); !errors.As(err, &p) || p.Status != 403 {
		t.Fatalf("a viewer added a seed: %v", err)
	}
	// soul.create alone does not start runs: a seed runs as its creator.
	registrar, err := c.TokenCreate(ctx, client.TokenCreate{Name: "registrar", Permissions: []string{"soul.create", "soul.read"}})
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := client.New(k.Addr, registrar.Token)
	if _, err := rc.SeedAdd(ctx, sid, client.SeedCreate{Scenario: seeds.Items[0].Scenario}); !errors.As(err, &p) || p.Status != 403 || !strings.Contains(p.Detail, "run.create") {
		t.Fatalf("a token without run.create added a seed: %v", err)
	}
	if l, err := vc.SeedList(ctx, sid); err != nil || len(l.Items) != 1 {
		t.Fatalf("seeds as a viewer = %+v, %v", l, err)
	}
	added, err := c.SeedAdd(ctx, sid, client.SeedCreate{
		Scenario: "steps:\n  - name: two\n    on: \"${ input.sid }\"\n    module: core.command.ran\n    params: {cmd: \"echo ${ input.n } > /root/second; printf %s '${ input.db_password }' > /root/pw\"}\n",
		Input:    map[string]any{"n": 2, "db_password": "pw-s3cret-XYZ"}})
	if err != nil || added.RunID == "" || added.Status != "active" {
		t.Fatalf("seed added to a joined soul = %+v, %v", added, err)
	}
	// Its secret-looking input is sealed at rest and masked in answers.
	listed, _ := c.SeedList(ctx, sid)
	if raw, _ := json.Marshal(listed); strings.Contains(string(raw), "pw-s3cret-XYZ") {
		t.Fatalf("GET seeds shows the secret input: %s", raw)
	}
	if n := seedRowsWith(t, data, "pw-s3cret-XYZ"); n != 0 {
		t.Fatalf("%d soul_seeds rows hold the secret input in clear", n)
	}
	if r := waitRun(t, c, added.RunID); r.Phase != "Succeeded" || r.Key != fmt.Sprintf("seed:%s:%d", sid, added.ID) {
		t.Fatalf("the added seed's run = %s %s %+v", r.Phase, r.Key, r.Error)
	}
	if n := auditCount(t, c, "seed.added", sid); n != 1 {
		t.Fatalf("%d seed.added events; want 1", n)
	}

	// A later step (through the agent, which is connected now; SSH against
	// the joined key is TestSoulsTargetAwaitsJoin's) sees the seed's work,
	// the agent running and the bootstrap file gone.
	check := fmt.Sprintf(`steps:
  - name: look
    on: %s
    module: core.command.ran
    params: {cmd: "cat /root/seeded /root/second; rev /root/pw; echo; test ! -e /etc/soulstack/bootstrap.json && echo spent; stat -c %%a /var/lib/soulstack/soul.key; pgrep -f 'soul run' >/dev/null && echo running"}
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
	if final.Phase != "Succeeded" || look.Stdout != "hello-seed\n2\nZYX-terc3s-wp\nspent\n600\nrunning\n" {
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

// seedRowsWith counts the soul_seeds rows of a keeper's SQLite registry
// whose input holds text.
func seedRowsWith(t *testing.T, dataDir, text string) int {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dataDir, "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, all int
	if err := db.QueryRow(`SELECT COUNT(*) FROM soul_seeds`).Scan(&all); err != nil || all == 0 {
		t.Fatalf("soul_seeds rows = %d, %v", all, err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM soul_seeds WHERE input LIKE ?`, "%"+text+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitKeyedRun waits for the run with key to exist and finish.
func waitKeyedRun(t *testing.T, c *client.Client, key string) *client.Run {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := c.RunList(context.Background(), client.RunListOptions{ListOptions: client.ListOptions{Limit: 100}})
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

// joinKeeper is a keeper with VMs that have bootstrap tokens but do not
// join by themselves (no agent binary): the refusal tests' ground.
type joinKeeper struct {
	k      *proc
	c      *client.Client
	data   string
	state  string
	agent  string
	pool   *x509.CertPool
	fp     string
	sids   []string
	tokens map[string]string
	vmIDs  map[string]string
}

func startJoinKeeper(t *testing.T, backend string, count int, extra string) *joinKeeper {
	t.Helper()
	s := spawn(t, keepertest.Options{YAML: extra, Postgres: backend == "postgres", Plugins: []string{localDriver}})
	data, plugins := s.Data, filepath.Join(s.Data, "plugins")
	j := &joinKeeper{k: s.Proc, data: data, agent: agentURL(t, s.Proc), c: s.Admin, state: t.TempDir(), tokens: map[string]string{}, vmIDs: map[string]string{}}
	j.pool, j.fp = keeperCA(t, data)
	ctx := context.Background()
	if _, err := j.c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "refuse.test", Config: map[string]any{"state_dir": j.state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, plugins, "refuse.test", j.state) })
	run, out := cloudStep(t, j.c, "core.cloud.created", fmt.Sprintf("{provider: local, profile: {memory_mb: 128}, count: %d, self_onboard: true, name: r}", count))
	if stepStatus(run) != "Succeeded changed" {
		t.Fatalf("create: %s\n%s", stepStatus(run), describeSteps(run.Steps))
	}
	raw, _ := json.Marshal(out["hosts"])
	var hosts []struct {
		SID  string `json:"sid"`
		VMID string `json:"vm_id"`
	}
	if err := json.Unmarshal(raw, &hosts); err != nil || len(hosts) != count {
		t.Fatalf("hosts = %s", raw)
	}
	for _, h := range hosts {
		j.sids = append(j.sids, h.SID)
		j.vmIDs[h.SID] = h.VMID
		j.tokens[h.SID] = vmToken(t, j.state, h.SID)
	}
	return j
}

// status is a soul's status and certificate serial.
func (j *joinKeeper) status(t *testing.T, sid string) string {
	t.Helper()
	so, err := j.c.SoulGet(context.Background(), sid)
	if err != nil {
		return "gone"
	}
	return so.Status + "/" + so.CertSerial
}

// soulJoin runs the soul binary's join by hand.
func soulJoin(t *testing.T, soul string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(soul, append([]string{"join", "--bootstrap", filepath.Join(t.TempDir(), "none.json")}, args...)...).CombinedOutput()
	return string(out), err
}

// pinnedKeyDir writes the soul's pinned host key as an sshd .pub file.
func pinnedKeyDir(t *testing.T, c *client.Client, sid string) string {
	t.Helper()
	so, err := c.SoulGet(context.Background(), sid)
	if err != nil || so.Connection.HostKey == "" {
		t.Fatalf("soul %s has no pinned key: %+v %v", sid, so, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ssh_host_ed25519_key.pub"), []byte(so.Connection.HostKey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestJoinRefusals: against a real keeper with real local VMs on SQLite
// and PostgreSQL, every way a join or a renewal can be refused is its
// own case; each answers its own code, is audited as join.refused with
// that reason, and changes nothing. Then soul join by hand succeeds,
// renewal replaces the serial (the old certificate no longer renews),
// destroy and delete revoke, and a client over its refusal budget is
// refused even with a valid token.
func TestJoinRefusals(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testJoinRefusals(t, backend, soul)
		})
	}
}

func testJoinRefusals(t *testing.T, backend, soul string) {
	j := startJoinKeeper(t, backend, 5, "http: {auth_failure_burst: 30, auth_failure_interval: 1h}\n")
	ctx := context.Background()
	a, b, cSID, d, e := j.sids[0], j.sids[1], j.sids[2], j.sids[3], j.sids[4]
	refuse := func(t *testing.T, sid, token, csr string, wantStatus int, wantCode string) {
		t.Helper()
		before := j.status(t, sid)
		status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: sid, Token: token, CSR: csr})
		if status != wantStatus || code != wantCode {
			t.Fatalf("join = %d %s; want %d %s", status, code, wantStatus, wantCode)
		}
		if after := j.status(t, sid); after != before {
			t.Fatalf("a refused join changed soul %s: %s -> %s", sid, before, after)
		}
		if n := auditCount(t, j.c, "join.refused", `"reason":"`+wantCode+`"`); n < 1 {
			t.Fatalf("no join.refused event with reason %s", wantCode)
		}
	}
	t.Run("UnknownToken", func(t *testing.T) {
		refuse(t, a, "sbt_"+strings.Repeat("x", 43), newCSRPEM(t, a), 401, "join.token_unknown")
	})
	t.Run("WrongSID", func(t *testing.T) {
		refuse(t, a, j.tokens[b], newCSRPEM(t, a), 401, "join.sid_mismatch")
		if got := j.status(t, b); got != "pending/" {
			t.Fatalf("the token's own soul changed: %s", got)
		}
	})
	t.Run("MalformedCSR", func(t *testing.T) {
		// The token and the host key are checked first (cheap checks
		// before the request's signature): they are right here.
		so, err := j.c.SoulGet(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		before := j.status(t, a)
		status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: a, Token: j.tokens[a],
			CSR: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", HostKeys: []string{so.Connection.HostKey}})
		if status != 400 || code != "join.invalid" || j.status(t, a) != before {
			t.Fatalf("join with a malformed CSR = %d %s", status, code)
		}
		// With an unknown token the CSR is never looked at.
		refuse(t, a, "sbt_"+strings.Repeat("y", 43), "not a CSR", 401, "join.token_unknown")
	})
	t.Run("MalformedHostKey", func(t *testing.T) {
		before := j.status(t, a)
		status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: a, Token: j.tokens[a], CSR: newCSRPEM(t, a), HostKeys: []string{"ssh-ed25519 not-base64"}})
		if status != 400 || code != "join.invalid" || j.status(t, a) != before {
			t.Fatalf("join with a malformed host key = %d %s", status, code)
		}
	})
	t.Run("WrongKeeperCA", func(t *testing.T) {
		other, err := pki.LoadOrCreateCA(t.TempDir(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[a], "--sid", a, "--ca-fingerprint", other.Fingerprint(), "--state-dir", t.TempDir(), "--host-key-dir", pinnedKeyDir(t, j.c, a))
		if err == nil || !strings.Contains(out, "pinned fingerprint") {
			t.Fatalf("soul join trusted a keeper of another CA: %v\n%s", err, out)
		}
		if got := j.status(t, a); got != "pending/" {
			t.Fatalf("soul %s after a join against the wrong CA: %s", a, got)
		}
	})
	t.Run("HostKeyMismatch", func(t *testing.T) {
		fake, _ := fakeHostKeyDir(t)
		out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[a], "--sid", a, "--ca-fingerprint", j.fp, "--state-dir", t.TempDir(), "--host-key-dir", fake)
		if err == nil || !strings.Contains(out, "join.host_key_mismatch") {
			t.Fatalf("a soul reporting another host key than the pinned one joined: %v\n%s", err, out)
		}
		if got := j.status(t, a); got != "pending/" {
			t.Fatalf("soul %s after a refused join: %s", a, got)
		}
	})

	// By hand, with flags only: the identity lands in the state dir with
	// the right modes and the registry holds its serial.
	stateA := t.TempDir()
	out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[a], "--sid", a, "--ca-fingerprint", j.fp, "--state-dir", stateA, "--host-key-dir", pinnedKeyDir(t, j.c, a))
	if err != nil {
		t.Fatalf("soul join: %v\n%s", err, out)
	}
	for name, mode := range map[string]os.FileMode{"soul.key": 0o600, "agent.json": 0o600, "soul.crt": 0o644, "ca.crt": 0o644} {
		fi, err := os.Stat(filepath.Join(stateA, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v, %v; want mode %v", name, fi, err, mode)
		}
	}
	idA, err := soulid.Load(stateA)
	if err != nil {
		t.Fatal(err)
	}
	serialA := pki.SerialHex(idA.Certificate())
	if got := j.status(t, a); got != "active/"+serialA {
		t.Fatalf("joined soul = %s; want active/%s", got, serialA)
	}

	t.Run("Replay", func(t *testing.T) {
		refuse(t, a, j.tokens[a], newCSRPEM(t, a), 401, "join.token_used")
	})
	t.Run("BurnedToken", func(t *testing.T) {
		run, _ := cloudStep(t, j.c, "core.cloud.destroyed", fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", j.vmIDs[cSID], cSID))
		if stepStatus(run) != "Succeeded changed" {
			t.Fatalf("destroy: %s", stepStatus(run))
		}
		refuse(t, cSID, j.tokens[cSID], newCSRPEM(t, cSID), 401, "join.token_burned")
	})
	t.Run("RenewWithoutCertificate", func(t *testing.T) {
		status, code := postJoin(t, j.agent, j.pool, "/v1/join/renew", client.RenewRequest{CSR: newCSRPEM(t, a)})
		if status != 401 || code != "join.cert_missing" {
			t.Fatalf("renew without a client certificate = %d %s", status, code)
		}
	})
	t.Run("RenewReplacesSerial", func(t *testing.T) {
		old := t.TempDir()
		copyDir(t, stateA, old)
		if err := idA.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		renewed := pki.SerialHex(idA.Certificate())
		if renewed == serialA || j.status(t, a) != "active/"+renewed {
			t.Fatalf("after renewal the soul is %s (old serial %s, new %s)", j.status(t, a), serialA, renewed)
		}
		reloaded, err := soulid.Load(stateA)
		if err != nil || pki.SerialHex(reloaded.Certificate()) != renewed {
			t.Fatalf("the state dir does not hold the renewed certificate: %v", err)
		}
		stale, err := soulid.Load(old)
		if err != nil {
			t.Fatal(err)
		}
		var se *soulid.Error
		if err := stale.Renew(ctx); !errors.As(err, &se) || se.Code != "join.cert_revoked" {
			t.Fatalf("renewal with the replaced certificate: %v", err)
		}
		if j.status(t, a) != "active/"+renewed {
			t.Fatal("a refused renewal changed the soul")
		}
		if n := auditCount(t, j.c, "soul.cert_renewed", renewed); n != 1 {
			t.Fatalf("%d soul.cert_renewed events", n)
		}
	})
	t.Run("DestroyRevokes", func(t *testing.T) {
		run, _ := cloudStep(t, j.c, "core.cloud.destroyed", fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", j.vmIDs[a], a))
		if stepStatus(run) != "Succeeded changed" {
			t.Fatalf("destroy: %s", stepStatus(run))
		}
		if got := j.status(t, a); got != "destroyed/" {
			t.Fatalf("destroyed soul = %s; want its serial cleared", got)
		}
		var se *soulid.Error
		if err := idA.Renew(ctx); !errors.As(err, &se) || se.Code != "join.soul_destroyed" {
			t.Fatalf("renewal of a destroyed soul: %v", err)
		}
	})
	t.Run("DeleteRevokes", func(t *testing.T) {
		stateD := t.TempDir()
		if out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[d], "--sid", d, "--ca-fingerprint", j.fp, "--state-dir", stateD, "--host-key-dir", pinnedKeyDir(t, j.c, d)); err != nil {
			t.Fatalf("soul join: %v\n%s", err, out)
		}
		if err := j.c.SoulDelete(ctx, d); err != nil {
			t.Fatal(err)
		}
		idD, err := soulid.Load(stateD)
		if err != nil {
			t.Fatal(err)
		}
		var se *soulid.Error
		if err := idD.Renew(ctx); !errors.As(err, &se) || se.Code != "join.soul_unknown" {
			t.Fatalf("renewal of a deleted soul: %v", err)
		}
	})
	t.Run("AgentListenerServesOnlyJoin", func(t *testing.T) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: j.pool, ServerName: "localhost"}}}
		for _, path := range []string{"/v1/souls", "/openapi.json", "/metrics", "/healthz", "/v1/tokens"} {
			resp, err := hc.Get(j.agent + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Fatalf("agent listener GET %s = %d; want 404", path, resp.StatusCode)
			}
		}
		resp, err := hc.Get(j.agent + "/v1/agent/soul")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("agent binary without agent_binary = %d; want 404", resp.StatusCode)
		}
	})
	t.Run("RateLimited", func(t *testing.T) {
		limited := false
		for i := 0; i < 40 && !limited; i++ {
			status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: e, Token: "sbt_guess" + fmt.Sprint(i), CSR: newCSRPEM(t, e)})
			limited = status == 429 && code == "join.rate_limited"
			if !limited && status != 401 {
				t.Fatalf("guess %d = %d %s", i, status, code)
			}
		}
		if !limited {
			t.Fatal("40 refused joins in a row were never rate-limited")
		}
		// Even the right token is refused now, and changes nothing.
		status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: e, Token: j.tokens[e], CSR: newCSRPEM(t, e)})
		if status != 429 || code != "join.rate_limited" || j.status(t, e) != "pending/" {
			t.Fatalf("a limited client's valid join = %d %s, soul %s", status, code, j.status(t, e))
		}
		if n := auditCount(t, j.c, "join.refused", "join.rate_limited"); n != 1 {
			t.Fatalf("%d join.refused join.rate_limited events; want one per burst", n)
		}
	})
	list, err := j.c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}, Verify: true})
	if err != nil || list.Verify == nil || !list.Verify.OK {
		t.Fatalf("audit chain after the refusals: %+v, %v", list.Verify, err)
	}
	for sid, token := range j.tokens {
		if n := auditCount(t, j.c, "join.refused", token) + auditCount(t, j.c, "soul.joined", token); n != 0 {
			t.Fatalf("the audit log holds the plain token of %s", sid)
		}
	}
}

// copyDir copies the files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJoinTokenExpired: a bootstrap token past its TTL (counted from the
// VM's creation) is refused with join.token_expired, audited, and the
// soul stays pending.
func TestJoinTokenExpired(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	j := startJoinKeeper(t, "sqlite", 1, "bootstrap_token_ttl: 1ms\n")
	sid := j.sids[0]
	status, code := postJoin(t, j.agent, j.pool, "/v1/join", client.JoinRequest{SID: sid, Token: j.tokens[sid], CSR: newCSRPEM(t, sid)})
	if status != 401 || code != "join.token_expired" {
		t.Fatalf("join with an expired token = %d %s", status, code)
	}
	if got := j.status(t, sid); got != "pending/" {
		t.Fatalf("soul after a refused join = %s", got)
	}
	if n := auditCount(t, j.c, "join.refused", `"reason":"join.token_expired"`); n != 1 {
		t.Fatalf("%d join.refused join.token_expired events; want 1", n)
	}
}

// TestSoulRunRenews: soul run renews its certificate before it expires
// (agent_cert_validity 4s: after about 2.7s) again and again, each time
// replacing the registry's serial; once the soul is destroyed, the next
// renewal is refused and soul run exits with join.soul_destroyed.
func TestSoulRunRenews(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	j := startJoinKeeper(t, "sqlite", 1, "agent_cert_validity: 4s\n")
	sid := j.sids[0]
	stateDir := t.TempDir()
	if out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[sid], "--sid", sid, "--ca-fingerprint", j.fp, "--state-dir", stateDir, "--host-key-dir", pinnedKeyDir(t, j.c, sid)); err != nil {
		t.Fatalf("soul join: %v\n%s", err, out)
	}
	first := j.status(t, sid)
	logs := &testlog.Buffer{}
	cmd := exec.Command(soul, "run", "--state-dir", stateDir, "--renew-retry", "200ms")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the process this test started, by PID
		}
	})
	seen := map[string]bool{first: true}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("soul run renewed %d times in 60s; statuses %v\n%s", len(seen)-1, seen, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
		s := j.status(t, sid)
		if !strings.HasPrefix(s, "active/") {
			t.Fatalf("soul = %s", s)
		}
		seen[s] = true
	}
	id, err := soulid.Load(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if cur := "active/" + pki.SerialHex(id.Certificate()); j.status(t, sid) != cur {
		// The file may lag one renewal behind at most; read again.
		time.Sleep(time.Second)
		if id, err = soulid.Load(stateDir); err != nil || j.status(t, sid) != "active/"+pki.SerialHex(id.Certificate()) {
			t.Fatalf("state dir holds %s, registry %s", cur, j.status(t, sid))
		}
	}
	run, _ := cloudStep(t, j.c, "core.cloud.destroyed", fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", j.vmIDs[sid], sid))
	if stepStatus(run) != "Succeeded changed" {
		t.Fatalf("destroy: %s", stepStatus(run))
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(logs.String(), "join.soul_destroyed") {
			t.Fatalf("soul run after destroy: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("soul run kept going after its soul was destroyed:\n%s", logs.String())
	}
}
