package keeper_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// BenchmarkRunFanout50AgentsVsSSH runs the fan-out benchmark's idempotent
// three-step job (examples/fanout.yaml) through one keeper on 50 SSH hosts
// (real sshd each; the keeper serves the soul binary, so each connection
// runs the executor, soul exec --stdio) and on 50 souls reached through
// their agents (2 agent processes, each soul its own NATS connection on
// the embedded bus), alternately, after an untimed warm-up of each.
// Reported per run: wall time of each set, their ratio, and the CPU time
// of this process (keeper, embedded NATS server, client) per target.
//
//	go test -run '^$' -bench BenchmarkRunFanout50AgentsVsSSH -benchtime 5x ./internal/keeper/
func BenchmarkRunFanout50AgentsVsSSH(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "fanout.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	servers := sshtest.StartN(b, fanoutHosts, sshtest.Options{})
	tmp := b.TempDir()
	keyFile := filepath.Join(tmp, "id_ed25519")
	if err := os.WriteFile(keyFile, servers[0].ClientKey, 0o600); err != nil {
		b.Fatal(err)
	}
	k := startAgentKeeperWith(b, config.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(tmp, "keeper"), Log: config.Log{Level: "info"},
		NATS: config.NATS{Listen: "127.0.0.1:0"}, AgentBinary: bins.Path(b, "cmd/soul"), Credentials: config.Credentials{Files: []string{tmp}}})
	sshHosts := make([]any, fanoutHosts)
	for i, s := range servers {
		sid := fmt.Sprintf("h%02d.ssh.bench.test", i+1)
		sshHosts[i] = sid
		if _, err := k.c.SoulCreate(b.Context(), client.SoulCreate{SID: sid, Address: s.Addr,
			Connection: client.Connection{Transport: "ssh", User: s.User, Port: s.Port, KeyRef: "file:" + keyFile}}); err != nil {
			b.Fatal(err)
		}
	}
	agentHosts := make([]any, fanoutHosts)
	var ids []bustest.Identity
	for i := range fanoutHosts {
		id := k.soul(b, fmt.Sprintf("h%02d.agent.bench.test", i+1))
		ids = append(ids, id)
		agentHosts[i] = id.SID
	}
	k.agents(b, ids[:fanoutHosts/2]...)
	k.agents(b, ids[fanoutHosts/2:]...)
	for _, id := range ids {
		k.waitPresent(b, id.SID)
	}
	req := func(hosts []any, sub string) client.RunCreate {
		dir := filepath.Join(tmp, sub)
		os.MkdirAll(dir, 0o755)
		return client.RunCreate{Scenario: string(src), File: "fanout.yaml", Timeout: "2m", Input: map[string]any{"hosts": hosts, "dir": dir}}
	}
	sshReq, agentReq := req(sshHosts, "ssh"), req(agentHosts, "agent")
	check := func(r *client.Run, what string) {
		if r.Phase != "Succeeded" {
			b.Fatalf("%s run = %s\n%s", what, r.Phase, describeSteps(r.Steps))
		}
	}
	for _, r := range []client.RunCreate{sshReq, agentReq} {
		run, _ := fanoutRun(b, k.c, r)
		check(run, "warm-up")
	}
	if so, err := k.c.SoulGet(b.Context(), sshHosts[0].(string)); err != nil || so.Executor != "ssh: executor" {
		b.Fatalf("the SSH hosts do not run the executor: %q, %v", so.Executor, err)
	}
	var sshWall, agentWall, sshCPU, agentCPU time.Duration
	b.ResetTimer()
	for range b.N {
		for _, side := range []struct {
			req       client.RunCreate
			wall, cpu *time.Duration
			what      string
		}{{sshReq, &sshWall, &sshCPU, "ssh"}, {agentReq, &agentWall, &agentCPU, "agent"}} {
			c0, t0 := processCPU(), time.Now()
			run, _ := fanoutRun(b, k.c, side.req)
			*side.wall += time.Since(t0)
			*side.cpu += processCPU() - c0
			check(run, side.what)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(sshWall.Milliseconds())/n, "ssh-run-ms")
	b.ReportMetric(float64(agentWall.Milliseconds())/n, "agent-run-ms")
	b.ReportMetric(float64(sshWall)/float64(agentWall), "ssh/agent")
	b.ReportMetric(float64(sshCPU.Microseconds())/n/fanoutHosts, "ssh-keeper-cpu-µs/target")
	b.ReportMetric(float64(agentCPU.Microseconds())/n/fanoutHosts, "agent-keeper-cpu-µs/target")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
