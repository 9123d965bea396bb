package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"path/filepath"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keeper"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestSeedsOverAgentWithoutSSH is the first seed's flow end to end with no
// SSH at all: core.cloud.created {self_onboard: true, seeds} makes two local
// VMs whose userdata fetches the soul agent, joins, stops sshd for good and
// starts `soul run`; each soul becomes
// active, its seed's run Succeeds over the agent transport, and a later
// step on both souls runs through the agent too — while nothing answers on
// their SSH port.
func TestSeedsOverAgentWithoutSSH(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	noSSH := strings.Replace(keeper.DefaultCloudInit, "runcmd:\n  - /etc/soulstack/start-agent.sh",
		// Once the soul has joined (the driver saw sshd answer before
		// that), sshd goes and cannot come back.
		"runcmd:\n  - setsid -f sh -c 'while [ ! -e /var/lib/soulstack/agent.json ]; do sleep 0.05; done; mv /usr/sbin/sshd /usr/sbin/sshd.stopped; pkill -x sshd'\n  - /etc/soulstack/start-agent.sh", 1)
	if noSSH == keeper.DefaultCloudInit {
		t.Fatal("the default userdata has no runcmd starting the agent")
	}
	var yml strings.Builder
	fmt.Fprintf(&yml, "agent_binary: %s\ncloud_init: |\n", soul)
	for _, line := range strings.Split(strings.TrimRight(noSSH, "\n"), "\n") {
		yml.WriteString("  " + line + "\n")
	}
	s := spawn(t, keepertest.Options{YAML: yml.String(), Plugins: []string{localDriver}})
	k, c, plugins := s.Proc, s.Admin, filepath.Join(s.Data, "plugins")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("keeper log:\n%s", k.Drain())
		}
	})
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "agent.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, plugins, "agent.test", state) })

	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "onboard-local.yaml"), File: "onboard-local.yaml",
		Input: map[string]any{"count": 2, "greeting": "over-the-agent"}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("provision = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var out struct {
		Hosts []struct {
			SID       string `json:"sid"`
			PrimaryIP string `json:"primary_ip"`
		} `json:"hosts"`
	}
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &out)
	if len(out.Hosts) != 2 {
		t.Fatalf("hosts = %+v", out.Hosts)
	}
	for _, h := range out.Hosts {
		so := waitSoul(t, c, h.SID, func(s client.Soul) bool { return s.JoinedAt != nil })
		if so.Status != "active" || so.CertSerial == "" {
			t.Fatalf("joined soul = %+v", so)
		}
		seeds, err := c.SeedList(ctx, h.SID)
		if err != nil || len(seeds.Items) != 1 {
			t.Fatalf("seeds of %s = %+v, %v", h.SID, seeds, err)
		}
		seedRun := waitKeyedRun(t, c, fmt.Sprintf("seed:%s:%d", h.SID, seeds.Items[0].ID))
		if seedRun.Phase != "Succeeded" {
			t.Fatalf("seed run on %s = %s %+v\n%s", h.SID, seedRun.Phase, seedRun.Error, describeSteps(seedRun.Steps))
		}
	}
	// Nothing answers on the souls' SSH port: the seeds did not use it.
	for _, h := range out.Hosts {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(h.PrimaryIP, "22"), 2*time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s still answers on port 22: the test's premise (no sshd) does not hold", h.SID)
		}
	}
	check := fmt.Sprintf(`steps:
  - name: look
    on: [%s, %s]
    module: core.command.ran
    params: {cmd: "cat /root/seeded; id -u; pgrep -x sshd >/dev/null || echo no-sshd"}
`, out.Hosts[0].SID, out.Hosts[1].SID)
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: check, File: "check.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" || len(final.Steps) != 1 || len(final.Steps[0].Targets) != 2 {
		t.Fatalf("check = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	for _, tg := range final.Steps[0].Targets {
		var look struct{ Stdout string }
		_ = json.Unmarshal(tg.Output, &look)
		if look.Stdout != "over-the-agent\n0\nno-sshd\n" {
			t.Fatalf("check on %s = %q", tg.SID, look.Stdout)
		}
	}
}
