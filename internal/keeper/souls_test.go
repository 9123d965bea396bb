package keeper_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// readmeScenario is the README's scenario: greet the host, then show what
// it wrote only where soul.status == "active". Connecting is not retried,
// so that a host that does not answer is unreachable at once.
const readmeScenario = `name: hello
inputs:
  host: {type: string}
steps:
  - name: greet
    on: "${ input.host }"
    module: core.command.ran
    connect: {retries: 0}
    params: {cmd: "echo hello from $(hostname) > /tmp/hello"}
  - name: show
    on: "${ input.host }"
    when: soul.status == "active"
    module: core.command.ran
    params: {argv: [cat, /tmp/hello]}
    changed_when: false
`

// soulEvents returns the soul.activated and soul.unreachable events of sid.
func soulEvents(t *testing.T, c *client.Client, sid string) []client.AuditEvent {
	t.Helper()
	l, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Verify.OK {
		t.Fatalf("audit chain does not verify: %+v", l.Verify)
	}
	var out []client.AuditEvent
	for _, e := range l.Items {
		if (e.Action == "soul.activated" || e.Action == "soul.unreachable") && e.Object == "soul/"+sid {
			out = append(out, e)
		}
	}
	return out
}

// vmNet runs ip(8) in the network namespace of a local VM: the one its
// init (vm.json's pid) lives in.
func vmNet(t *testing.T, state, vmID string, args ...string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(state, "vms", vmID, "vm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vm struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(raw, &vm); err != nil || vm.PID == 0 {
		t.Fatalf("vm.json of %s names no init PID (%v)", vmID, err)
	}
	out, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(vm.PID), "-n", "ip"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v in VM %s: %v\n%s", args, vmID, err, out)
	}
	return string(out)
}

// TestSoulStatusFollowsContact: on a real local VM behind a real keeper, a
// soul core.cloud.created made is pending; the first step that runs a
// command on it makes it active (host key pinned, audited once), so the
// README's `when: soul.status == "active"` runs on it; a step that cannot
// reach it makes it unreachable with last_error (audited once, however many
// runs find it so) and the next command that runs, even one that fails,
// makes it active again; a destroyed
// soul stays destroyed.
func TestSoulStatusFollowsContact(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	s := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
	k, c, data := s.Proc, s.Admin, s.Data
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "alive.test", Config: map[string]any{"state_dir": state, "max_count": 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Spec: map[string]any{"cpus": 1, "memory_mb": 256}}); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, leave no VM behind.
	t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), "alive.test", state) })
	toks, err := c.TokenList(ctx, client.ListOptions{})
	if err != nil || len(toks.Items) != 1 {
		t.Fatalf("tokens = %+v, %v", toks, err)
	}
	creator := toks.Items[0].ID

	provision := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: small, count: 1}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: provision, File: "provision.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("provision = %s %+v", final.Phase, final.Error)
	}
	var prov struct {
		Hosts []struct{ SID, VMID string } `json:"hosts"`
	}
	if err := json.Unmarshal(fixKeys(final.Steps[0].Targets[0].Output), &prov); err != nil || len(prov.Hosts) != 1 {
		t.Fatalf("provision output = %s (%v)", final.Steps[0].Targets[0].Output, err)
	}
	sid, vmID := prov.Hosts[0].SID, prov.Hosts[0].VMID
	so, err := c.SoulGet(ctx, sid)
	if err != nil || so.Status != "pending" || so.LastSeenAt != nil || so.LastError != "" {
		t.Fatalf("a soul just made = %+v, %v; want pending, never seen", so, err)
	}

	// hello runs the README's scenario on the VM.
	hello := func() *client.Run {
		t.Helper()
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readmeScenario, File: "hello.yaml", Input: map[string]any{"host": sid}})
		if err != nil {
			t.Fatal(err)
		}
		return waitRun(t, c, run.ID)
	}
	showed := func(r *client.Run) bool {
		t.Helper()
		tg := r.Steps[1].Targets[0]
		var out struct{ Stdout string }
		_ = json.Unmarshal(tg.Output, &out)
		return tg.Status == "ok" && strings.HasPrefix(out.Stdout, "hello from ")
	}

	// First contact: active, host key pinned, and the README's second step
	// runs on the cloud-made host.
	first := hello()
	if first.Phase != "Succeeded" || !showed(first) {
		t.Fatalf("README scenario on a cloud-made soul = %s\n%s", first.Phase, describeSteps(first.Steps))
	}
	so, _ = c.SoulGet(ctx, sid)
	if so.Status != "active" || so.LastSeenAt == nil || so.LastError != "" || !strings.HasPrefix(so.Connection.HostKey, "ssh-ed25519 ") {
		t.Fatalf("soul after its first contact = %+v", so)
	}
	seen := *so.LastSeenAt
	evs := soulEvents(t, c, sid)
	if len(evs) != 1 || evs[0].Action != "soul.activated" || evs[0].ActorAID != creator {
		t.Fatalf("audit after the first contact = %+v, want one soul.activated by %s", evs, creator)
	}
	var payload map[string]any
	if err := json.Unmarshal(evs[0].Payload, &payload); err != nil || payload["run_id"] != first.ID || payload["from"] != "pending" {
		t.Fatalf("soul.activated payload = %s", evs[0].Payload)
	}

	// Again: still active, last contact later, no new event.
	again := hello()
	so, _ = c.SoulGet(ctx, sid)
	if again.Phase != "Succeeded" || !showed(again) || so.Status != "active" || !so.LastSeenAt.After(seen) {
		t.Fatalf("second run %s, soul %+v (last contact was %v)\n%s", again.Phase, so, seen, describeSteps(again.Steps))
	}
	seen = *so.LastSeenAt
	if n := len(soulEvents(t, c, sid)); n != 1 {
		t.Fatalf("a contact that changed nothing was audited: %d events", n)
	}

	// The VM's link goes down: unreachable, with last_error; the last
	// contact is kept; one event however many runs find it so.
	route := strings.TrimSpace(vmNet(t, state, vmID, "route", "show", "default"))
	vmNet(t, state, vmID, "link", "set", "eth0", "down")
	for i := range 2 {
		down := hello()
		if down.Phase != "Failed" || down.Steps[0].Targets[0].Status != "unreachable" || down.Steps[1].Targets[0].Status != "skipped" {
			t.Fatalf("run %d on a VM that is down = %s\n%s", i, down.Phase, describeSteps(down.Steps))
		}
		so, _ = c.SoulGet(ctx, sid)
		if so.Status != "unreachable" || !strings.Contains(so.LastError, "host unreachable") || so.LastSeenAt == nil || !so.LastSeenAt.Equal(seen) {
			t.Fatalf("soul after run %d on a VM that is down = %+v", i, so)
		}
		evs = soulEvents(t, c, sid)
		if len(evs) != 2 || evs[1].Action != "soul.unreachable" || evs[1].ActorAID != creator {
			t.Fatalf("audit after run %d on a VM that is down = %+v", i, evs)
		}
		if i == 0 {
			if err := json.Unmarshal(evs[1].Payload, &payload); err != nil || payload["run_id"] != down.ID || payload["code"] != "ssh.unreachable" || payload["from"] != "active" {
				t.Fatalf("soul.unreachable payload = %s", evs[1].Payload)
			}
		}
	}

	// Back up: active again on the next success.
	vmNet(t, state, vmID, "link", "set", "eth0", "up")
	if route != "" {
		vmNet(t, state, vmID, append([]string{"route", "replace"}, strings.Fields(route)...)...)
	}
	// The first contact back is a command that fails: it ran, so the soul
	// is reachable, whatever the command's exit code.
	failing := `steps:
  - name: fail
    on: "${ input.host }"
    module: core.command.ran
    connect: {retries: 0}
    params: {cmd: "exit 3"}
`
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: failing, File: "fail.yaml", Input: map[string]any{"host": sid}})
	if err != nil {
		t.Fatal(err)
	}
	back := waitRun(t, c, run.ID)
	so, _ = c.SoulGet(ctx, sid)
	if back.Phase != "Failed" || back.Steps[0].Targets[0].Status != "failed" || so.Status != "active" || so.LastError != "" || !so.LastSeenAt.After(seen) {
		t.Fatalf("failing command after the VM came back = %s, soul %+v\n%s", back.Phase, so, describeSteps(back.Steps))
	}
	evs = soulEvents(t, c, sid)
	if len(evs) != 3 || evs[2].Action != "soul.activated" {
		t.Fatalf("audit after the VM came back = %+v", evs)
	}
	if err := json.Unmarshal(evs[2].Payload, &payload); err != nil || payload["from"] != "unreachable" || payload["run_id"] != back.ID {
		t.Fatalf("soul.activated payload = %s", evs[2].Payload)
	}
	if again := hello(); again.Phase != "Succeeded" || !showed(again) {
		t.Fatalf("README scenario after the VM came back = %s\n%s", again.Phase, describeSteps(again.Steps))
	}
	if n := len(soulEvents(t, c, sid)); n != 3 {
		t.Fatalf("%d contact events after a run on an active soul, want 3", n)
	}

	// The keeper keeps its connection to the soul between runs...
	so, _ = c.SoulGet(ctx, sid)
	vmAddr, vmPort := so.Address, so.Connection.Port
	if vmAddr == "" {
		vmAddr = so.PrimaryIP
	}
	if vmPort == 0 {
		vmPort = 22
	}
	if n := keeperConnsTo(t, k, vmAddr, vmPort); n != 1 {
		t.Fatalf("the keeper holds %d connections to the soul between runs, want 1 (warm)", n)
	}

	// Destroyed: no contact changes it. The VM's link goes down first, so
	// that the VM's end closing cannot close the keeper's: the keeper
	// must close it itself.
	vmNet(t, state, vmID, "link", "set", "eth0", "down")
	hosts := []any{map[string]any{"sid": sid, "vm_id": vmID}}
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "destroy-local.yaml"), File: "destroy-local.yaml", Input: map[string]any{"hosts": hosts}})
	if err != nil {
		t.Fatal(err)
	}
	if final := waitRun(t, c, run.ID); final.Phase != "Succeeded" {
		t.Fatalf("destroy = %s %+v", final.Phase, final.Error)
	}
	// ...and closes it when the soul is destroyed.
	if n := keeperConnsTo(t, k, vmAddr, vmPort); n != 0 {
		t.Fatalf("the keeper still holds %d connections to the destroyed soul", n)
	}
	gone := hello()
	so, _ = c.SoulGet(ctx, sid)
	if gone.Phase != "Failed" || gone.Steps[0].Targets[0].Error == nil || gone.Steps[0].Targets[0].Error.Code != "soul.destroyed" || so.Status != "destroyed" {
		t.Fatalf("run on a destroyed soul = %s, soul %+v\n%s", gone.Phase, so, describeSteps(gone.Steps))
	}
	if n := len(soulEvents(t, c, sid)); n != 3 {
		t.Fatalf("a destroyed soul's contact was audited: %d events", n)
	}
}

// TestSoulLastSeenOncePerRun: an active soul's last contact is recorded
// once per run, by the first step that runs a command on it, and with no
// audit event; the next run records it again.
func TestSoulLastSeenOncePerRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	const sid = "web-1.local.test"
	addSoul(t, c, sid, srv)
	ctx := context.Background()
	scenario := `steps:
  - {name: one, on: "` + sid + `", module: core.command.ran, params: {cmd: "true"}}
  - {name: two, on: "` + sid + `", module: core.command.ran, params: {cmd: "true"}}
  - {name: three, on: "` + sid + `", module: core.command.ran, params: {cmd: "true"}}
`
	var prev time.Time
	for i := range 2 {
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "three.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		final := waitRun(t, c, run.ID)
		if final.Phase != "Succeeded" {
			t.Fatalf("run %d = %s\n%s", i, final.Phase, describeSteps(final.Steps))
		}
		started := map[string]time.Time{}
		if err := c.RunEvents(ctx, run.ID, 0, func(e client.RunEvent) error {
			if e.Kind == "step.started" {
				started[e.Step] = e.At
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		so, err := c.SoulGet(ctx, sid)
		if err != nil || so.Status != "active" || so.LastSeenAt == nil {
			t.Fatalf("soul after run %d = %+v, %v", i, so, err)
		}
		// Written after step one's command ran and before step two began:
		// steps two and three did not write it again.
		if seen := *so.LastSeenAt; seen.Before(started["one"]) || seen.After(started["two"]) || !seen.After(prev) {
			t.Fatalf("run %d: last_seen_at %v, want after step one started (%v), before step two started (%v), after the previous run's %v", i, seen, started["one"], started["two"], prev)
		}
		prev = *so.LastSeenAt
	}
	if evs := soulEvents(t, c, sid); len(evs) != 0 {
		t.Fatalf("contact with an active soul was audited: %+v", evs)
	}
}

// TestSoulSaysHowItRunsCommands: a soul's record says how the keeper ran
// its commands — through the executor over SSH, or through its agent —
// once a command ran, and nothing before.
func TestSoulSaysHowItRunsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	port := freePort(t)
	soul := buildSoul(t, t.TempDir())
	k := serve(t, dir, "--config", keeperConfig(t, dir, fmt.Sprintf("agent_binary: %s\nnats:\n  listen: 127.0.0.1:%d\n  heartbeat: 300ms\n", soul, port)))
	c := adminClient(t, k, data)
	ctx := context.Background()
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "ssh.local.test", srv)
	agentSoul(t, c, config.Config{DataDir: data}, "agent.local.test", port, 300*time.Millisecond)
	for _, sid := range []string{"ssh.local.test", "agent.local.test"} {
		if so, err := c.SoulGet(ctx, sid); err != nil || so.Executor != "" {
			t.Fatalf("%s before any command: executor %q, %v", sid, so.Executor, err)
		}
	}
	sc := "steps:\n  - name: hello\n    on: [ssh.local.test, agent.local.test]\n    module: core.command.ran\n    params: {cmd: echo hello}\n"
	for range 2 {
		runScenario(t, c, "hello.yaml", sc, nil, time.Minute)
		for sid, want := range map[string]string{"ssh.local.test": "ssh: executor", "agent.local.test": "agent"} {
			if so, err := c.SoulGet(ctx, sid); err != nil || so.Executor != want {
				t.Fatalf("%s: executor %q, %v; want %q", sid, so.Executor, err, want)
			}
		}
	}
}

// TestTamperedExecutorReplacedAndAudited: the executor binary on a soul is
// replaced by someone on the host while the keeper is away; the next
// executor start finds its content is not its name's hash, uploads the
// keeper's binary over it, runs that, and audits soul.executor_replaced.
// The soul logs in as an unprivileged user whose executor directory is the
// test's own (sshd's SetEnv XDG_STATE_HOME), so no other test's executor
// is touched.
func TestTamperedExecutorReplacedAndAudited(t *testing.T) {
	t.Parallel()
	user := sshtest.NonRootUser(t)
	u, err := osuser.Lookup(user)
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp("/var/tmp", "soulstack-exec-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	soul := buildSoul(t, t.TempDir())
	k := serve(t, dir, "--config", keeperConfig(t, dir, "agent_binary: "+soul+"\n"))
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{User: user, Config: []string{"SetEnv XDG_STATE_HOME=" + state}})
	const sid = "tampered.local.test"
	addSoul(t, c, sid, srv)
	sc := "steps:\n  - name: hello\n    on: " + sid + "\n    module: core.command.ran\n    params: {cmd: echo hello}\n"
	runScenario(t, c, "hello.yaml", sc, nil, time.Minute)
	bins, _ := filepath.Glob(filepath.Join(state, "soulstack", "exec", "soul-*"))
	if len(bins) != 1 {
		t.Fatalf("executor binaries in the user's directory: %v", bins)
	}
	if err := os.WriteFile(bins[0]+".evil", []byte("#!/bin/sh\necho tampered\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(bins[0]+".evil", uid, gid)
	if err := os.Rename(bins[0]+".evil", bins[0]); err != nil {
		t.Fatal(err)
	}
	// The running executor keeps its (good) binary open: end it, so that
	// the next command starts the one on disk.
	pids := executorsOf(t, srv)
	if len(pids) == 0 {
		t.Fatal("no executor runs on the soul's sshd")
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	out := runScenario(t, c, "hello.yaml", sc, nil, time.Minute)
	if got := stdoutOf(t, out.Steps[0].Targets[0]); got != "hello\n" {
		t.Fatalf("after tampering the command printed %q", got)
	}
	want := strings.TrimPrefix(filepath.Base(bins[0]), "soul-")
	if b, _ := os.ReadFile(bins[0]); sha256Hex(b) != want {
		t.Fatal("the tampered binary was not replaced")
	}
	evs, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Action == "soul.executor_replaced" {
			n++
			if e.Object != "soul/"+sid || !strings.Contains(string(e.Payload), want) {
				t.Errorf("audit event %s %s %s", e.Action, e.Object, e.Payload)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d soul.executor_replaced events, want 1", n)
	}
	if so, _ := c.SoulGet(context.Background(), sid); so.Executor != "ssh: executor" {
		t.Fatalf("the soul's record says %q", so.Executor)
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// executorsOf returns the PIDs of the executors (soul exec --stdio) that
// srv's sshd started.
func executorsOf(t *testing.T, srv *sshtest.Server) []int {
	t.Helper()
	sshd, err := srv.ConnectionPIDs()
	if err != nil {
		t.Fatal(err)
	}
	ours := map[int]bool{}
	for _, p := range sshd {
		ours[p] = true
	}
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "exec\x00--stdio") {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		for p, i := pid, 0; p > 1 && i < 10; i++ {
			if ours[p] {
				out = append(out, pid)
				break
			}
			p = parentOf(p)
		}
	}
	return out
}

// parentOf is the parent PID of pid, 0 when it is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
