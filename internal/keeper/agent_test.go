package keeper_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/testlog"
)

// recordSerial writes serial into the registry as soul sid's current
// certificate, as its join would: the in-process tests of the agent
// transport register souls by hand with identities the test issues.
func recordSerial(t testing.TB, cfg config.Config, sid, serial string) {
	t.Helper()
	st, err := keeper.OpenStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := `UPDATE souls SET cert_serial = ? WHERE sid = ?`
	if cfg.DatabaseURL != "" {
		q = `UPDATE souls SET cert_serial = $1 WHERE sid = $2`
	}
	if _, err := st.DB().ExecContext(t.Context(), q, serial, sid); err != nil {
		t.Fatal(err)
	}
}

// agentKeeper is a keeper running in this process with its bus on a free
// loopback port.
type agentKeeper struct {
	cfg  config.Config
	url  string // the API's URL
	c    *client.Client
	urls []string
	ca   *pki.CA
	logs *testlog.Buffer
}

var busReady = regexp.MustCompile(`msg="bus ready" component=bus urls="?\[([^\]]+)\]`)

// testHeartbeat keeps presence tests short; the default is 5s.
const testHeartbeat = config.Duration(300 * time.Millisecond)

func startAgentKeeper(t *testing.T) *agentKeeper {
	t.Helper()
	return startAgentKeeperWith(t, config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: config.Log{Level: "info"},
		NATS: config.NATS{Listen: "127.0.0.1:0", Heartbeat: testHeartbeat}})
}

// connectedNode is the NATS URL the keeper's own connection went to.
func (k *agentKeeper) connectedNode(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`msg="bus ready" .* connected=(\S+)`).FindStringSubmatch(k.logs.String())
	if m == nil {
		t.Fatal("the keeper logged no connected URL")
	}
	return m[1]
}

func startAgentKeeperWith(t testing.TB, cfg config.Config) *agentKeeper {
	t.Helper()
	k := keepertest.Start(t, func(c *config.Config) { *c = cfg })
	m := busReady.FindStringSubmatch(k.Logs.String())
	if m == nil {
		t.Fatalf("the keeper logged no bus URL:\n%s", k.Logs.String())
	}
	ca, err := pki.LoadOrCreateCA(k.Config.TLSDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &agentKeeper{cfg: k.Config, url: k.URL, c: k.Client, urls: strings.Fields(m[1]), ca: ca, logs: k.Logs}
}

// closedPort returns a loopback port nothing listens on: SSH to it is
// refused at once.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// soul registers sid with an SSH address nothing answers on, and issues
// its identity from the keeper's CA (recorded as the soul's current
// certificate).
func (k *agentKeeper) soul(t testing.TB, sid string) bustest.Identity {
	t.Helper()
	if _, err := k.c.SoulCreate(t.Context(), client.SoulCreate{SID: sid, Address: "127.0.0.1", Connection: client.Connection{Port: closedPort(t)}}); err != nil {
		t.Fatal(err)
	}
	id := bustest.Issue(t, k.ca, sid, time.Hour, time.Now())
	recordSerial(t, k.cfg, sid, id.Serial)
	return id
}

func (k *agentKeeper) agents(t testing.TB, ids ...bustest.Identity) *bustest.Agents {
	return bustest.StartAgents(t, bustest.AgentSpec{URLs: k.urls, Identities: ids, Heartbeat: 300 * time.Millisecond})
}

// waitPresent waits until the keeper logged sid's agent present.
func (k *agentKeeper) waitPresent(t testing.TB, sid string) {
	t.Helper()
	bustest.WaitFor(t, 20*time.Second, sid+"'s agent", func() bool {
		return strings.Contains(k.logs.String(), `msg="bus: agent present" component=bus sid=`+sid)
	})
}

func (k *agentKeeper) waitStatus(t *testing.T, sid, status string) *client.Soul {
	t.Helper()
	var so *client.Soul
	bustest.WaitFor(t, 20*time.Second, sid+" "+status, func() bool {
		var err error
		so, err = k.c.SoulGet(t.Context(), sid)
		return err == nil && so.Status == status
	})
	return so
}

func (k *agentKeeper) run(t *testing.T, scenario string) *client.Run {
	t.Helper()
	run, _, err := k.c.RunCreate(t.Context(), client.RunCreate{Scenario: scenario, File: "agent.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	final, err := k.c.RunWait(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	return final
}

func (k *agentKeeper) audited(t *testing.T, action, object string) int {
	t.Helper()
	n := 0
	page, err := k.c.AuditList(t.Context(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Items {
		if e.Action == action && e.Object == object {
			n++
		}
	}
	return n
}

// TestAgentTransport: a soul whose agent is connected is reached through
// it (its SSH port is closed), becomes active on its first heartbeat,
// unreachable when its agent dies (and steps fall back to SSH, which
// fails), and active again when the agent returns.
func TestAgentTransport(t *testing.T) {
	t.Parallel()
	k := startAgentKeeper(t)
	const sid = "agent-1.local.test"
	id := k.soul(t, sid)
	a := k.agents(t, id)
	// Registered through the API the soul is active already; the agent
	// connects after its start jitter.
	k.waitPresent(t, sid)
	k.waitStatus(t, sid, "active")

	out := filepath.Join(t.TempDir(), "out")
	scenario := fmt.Sprintf(`steps:
  - name: write
    on: %q
    module: core.command.ran
    connect: {retries: 0}
    params: {cmd: "echo $((6*7)) > %s; id -u"}
`, sid, out)
	run := k.run(t, scenario)
	if run.Phase != "Succeeded" {
		t.Fatalf("run over the agent = %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "42\n" {
		t.Fatalf("the command's file holds %q, %v", b, err)
	}
	// The bus's metrics: the agent present, its heartbeats counted,
	// nobody refused.
	m := scrapeMetrics(t, k.url, k.cfg.DataDir)
	if metricValue(m, "soulstack_bus_agents") != 1 || metricValue(m, "soulstack_bus_heartbeats_total") < 1 ||
		metricValue(m, `soulstack_bus_connections_refused_total{reason="refused"}`) != 0 || metricValue(m, "soulstack_bus_callout_backlog") != 0 {
		t.Errorf("the bus's metrics:\n%s", grepLines(m, "soulstack_bus_"))
	}

	a.Kill()
	so := k.waitStatus(t, sid, "unreachable")
	if !strings.Contains(so.LastError, "heartbeats") {
		t.Errorf("last_error %q does not say the heartbeats stopped", so.LastError)
	}
	run = k.run(t, scenario)
	if run.Phase != "Failed" || len(run.Steps) == 0 || len(run.Steps[0].Targets) == 0 || run.Steps[0].Targets[0].Status != "unreachable" {
		t.Fatalf("run without an agent (SSH refused) = %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	if e := run.Steps[0].Targets[0].Error; e == nil || e.Code != "ssh.unreachable" {
		t.Errorf("target error %+v, want ssh.unreachable (the SSH fallback)", e)
	}

	k.agents(t, id)
	k.waitStatus(t, sid, "active")
	if run := k.run(t, scenario); run.Phase != "Succeeded" {
		t.Fatalf("run after the agent came back = %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	// Registered through the API, the soul was active from the start:
	// one loss of the agent, one return.
	if n := k.audited(t, "soul.unreachable", "soul/"+sid); n != 1 {
		t.Errorf("%d soul.unreachable events, want 1", n)
	}
	if n := k.audited(t, "soul.activated", "soul/"+sid); n != 1 {
		t.Errorf("%d soul.activated events, want 1 (the agent's return)", n)
	}
}

// TestAgentOfDeletedSoulIsCutOff: once a soul leaves the registry its
// agent's connection is closed within a heartbeat interval and the
// identity cannot reconnect, while another soul's agent carries on.
func TestAgentOfDeletedSoulIsCutOff(t *testing.T) {
	t.Parallel()
	k := startAgentKeeper(t)
	gone := k.soul(t, "gone.local.test")
	stays := k.soul(t, "stays.local.test")
	k.agents(t, stays)
	k.waitPresent(t, stays.SID)
	tc, err := gone.TLS()
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(strings.Join(k.urls, ","), nats.Secure(tc), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("the registered soul cannot connect: %v", err)
	}
	defer nc.Close()
	if err := k.c.SoulDelete(t.Context(), gone.SID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the deleted soul's connection is still open")
	}
	if again, err := nats.Connect(strings.Join(k.urls, ","), nats.Secure(tc), nats.NoReconnect()); err == nil {
		again.Close()
		t.Fatal("the deleted soul's identity reconnected")
	}
	run := k.run(t, fmt.Sprintf("steps:\n  - {name: one, on: %q, module: core.command.ran, params: {cmd: \"true\"}}\n", stays.SID))
	if run.Phase != "Succeeded" {
		t.Fatalf("the other soul's run = %s\n%s", run.Phase, describeSteps(run.Steps))
	}
}
