package hcloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/drivers/hcloud/hcloudfake"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/testlog"
)

func TestMain(m *testing.M) {
	drivertest.Main(m, "github.com/soulstack/soulstack/cmd/soul-cloud-hcloud")
}

const keeperID = "keeper-test-1"

// canary is the API token every test uses: it must never show up in the
// plugin's log or in an error.
const canary = "CANARY-hcloud-token-7f3a9c1e5b"

// fast is a provider config pointing the driver at f, polling and
// backing off quickly.
func provider(f *hcloudfake.Fake) driversdk.Provider {
	cfg, _ := json.Marshal(map[string]any{"endpoint": f.URL, "poll_interval": "2ms", "retry_base": "2ms", "max_retries": 5})
	return driversdk.Provider{Name: "hetzner", FQDNSuffix: "hc.test", Region: "fsn1", Config: cfg, Credentials: []byte(canary + "\n"), KeeperID: keeperID}
}

var profile = json.RawMessage(`{"server_type": "cx22", "image": "ubuntu-24.04", "networks": ["soulstack-net"], "labels": {"team": "web"}}`)

// env is a fake API and a plugin host running soul-cloud-hcloud.
type env struct {
	fake *hcloudfake.Fake
	host *plugin.Host
	d    driversdk.Driver
	prov driversdk.Provider
	log  *testlog.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := hcloudfake.New(canary)
	t.Cleanup(f.Close)
	dir := t.TempDir()
	if err := os.Symlink(drivertest.Plugin(t, "hcloud"), filepath.Join(dir, "soul-cloud-hcloud")); err != nil {
		t.Fatal(err)
	}
	lb := &testlog.Buffer{}
	h, err := plugin.New(plugin.Config{PluginDir: dir, Base: base.Base{Log: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		if strings.Contains(lb.String(), canary) {
			t.Errorf("the API token shows in the plugin's log:\n%s", lb.String())
		}
	})
	d, err := h.Driver(context.Background(), "hcloud")
	if err != nil {
		t.Fatal(err)
	}
	return &env{fake: f, host: h, d: d, prov: provider(f), log: lb}
}

// code returns err's driver code, failing when err is nil, not a
// *driversdk.Error, or carries the token.
func code(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), canary) {
		t.Fatalf("the API token shows in an error: %v", err)
	}
	var e *driversdk.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not a *driversdk.Error", err, err)
	}
	return e.Code
}

func (e *env) create(t *testing.T, requestID string, n int) []driversdk.VM {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d.hc.test", requestID, i)
	}
	vms, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: requestID, RunID: "run-1",
		Profile: profile, Count: n, Names: names, AuthorizedKeys: []string{"ssh-ed25519 AAAAkeeper keeper"}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(vms) != n {
		t.Fatalf("Create(%d) = %d VMs", n, len(vms))
	}
	return vms
}

// TestConformance runs driversdk's suite against the plugin and the fake.
func TestConformance(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(canary)
	t.Cleanup(f.Close)
	// Registered before the suite's own cleanup, so it runs after it.
	t.Cleanup(func() {
		if left := f.Servers(); len(left) != 0 {
			t.Errorf("servers left after the suite: %+v", left)
		}
	})
	drivertest.Run(t, drivertest.Options{
		Binary:     drivertest.Plugin(t, "hcloud"),
		Provider:   provider(f),
		Profile:    profile,
		ResizeSpec: json.RawMessage(`{"server_type": "cx32"}`),
		Count:      3,
		Timeout:    time.Minute,
	})
}

// TestCreateWaitsAndLabels: Create answers once the servers run (the fake
// keeps them initializing, then starting, and hides them from their first
// read), with their public and private addresses and the keeper's labels.
func TestCreateWaitsAndLabels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetActionReads(3)
	e.fake.SetBootReads(4)
	vms := e.create(t, "req-wait", 2)
	servers := e.fake.Servers()
	if len(servers) != 2 {
		t.Fatalf("fake has %d servers, want 2", len(servers))
	}
	for i, vm := range vms {
		s := servers[i]
		if vm.ID != fmt.Sprint(s.ID) || s.Status != "running" || vm.Attributes["status"] != "running" {
			t.Errorf("VM %d: id %s status %v; fake server %d %s", i, vm.ID, vm.Attributes["status"], s.ID, s.Status)
		}
		if vm.PrimaryIP != fmt.Sprintf("203.0.113.%d", s.ID%250) {
			t.Errorf("VM %d primary IP %q, want the server's public IPv4", i, vm.PrimaryIP)
		}
		// The keeper's id and the public/private addresses travel once
		// the wire carries them; TestInProcess checks the driver sets them.
		want := map[string]string{driversdk.TagRequestID: "req-wait", driversdk.TagRunID: "run-1", "soulstack.index": fmt.Sprint(i), "team": "web"}
		for k, v := range want {
			if s.Labels[k] != v {
				t.Errorf("server %d label %s = %q, want %q (labels %v)", s.ID, k, s.Labels[k], v, s.Labels)
			}
		}
		if vm.Tags[driversdk.TagRequestID] != "req-wait" || vm.Tags[driversdk.TagRunID] != "run-1" {
			t.Errorf("VM %d tags %v", i, vm.Tags)
		}
		if s.Name != fmt.Sprintf("req-wait-%d.hc.test", i) || vm.FQDN != s.Name {
			t.Errorf("server %d named %q, VM FQDN %q", s.ID, s.Name, vm.FQDN)
		}
		if !strings.Contains(s.UserData, "ssh-ed25519 AAAAkeeper keeper") {
			t.Errorf("server %d userdata does not trust the keeper's key:\n%s", s.ID, s.UserData)
		}
	}
}

// TestCrashSafeCreate: the plugin dies after the API accepted a create and
// before it answered; a new plugin process with the same request id
// returns the server made then, and no second one is made.
func TestCrashSafeCreate(t *testing.T) {
	t.Parallel()
	// hide 1: the label lookup misses the server and the name finds it;
	// hide 3: the name lookup misses it too, at first.
	for _, hide := range []int{1, 3} {
		t.Run(fmt.Sprintf("hidden from %d reads", hide), func(t *testing.T) {
			t.Parallel()
			testCrashSafeCreate(t, hide)
		})
	}
}

func testCrashSafeCreate(t *testing.T, hide int) {
	e := newEnv(t)
	e.fake.SetHideReads(hide)
	e.fake.HoldCreates()
	req := driversdk.CreateRequest{Provider: e.prov, RequestID: "req-crash", RunID: "run-1", Profile: profile, Count: 1, Names: []string{"crash-0.hc.test"}}
	done := make(chan error, 1)
	go func() {
		_, err := e.d.Create(context.Background(), req)
		done <- err
	}()
	accepted := <-e.fake.Accepted()
	pid := e.host.PID("hcloud")
	if pid == 0 {
		t.Fatal("no plugin process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	if c := code(t, <-done); c != driversdk.CodeDriverCrashed {
		t.Fatalf("Create during which the plugin died: code %s, want %s", c, driversdk.CodeDriverCrashed)
	}
	e.fake.Release()
	vms, err := e.d.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create again: %v", err)
	}
	if now := e.host.PID("hcloud"); now == pid || now == 0 {
		t.Fatalf("the retried Create ran in process %d, the killed one was %d", now, pid)
	}
	if len(vms) != 1 || vms[0].ID != fmt.Sprint(accepted) {
		t.Fatalf("Create again returned %+v, want the server %d made before the crash", vms, accepted)
	}
	if n := e.fake.Creates(); n != 1 {
		t.Fatalf("the fake made %d servers, want 1", n)
	}
	// And once more, now that the server is visible: the label lookup
	// finds it without a create call.
	again, err := e.d.Create(context.Background(), req)
	if err != nil || len(again) != 1 || again[0].ID != vms[0].ID || e.fake.Creates() != 1 {
		t.Fatalf("a third Create: %+v, %v; creates %d", again, err, e.fake.Creates())
	}
}

// TestDestroyNotOwned: Destroy of ids whose servers lack this keeper's
// labels fails with driver.not_owned and deletes nothing, not even the
// owned server in the same call.
func TestDestroyNotOwned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vms := e.create(t, "req-own", 1)
	foreign := e.fake.AddServer("db-prod", map[string]string{"team": "db"})
	otherKeeper := e.fake.AddServer("other-keeper", map[string]string{driversdk.TagRequestID: "req-x", driversdk.TagKeeper: "keeper-other"})
	for _, id := range []int64{foreign, otherKeeper} {
		err := e.d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{vms[0].ID, fmt.Sprint(id)}})
		if c := code(t, err); c != "driver.not_owned" {
			t.Fatalf("Destroy of server %d: code %s (%v), want driver.not_owned", id, c, err)
		}
		if _, err := e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{fmt.Sprint(id)}, Spec: json.RawMessage(`{"server_type": "cx32"}`)}); code(t, err) != "driver.not_owned" {
			t.Fatalf("Resize of server %d: %v, want driver.not_owned", id, err)
		}
	}
	if n := e.fake.Deletes(); n != 0 || len(e.fake.Servers()) != 3 {
		t.Fatalf("%d deletes, %d servers left; want none deleted", n, len(e.fake.Servers()))
	}
	for _, s := range e.fake.Servers() {
		if s.ServerType != "cx22" || s.Status != "running" {
			t.Errorf("server %d was touched: %+v", s.ID, s)
		}
	}
	// The foreign servers are not listed either.
	listed, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov})
	if err != nil || len(listed) != 1 || listed[0].ID != vms[0].ID {
		t.Fatalf("List = %+v, %v; want only %s", listed, err, vms[0].ID)
	}
}

// TestThrottling: the SDK's retryer rides out rate_limit_exceeded answers;
// when they do not stop, the error is driver.unavailable.
func TestThrottling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.Throttle(4)
	e.create(t, "req-throttle", 1)
	if n := e.fake.Throttled(); n != 4 {
		t.Fatalf("the fake throttled %d requests, want 4", n)
	}
	e.fake.Throttle(1000)
	_, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov})
	if c := code(t, err); c != driversdk.CodeDriverUnavailable || !strings.Contains(err.Error(), "rate_limit_exceeded") {
		t.Fatalf("List under endless throttling: %v, want %s naming rate_limit_exceeded", err, driversdk.CodeDriverUnavailable)
	}
	// max_retries 5: the first answer and five retries.
	if n := e.fake.Throttled(); n != 4+6 {
		t.Fatalf("throttled %d requests in all, want 10", n)
	}
}

// TestPartialFailure: the 4th of 5 creates meets the project's limit; the
// three servers made are deleted and the error is quota.exceeded.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetServerLimit(3)
	_, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: "req-quota", RunID: "run-1", Profile: profile, Count: 5})
	if c := code(t, err); c != "quota.exceeded" {
		t.Fatalf("Create over the limit: %v, want quota.exceeded", err)
	}
	if !strings.Contains(err.Error(), "create server 4 of 5") {
		t.Errorf("error %q does not say which create failed", err)
	}
	if left := e.fake.Servers(); len(left) != 0 || e.fake.Creates() != 3 || e.fake.Deletes() != 3 {
		t.Fatalf("after the failed create: servers %+v, %d creates, %d deletes; want 3 made and 3 deleted", left, e.fake.Creates(), e.fake.Deletes())
	}
}

// TestAuthFailed: a token the API refuses is auth.failed, and neither the
// error nor the log shows it.
func TestAuthFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := e.prov
	prov.Credentials = []byte(`{"token": "` + canary + `-wrong"}`)
	_, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, RequestID: "req-auth", Profile: profile, Count: 1})
	if c := code(t, err); c != "auth.failed" {
		t.Fatalf("Create with a bad token: %v, want auth.failed", err)
	}
	prov.Credentials = nil
	if _, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: prov}); code(t, err) != "auth.failed" {
		t.Fatalf("List without credentials: %v, want auth.failed", err)
	}
	prov.Credentials = []byte(`{"token": "` + canary + `", "extra": 1}`)
	if _, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: prov}); code(t, err) != "auth.failed" {
		t.Fatalf("List with malformed credentials: %v, want auth.failed", err)
	}
	if e.fake.Creates() != 0 {
		t.Fatal("a server was made with a bad token")
	}
}

// TestResize: a running server is powered off, changed and powered on
// (caused_downtime); a server of the requested type is unchanged.
func TestResize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vms := e.create(t, "req-resize", 2)
	ids := []string{vms[0].ID, vms[1].ID}
	res, err := e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: ids, Spec: json.RawMessage(`{"server_type": "cx32"}`)})
	if err != nil || len(res) != 2 {
		t.Fatalf("Resize: %+v, %v", res, err)
	}
	for _, r := range res {
		if !r.CausedDowntime || r.Unchanged {
			t.Errorf("resize of %s: %+v, want caused_downtime", r.VMID, r)
		}
	}
	for _, s := range e.fake.Servers() {
		if s.ServerType != "cx32" || s.Status != "running" {
			t.Errorf("server %d after resize: %+v", s.ID, s)
		}
	}
	reqs := strings.Join(e.fake.Requests(), "\n")
	for _, want := range []string{"/actions/poweroff", "/actions/change_type", "/actions/poweron"} {
		if !strings.Contains(reqs, want) {
			t.Errorf("no %s call", want)
		}
	}
	res, err = e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: ids, Spec: json.RawMessage(`{"server_type": "cx32"}`)})
	if err != nil || len(res) != 2 || !res[0].Unchanged || res[0].CausedDowntime || !res[1].Unchanged {
		t.Fatalf("Resize to the same type: %+v, %v", res, err)
	}
	_, err = e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: ids, Spec: json.RawMessage(`{"server_type": "cx42", "cores": 8}`)})
	if c := code(t, err); c != driversdk.CodeProfileInvalid {
		t.Fatalf("Resize with an unknown key: %v", err)
	}
}

// TestProfileStrict: unknown and bad keys of the profile and the provider
// config are profile.invalid naming the key, before any API call.
func TestProfileStrict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name, profile, config, field string
	}{
		{"unknown profile key", `{"server_type": "cx22", "image": "ubuntu-24.04", "flavor": "m1"}`, "", "flavor"},
		{"missing server_type", `{"image": "ubuntu-24.04"}`, "", "server_type"},
		{"bad label", `{"server_type": "cx22", "image": "ubuntu-24.04", "labels": {"soulstack.run_id": "x"}}`, "", "labels.soulstack.run_id"},
		{"wrong type", `{"server_type": "cx22", "image": "ubuntu-24.04", "networks": "net"}`, "", "networks"},
		{"no address", `{"server_type": "cx22", "image": "ubuntu-24.04", "enable_ipv4": false, "enable_ipv6": false}`, "", "networks"},
		{"unknown config key", string(profile), `{"endpoint": "http://127.0.0.1:1/v1", "regoin": "fsn1"}`, "config.regoin"},
		{"bad endpoint", string(profile), `{"endpoint": "ftp://x"}`, "config.endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prov := e.prov
			if c.config != "" {
				prov.Config = json.RawMessage(c.config)
			}
			err := e.d.ValidateProfile(context.Background(), prov, json.RawMessage(c.profile))
			var de *driversdk.Error
			if code(t, err) != driversdk.CodeProfileInvalid || !errors.As(err, &de) || de.Field != c.field {
				t.Fatalf("ValidateProfile: %v (field %q), want profile.invalid naming %q", err, de.Field, c.field)
			}
		})
	}
	// A network the project lacks is named too, at create.
	_, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: "req-net", Count: 1,
		Profile: json.RawMessage(`{"server_type": "cx22", "image": "ubuntu-24.04", "networks": ["nope"]}`)})
	var de *driversdk.Error
	if code(t, err) != driversdk.CodeProfileInvalid || !errors.As(err, &de) || de.Field != "networks[0]" {
		t.Fatalf("Create with a missing network: %v", err)
	}
	if strings.Contains(strings.Join(e.fake.Requests(), "\n"), "POST") {
		t.Fatal("an invalid profile reached the API with a POST")
	}
}

// TestTransientErrors: the SDK retries bad_gateway; a server_error it does
// not retry is driver.unavailable.
func TestTransientErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.FailNext(3, 502, "bad_gateway")
	if _, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov}); err != nil {
		t.Fatalf("List after 3 bad_gateway answers: %v", err)
	}
	e.fake.FailNext(1, 500, "server_error")
	_, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov})
	if c := code(t, err); c != driversdk.CodeDriverUnavailable {
		t.Fatalf("List after a server_error: %v, want %s", err, driversdk.CodeDriverUnavailable)
	}
}

// TestCreateDeadline: servers that do not come up before the call's
// deadline make Create answer driver.timeout (in time: the plugin is not
// killed) and stay labelled; the next Create with the request id adopts
// them once they run, making none.
func TestCreateDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetBootReads(1 << 30)
	req := driversdk.CreateRequest{Provider: e.prov, RequestID: "req-deadline", RunID: "run-1", Profile: profile, Count: 2}
	pid := e.host.PID("hcloud")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := e.d.Create(ctx, req)
	if c := code(t, err); c != driversdk.CodeDriverTimeout {
		t.Fatalf("Create of servers that never boot: %v, want %s", err, driversdk.CodeDriverTimeout)
	}
	if now := e.host.PID("hcloud"); now != pid {
		t.Fatalf("the plugin was killed (pid %d, now %d): it did not answer by its deadline", pid, now)
	}
	made := e.fake.Servers()
	if len(made) != 2 || e.fake.Deletes() != 0 {
		t.Fatalf("after the timeout: %+v, %d deletes; want both servers kept", made, e.fake.Deletes())
	}
	e.fake.FinishAll() // the servers boot, and the fake shows them all
	listed, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov, Tags: map[string]string{driversdk.TagRequestID: "req-deadline"}})
	if err != nil || len(listed) != 2 {
		t.Fatalf("List by the request id (what orphans sees): %+v, %v", listed, err)
	}
	vms, err := e.d.Create(context.Background(), req)
	if err != nil || len(vms) != 2 || vms[0].ID != fmt.Sprint(made[0].ID) || vms[1].ID != fmt.Sprint(made[1].ID) || e.fake.Creates() != 2 {
		t.Fatalf("Create again: %+v, %v (creates %d)", vms, err, e.fake.Creates())
	}
}

// TestCreateActionFails: when a create action ends in error, the servers
// of the request are deleted and the error is hcloud.action_failed.
func TestCreateActionFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.FailCreateActions()
	_, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: "req-actfail", RunID: "run-1", Profile: profile, Count: 2})
	if c := code(t, err); c != "hcloud.action_failed" {
		t.Fatalf("Create whose actions fail: %v, want hcloud.action_failed", err)
	}
	if left := e.fake.Servers(); len(left) != 0 || e.fake.Deletes() != 2 {
		t.Fatalf("after failed create actions: %+v, %d deletes; want both deleted", left, e.fake.Deletes())
	}
}

// TestResizeFailsRestarts: a type change the API refuses leaves the
// server running on its old type.
func TestResizeFailsRestarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vms := e.create(t, "req-resizefail", 1)
	e.fake.FailChangeType("invalid_server_type")
	_, err := e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{vms[0].ID}, Spec: json.RawMessage(`{"server_type": "cx32"}`)})
	if c := code(t, err); c != driversdk.CodeProfileInvalid {
		t.Fatalf("Resize refused by the API: %v, want %s", err, driversdk.CodeProfileInvalid)
	}
	s := e.fake.Servers()[0]
	if s.ServerType != "cx22" || s.Status != "running" {
		t.Fatalf("server after the refused resize: %+v, want running on cx22", s)
	}
}
