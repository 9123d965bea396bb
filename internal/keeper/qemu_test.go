package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/qemu/qemutest"
	"github.com/soulstack/soulstack/internal/keeper"
	"github.com/soulstack/soulstack/internal/plugin"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
)

// qemuKeeper serves a keeper with the real soul-cloud-qemu plugin and a
// provider "qemu" (FQDN suffix suffix, a state dir of its own, the test
// image cache), plus the keeper.yml text yml. Every VM of the state dir
// is destroyed when the test ends, whatever happened, and then nothing of
// them may be left on the host.
func qemuKeeper(t *testing.T, suffix, yml string) (c *client.Client, data, state string) {
	t.Helper()
	dir := t.TempDir()
	data = filepath.Join(dir, ".keeper")
	plugins := filepath.Join(data, "plugins")
	buildDriver(t, plugins, "qemu")
	k := serve(t, dir, "--config", keeperConfig(t, dir, yml))
	c = adminClient(t, k, data)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("keeper log:\n%s", k.Drain())
		}
	})
	state, err := os.MkdirTemp("/var/tmp", "soul-cloud-qemu-keeper-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"state_dir": state, "images_dir": qemutest.ImagesDir()}
	t.Cleanup(func() { os.RemoveAll(state) })
	t.Cleanup(func() {
		destroyDriverVMsOf(t, plugins, "qemu", suffix, cfg)
		qemutest.NothingLeft(t, state)
	})
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "qemu", Driver: "qemu", FQDNSuffix: suffix, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	return c, data, state
}

// destroyDriverVMsOf destroys every VM of a provider config through a
// plugin host of its own.
func destroyDriverVMsOf(tb testing.TB, pluginDir, driver, suffix string, config map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := plugin.New(plugin.Config{PluginDir: pluginDir})
	if err != nil {
		tb.Errorf("destroy VMs: %v", err)
		return
	}
	defer h.Close()
	d, err := h.Driver(ctx, driver)
	if err != nil {
		tb.Errorf("destroy VMs: %v", err)
		return
	}
	cfg, _ := json.Marshal(config)
	if err := destroyDriverVMs(ctx, d, driversdk.Provider{Name: driver, FQDNSuffix: suffix, Config: cfg}); err != nil {
		tb.Errorf("destroy VMs: %v", err)
	}
}

// waitRunFor waits up to d for a run to finish.
func waitRunFor(t *testing.T, c *client.Client, id string, d time.Duration) *client.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := c.RunWait(ctx, id)
	if err != nil {
		t.Fatalf("wait for run %s: %v", id, err)
	}
	return r
}

// runScenario runs a scenario text and waits up to d for it to succeed.
func runScenario(t *testing.T, c *client.Client, name, text string, input map[string]any, d time.Duration) *client.Run {
	t.Helper()
	return succeeded(t, c, name, startScenario(t, c, name, text, input), d)
}

// startScenario starts a run of a scenario text and returns its id.
func startScenario(t *testing.T, c *client.Client, name, text string, input map[string]any) string {
	t.Helper()
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: text, File: name, Input: input})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return run.ID
}

// succeeded waits up to d for run id (of scenario name) to succeed.
func succeeded(t *testing.T, c *client.Client, name, id string, d time.Duration) *client.Run {
	t.Helper()
	final := waitRunFor(t, c, id, d)
	if final.Phase != "Succeeded" {
		t.Fatalf("%s = %s %+v\n%s", name, final.Phase, final.Error, describeSteps(final.Steps))
	}
	return final
}

// stdoutOf is the stdout of a core.command.ran target.
func stdoutOf(t *testing.T, tg client.RunTarget) string {
	t.Helper()
	var out struct{ Stdout string }
	if err := json.Unmarshal(tg.Output, &out); err != nil {
		t.Fatalf("output of %s: %v", tg.SID, err)
	}
	return out.Stdout
}

// TestQEMUSelfOnboardEndToEnd is examples/qemu.yaml on a real QEMU
// machine through a real keeper: the VM boots its own kernel (TCG here,
// where KVM does not run guests), cloud-init runs the keeper's userdata,
// which installs the soul agent as a systemd unit (the userdata's systemd
// branch) and joins with the one-time token; the seed runs over the
// agent; core.pkg.installed installs jq from Debian's archive through the
// VM's NAT; with KVM, core.docker.installed {source: distro} installs
// Docker and systemd starts it on the VM's own kernel (overlay2 on ext4,
// no nesting). Under TCG the Docker step is left out: it costs an
// emulated machine more CPU minutes than the rest of the test, on a
// machine the rest of the suite shares, and the module itself is proved
// on local VMs (internal/modules/standard). Then core.cloud.resized changes the memory with downtime (the
// same size again is unchanged), and core.cloud.destroyed leaves no QEMU
// process, overlay, tap or bridge behind.
//
// The same machine shows that a soul is first used only once cloud-init
// has finished (ansible#44378): the userdata is the built-in one with a
// runcmd that sleeps 40 s after the agent has started, sshd answers while
// it sleeps (the test logs in as the keeper would and looks), and the
// scenario's first step on the soul installs jq only after cloud-init 22.4
// reports done, which happens between its config and final stages.
func TestQEMUSelfOnboardEndToEnd(t *testing.T) {
	qemutest.RequireImageBuild(t)
	// The package's longest test (a TCG machine boots, joins and installs
	// packages for minutes, mostly on one busy core) starts its machine
	// before it yields to the other tests, so that they run beside it
	// rather than before it (go test releases parallel tests in no fixed
	// order).
	soul := buildSoul(t, t.TempDir())
	c, data, state := qemuKeeper(t, "qemu.test", "agent_binary: "+soul+"\n"+lateCloudInit(t))
	ctx := context.Background()
	start := time.Now()
	id := startScenario(t, c, "qemu.yaml", readExample(t, "qemu.yaml"), map[string]any{"count": 1, "disk_gb": 6, "install_docker": false})
	early := loginWhileCloudInitRuns(t, c, data)
	t.Parallel()

	final := succeeded(t, c, "qemu.yaml", id, 20*time.Minute)
	t.Logf("examples/qemu.yaml Succeeded in %s", time.Since(start).Round(time.Second))
	if got := <-early; got != "not-finished" {
		t.Fatalf("the first SSH login found %q: the test's premise (sshd answers before cloud-init is done) does not hold", got)
	}
	var out struct {
		Hosts []struct {
			SID        string `json:"sid"`
			VMID       string `json:"vm_id"`
			Attributes struct {
				Accel string `json:"accel"`
			} `json:"attributes"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(final.Steps[0].Targets[0].Output, &out); err != nil || len(out.Hosts) != 1 {
		t.Fatalf("provision output %s: %v", final.Steps[0].Targets[0].Output, err)
	}
	sid, vmID := out.Hosts[0].SID, out.Hosts[0].VMID
	wantLines := []string{"init: systemd", "soul: active enabled", "jq: jq-1.6", "cloud-init: done", "schema: valid",
		"jq installed after cloud-init finished: yes"}
	switch accel := out.Hosts[0].Attributes.Accel; accel {
	case "kvm":
		docker := fmt.Sprintf("steps:\n  - name: docker\n    on: %s\n    module: core.docker.installed\n    params: {source: distro, compose: false, verify: daemon}\n", sid)
		runScenario(t, c, "docker.yaml", docker, nil, 10*time.Minute)
		wantLines = append(wantLines, "docker: active overlay2")
	case "tcg":
		t.Logf("%s runs under TCG: the Docker step is left out (see the test's doc)", sid)
	default:
		t.Fatalf("the VM's accel attribute = %q, want kvm or tcg", accel)
	}
	so := waitSoul(t, c, sid, func(s client.Soul) bool { return s.JoinedAt != nil })
	if so.Status != "active" || so.CertSerial == "" {
		t.Fatalf("joined soul = %+v", so)
	}
	seeds, err := c.SeedList(ctx, sid)
	if err != nil || len(seeds.Items) != 1 {
		t.Fatalf("seeds of %s = %+v, %v", sid, seeds, err)
	}
	if seedRun := waitKeyedRun(t, c, fmt.Sprintf("seed:%s:%d", sid, seeds.Items[0].ID)); seedRun.Phase != "Succeeded" {
		t.Fatalf("seed run = %s %+v\n%s", seedRun.Phase, seedRun.Error, describeSteps(seedRun.Steps))
	}

	lookInVM(t, c, sid, wantLines)

	resizeWithDowntime(t, c, vmID, sid)

	destroy := fmt.Sprintf(`steps:
  - name: destroy
    on: keeper
    module: core.cloud.destroyed
    params: {provider: qemu, vm_ids: [%s], sids: [%s]}
`, vmID, sid)
	runScenario(t, c, "destroy.yaml", destroy, nil, 5*time.Minute)
	qemutest.NothingLeft(t, state)
	if so, err := c.SoulGet(ctx, sid); err != nil || so.Status != "destroyed" {
		t.Errorf("soul after destroy = %+v, %v", so, err)
	}
}

// lookInVM runs a look step on soul sid and requires each of wantLines
// in what the VM says, a QEMU or KVM machine, and the seed run by the
// soul agent, not sshd.
func lookInVM(t *testing.T, c *client.Client, sid string, wantLines []string) {
	t.Helper()
	look := fmt.Sprintf(`steps:
  - name: look
    on: %s
    module: core.command.ran
    params:
      cmd: |
        echo "seed: $(tr '\n' ' ' < /etc/soulstack-seeded)"
        echo "virt: $(systemd-detect-virt)"
        echo "init: $(cat /proc/1/comm)"
        echo "soul: $(systemctl is-active soul.service) $(systemctl is-enabled soul.service)"
        echo "jq: $(jq --version)"
        echo "docker: $(systemctl is-active docker.service 2>/dev/null) $(docker info --format '{{.Driver}}' 2>/dev/null)"
        echo "cloud-init: $(cloud-init status | cut -d' ' -f2)"
        echo "schema: $(cloud-init schema --system >/dev/null 2>&1 && echo valid || echo invalid)"
        echo "jq installed after cloud-init finished: $(test %s -ot /var/lib/dpkg/info/jq.list && echo yes || echo no)"
`, sid, cloudInitMarker)
	got := stdoutOf(t, runScenario(t, c, "look.yaml", look, nil, 5*time.Minute).Steps[0].Targets[0])
	t.Logf("on %s:\n%s", sid, got)
	for _, want := range wantLines {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the VM says\n%s\nwant a line %q", got, want)
		}
	}
	if !strings.Contains(got, "virt: qemu\n") && !strings.Contains(got, "virt: kvm\n") {
		t.Errorf("systemd-detect-virt in the VM: %q, want qemu or kvm", got)
	}
	// The seed's process ancestry: the agent started it, sshd did not.
	seedLine, _, _ := strings.Cut(got, "\n")
	if !strings.Contains(seedLine, " soul ") || strings.Contains(seedLine, "sshd") {
		t.Errorf("the seed ran under %q, want the soul agent and no sshd", seedLine)
	}
}

// resizeWithDowntime grows QEMU VM vmID (soul sid) to 1536 MB through
// core.cloud.resized: the machine restarts (downtime) and the soul sees
// the memory afterwards; the same size again changes nothing.
func resizeWithDowntime(t *testing.T, c *client.Client, vmID, sid string) {
	t.Helper()
	resize := fmt.Sprintf(`steps:
  - name: grow
    on: keeper
    module: core.cloud.resized
    params: {provider: qemu, vm_ids: [%[1]s], profile: {memory_mb: 1536}}
  - name: again
    on: keeper
    module: core.cloud.resized
    params: {provider: qemu, vm_ids: [%[1]s], profile: {memory_mb: 1536}}
  - name: after
    on: %[2]s
    module: core.command.ran
    connect: {retries: 100, delay: 3s}
    params: {cmd: "awk '/MemTotal/ {print $2}' /proc/meminfo; cut -d. -f1 /proc/uptime"}
`, vmID, sid)
	resized := time.Now()
	r := runScenario(t, c, "resize.yaml", resize, nil, 10*time.Minute)
	var grow, again struct {
		VMs []struct {
			CausedDowntime bool `json:"caused_downtime"`
			Changed        bool `json:"changed"`
		} `json:"vms"`
	}
	_ = json.Unmarshal(r.Steps[0].Targets[0].Output, &grow)
	_ = json.Unmarshal(r.Steps[1].Targets[0].Output, &again)
	if len(grow.VMs) != 1 || !grow.VMs[0].CausedDowntime || !grow.VMs[0].Changed || !r.Steps[0].Targets[0].Changed {
		t.Errorf("resize to 1536 MB: %s (changed %v)", r.Steps[0].Targets[0].Output, r.Steps[0].Targets[0].Changed)
	}
	if len(again.VMs) != 1 || again.VMs[0].CausedDowntime || again.VMs[0].Changed || r.Steps[1].Targets[0].Changed {
		t.Errorf("the same size again: %s (changed %v), want unchanged without downtime", r.Steps[1].Targets[0].Output, r.Steps[1].Targets[0].Changed)
	}
	fields := strings.Fields(stdoutOf(t, r.Steps[2].Targets[0]))
	if len(fields) != 2 {
		t.Fatalf("after the resize: %q", fields)
	}
	memKB, _ := strconv.Atoi(fields[0])
	uptime, _ := strconv.Atoi(fields[1])
	if memKB < 1300*1024 || memKB > 1536*1024 {
		t.Errorf("MemTotal after the resize = %d kB, want about 1536 MB", memKB)
	}
	if since := time.Since(resized); time.Duration(uptime)*time.Second > since {
		t.Errorf("uptime %d s after a resize %s ago: the VM was not restarted", uptime, since.Round(time.Second))
	}

}

// cloudInitMarker is the file the userdata's last runcmd writes.
const cloudInitMarker = "/var/tmp/cloud-init-finished"

// lateCloudInit is keeper.yml's cloud_init: the built-in userdata whose
// runcmd sleeps 40 s after the agent has started and then writes
// cloudInitMarker.
func lateCloudInit(t *testing.T) string {
	t.Helper()
	const agent = "runcmd:\n  - /etc/soulstack/start-agent.sh\n"
	late := strings.Replace(keeper.DefaultCloudInit, agent, agent+"  - sleep 40\n  - touch "+cloudInitMarker+"\n", 1)
	if late == keeper.DefaultCloudInit {
		t.Fatal("the default userdata has no runcmd starting the agent")
	}
	var yml strings.Builder
	yml.WriteString("cloud_init: |\n")
	for _, line := range strings.Split(strings.TrimRight(late, "\n"), "\n") {
		yml.WriteString("  " + line + "\n")
	}
	return yml.String()
}

// loginWhileCloudInitRuns logs in to the keeper's one soul as the keeper
// would (its key, the soul's pinned host key) as soon as it answers, and
// sends whether cloudInitMarker was there then.
func loginWhileCloudInitRuns(t *testing.T, c *client.Client, data string) <-chan string {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(data, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	early := make(chan string, 1)
	go func() {
		defer close(early)
		look := "test -e " + cloudInitMarker + " && echo finished || echo not-finished"
		for deadline := time.Now().Add(14 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			list, err := c.SoulList(context.Background(), client.ListOptions{})
			if err != nil || len(list.Items) != 1 || list.Items[0].Address == "" || list.Items[0].Connection.HostKey == "" {
				continue
			}
			so := list.Items[0]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			conn, err := sshx.Dial(ctx, sshx.Target{Address: so.Address, User: "debian", PrivateKey: key, HostKey: so.Connection.HostKey,
				Retry: sshx.RetryPolicy{Attempts: 1}}, sshx.Options{})
			if err != nil {
				cancel()
				continue
			}
			res, err := conn.Exec(ctx, sshx.Command{Argv: []string{"sh", "-c", look}})
			conn.Close()
			cancel()
			if err == nil {
				early <- strings.TrimSpace(string(res.Stdout))
				return
			}
		}
	}()
	return early
}
