package keeper_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
)

// natsCluster is three real nats-server processes in one cluster, with
// TLS from the keeper's CA (every client verified) and the keeper as
// auth callout responder.
type natsCluster struct {
	procs []*exec.Cmd
	urls  []string
}

func startNATSCluster(t *testing.T, tlsDir, issuerPub, password string) *natsCluster {
	t.Helper()
	bin := bins.Path(t, "github.com/nats-io/nats-server/v2")
	ca, err := pki.LoadOrCreateCA(tlsDir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hosts, _ := pki.ListenHosts("127.0.0.1:0")
	certDir := filepath.Join(t.TempDir(), "cluster-tls")
	os.MkdirAll(certDir, 0o700)
	if _, _, err := ca.EnsureServer(certDir, hosts, time.Now()); err != nil {
		t.Fatal(err)
	}
	client := []int{freePort(t), freePort(t), freePort(t)}
	route := []int{freePort(t), freePort(t), freePort(t)}
	c := &natsCluster{}
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", route[j]))
			}
		}
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
max_payload: 8MB
cluster { name: soulstack, listen: 127.0.0.1:%d, routes: [%s] }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }
authorization {
  timeout: 5
  users: [ { user: keeper, password: %q } ]
  auth_callout { issuer: %s, auth_users: [ keeper ] }
}
`, i+1, client[i], route[i], strings.Join(routes, ", "), filepath.Join(certDir, pki.ServerCertFile), filepath.Join(certDir, pki.ServerKeyFile), filepath.Join(tlsDir, pki.CACertFile), password, issuerPub)
		path := filepath.Join(t.TempDir(), "n.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill() // the process this test started, by PID
				cmd.Wait()
			}
		})
		c.procs = append(c.procs, cmd)
		c.urls = append(c.urls, fmt.Sprintf("tls://127.0.0.1:%d", client[i]))
	}
	for _, p := range client {
		bustest.WaitFor(t, 20*time.Second, "nats-server listening", func() bool {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err == nil {
				conn.Close()
			}
			return err == nil
		})
	}
	return c
}

// TestAgentsRideOutANATSNodeLoss: one keeper and 100 agents on a 3-node
// NATS cluster; a node the keeper is not connected to is killed while
// every soul runs a command: the agents it served reconnect to the other
// nodes, send their output there, and the run Succeeds.
func TestAgentsRideOutANATSNodeLoss(t *testing.T) {
	t.Parallel()
	const souls = 100
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	issuer, _ := nkeys.CreateAccount()
	seed, _ := issuer.Seed()
	pub, _ := issuer.PublicKey()
	password := "cluster-password-for-the-keeper"
	seedFile, pwFile := filepath.Join(dir, "issuer.nk"), filepath.Join(dir, "password")
	os.WriteFile(seedFile, seed, 0o600)
	os.WriteFile(pwFile, []byte(password), 0o600)
	cfg0 := config.Config{DataDir: dataDir}.WithDefaults()
	cluster := startNATSCluster(t, cfg0.TLSDir(), pub, password)

	k := startAgentKeeperWith(t, config.Config{Listen: "127.0.0.1:0", DataDir: dataDir, Log: config.Log{Level: "info"},
		NATS: config.NATS{URL: strings.Join(cluster.urls, ","), User: "keeper", PasswordRef: "file:" + pwFile, IssuerSeedRef: "file:" + seedFile, Heartbeat: config.Duration(time.Second)}})
	var ids []bustest.Identity
	var hosts []string
	for i := range souls {
		id := k.soul(t, fmt.Sprintf("node-%03d.cluster.test", i))
		ids = append(ids, id)
		hosts = append(hosts, id.SID)
	}
	var procs []*bustest.Agents
	for i := 0; i < souls; i += souls / 2 {
		procs = append(procs, bustest.StartAgents(t, bustest.AgentSpec{URLs: k.urls, Identities: ids[i : i+souls/2], Heartbeat: time.Second}))
	}
	for _, id := range ids {
		k.waitPresent(t, id.SID)
	}
	keeperNode := k.connectedNode(t)
	victim := -1
	for i, u := range cluster.urls {
		if u != keeperNode {
			victim = i
			break
		}
	}
	scenario := `name: cluster
inputs:
  hosts: {type: list}
steps:
  - name: slow
    on: "${ input.hosts }"
    forks: 100
    module: core.command.ran
    connect: {retries: 0}
    params: {cmd: "sleep 3; echo done"}
`
	run, _, err := k.c.RunCreate(t.Context(), client.RunCreate{Scenario: scenario, File: "cluster.yaml", Input: map[string]any{"hosts": hosts}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the commands are running
	p := cluster.procs[victim]
	p.Process.Signal(syscall.SIGKILL)
	p.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	final, err := k.c.RunWait(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.Phase != "Succeeded" {
		t.Fatalf("run with a NATS node killed = %s: %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	// The killed node did serve agents, which carried on elsewhere.
	lost := 0
	for _, a := range procs {
		lost += strings.Count(a.Log(), "bus connection lost")
	}
	if lost == 0 {
		t.Error("no agent lost its connection: the killed node served none")
	}
	t.Logf("%d of %d agents moved to another node", lost, souls)
}
