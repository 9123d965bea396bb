package aws_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/drivers/aws/awsfake"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/testlog"
)

// The canary credentials: none of them may appear in the plugin's log or
// in any error.
const (
	canaryKeyID   = "AKIACANARY0000000001"
	canarySecret  = "canary-secret-9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c"
	canarySession = "canary-session-token-0a1b2c3d4e5f"
	keeperID      = "keeper-aws-test-0001"
	profileJSON   = `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro", "subnet_id": "subnet-0123456789abcdef0",
		"security_group_ids": ["sg-0123456789abcdef0"], "key_name": "ops", "volume_size_gb": 20, "tags": {"team": "ops"}, "ssh_user": "admin"}`
)

func TestMain(m *testing.M) {
	drivertest.Main(m, "github.com/soulstack/soulstack/cmd/soul-cloud-aws")
}

// wireHas reports whether the plugin protocol's generated message type
// has field: the keeper id and the public/private addresses reach the
// plugin process only once the protocol carries them.
func wireHas(msg any, field string) bool {
	_, ok := reflect.TypeOf(msg).FieldByName(field)
	return ok
}

func credentialsJSON() []byte {
	b, _ := json.Marshal(map[string]string{"access_key_id": canaryKeyID, "secret_access_key": canarySecret, "session_token": canarySession})
	return b
}

// env is one test's fake EC2, plugin host and driver.
type env struct {
	fake *awsfake.Fake
	host *plugin.Host
	d    driversdk.Driver
	prov driversdk.Provider
	log  *testlog.Buffer
}

func providerFor(f *awsfake.Fake, extra map[string]any) driversdk.Provider {
	cfg := map[string]any{"endpoint": f.URL, "poll_interval": "10ms", "max_backoff": "20ms"}
	for k, v := range extra {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	return driversdk.Provider{Name: "aws", Region: "eu-central-1", FQDNSuffix: "aws.test", Config: raw,
		Credentials: credentialsJSON(), KeeperID: keeperID}
}

// newEnv starts a fake EC2 and the real plugin process pointed at it.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := awsfake.New()
	t.Cleanup(f.Close)
	f.SetAccessKey(canaryKeyID)
	dir := t.TempDir()
	if err := os.Symlink(drivertest.Plugin(t, "aws"), filepath.Join(dir, "soul-cloud-aws")); err != nil {
		t.Fatal(err)
	}
	log := &testlog.Buffer{}
	h, err := plugin.New(plugin.Config{PluginDir: dir, Base: base.Base{Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{fake: f, host: h, prov: providerFor(f, nil), log: log}
	t.Cleanup(func() {
		h.Close()
		e.checkNoCanary(t, "the plugin's log", log.String())
	})
	e.d, err = h.Driver(context.Background(), "aws")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) checkNoCanary(t *testing.T, what, s string) {
	t.Helper()
	for _, c := range []string{canarySecret, canarySession, canaryKeyID} {
		if strings.Contains(s, c) {
			t.Errorf("%s contains a credential (%q): %s", what, c, s)
		}
	}
}

func (e *env) create(t *testing.T, requestID string, names ...string) ([]driversdk.VM, error) {
	t.Helper()
	vms, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: requestID, RunID: "run-" + requestID,
		Profile: json.RawMessage(profileJSON), Count: len(names), Names: names})
	if err != nil {
		e.checkNoCanary(t, "Create's error", err.Error())
	}
	return vms, err
}

func wantCode(t *testing.T, err error, code string) *driversdk.Error {
	t.Helper()
	var de *driversdk.Error
	if !errors.As(err, &de) || de.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	return de
}

// TestConformance runs driversdk's conformance suite against the plugin
// and a fake EC2 whose instances are pending for two Describes and
// missing from the first one.
func TestConformance(t *testing.T) {
	t.Parallel()
	f := awsfake.New()
	t.Cleanup(f.Close)
	f.SetAccessKey(canaryKeyID)
	f.SetPending(2)
	f.SetHidden(1)
	// Registered before the suite's own cleanup, this runs after it.
	t.Cleanup(func() { checkSuiteInstances(t, f) })
	drivertest.Run(t, drivertest.Options{
		Binary:      drivertest.Plugin(t, "aws"),
		Provider:    providerFor(f, nil),
		Profile:     json.RawMessage(profileJSON),
		ResizeSpec:  json.RawMessage(`{"instance_type": "t3.small"}`),
		UnknownVMID: "i-0000000000000dead",
		Timeout:     time.Minute,
	})
}

// checkSuiteInstances checks what the conformance suite left in the fake:
// every instance and volume tagged, made from the profile, terminated.
func checkSuiteInstances(t *testing.T, f *awsfake.Fake) {
	insts := f.Instances()
	if len(insts) < 2 {
		t.Fatalf("the fake made %d instances", len(insts))
	}
	for _, inst := range insts {
		for _, tags := range []map[string]string{inst.Tags, inst.VolumeTags} {
			if tags["soulstack:request_id"] == "" || tags["soulstack:run_id"] == "" || tags["Name"] == "" || tags["team"] != "ops" {
				t.Errorf("instance %s (or its volume) lacks the driver's tags: %v", inst.ID, tags)
			}
			if _, ok := tags["soulstack:keeper"]; !ok {
				t.Errorf("instance %s (or its volume) lacks the soulstack:keeper tag: %v", inst.ID, tags)
			}
		}
		if inst.State != "shutting-down" && inst.State != "terminated" {
			t.Errorf("instance %s is %s after the suite", inst.ID, inst.State)
		}
		if inst.VolumeSize != 20 || inst.KeyName != "ops" || inst.SubnetID != "subnet-0123456789abcdef0" {
			t.Errorf("instance %s was not made from the profile: %+v", inst.ID, inst)
		}
	}
}

// TestCreateAddressesAndTags: Create waits through pending and a Describe
// that misses the new instance, and reports the instance's addresses and
// the keeper's tags.
func TestCreateAddressesAndTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetPending(3)
	e.fake.SetHidden(2)
	vms, err := e.create(t, "req-addr", "web-0.aws.test")
	if err != nil {
		t.Fatal(err)
	}
	inst := e.fake.Instances()[0]
	vm := vms[0]
	if vm.ID != inst.ID || vm.FQDN != "web-0.aws.test" || vm.PrimaryIP != inst.PublicIP || inst.PublicIP == "" {
		t.Fatalf("VM %+v, fake instance %+v", vm, inst)
	}
	if inst.State != "running" {
		t.Fatalf("Create returned before the instance ran: %s", inst.State)
	}
	if vm.Tags[driversdk.TagRequestID] != "req-addr" || vm.Tags[driversdk.TagRunID] != "run-req-addr" {
		t.Fatalf("VM tags %v", vm.Tags)
	}
	if wireHas(clouddriverv1.VM{}, "PublicIp") {
		if vm.PublicIP != inst.PublicIP || vm.PrivateIP != inst.PrivateIP || len(vm.Addresses) != 2 {
			t.Fatalf("VM addresses %+v, fake instance public %s private %s", vm, inst.PublicIP, inst.PrivateIP)
		}
	}
	if wireHas(clouddriverv1.Provider{}, "KeeperId") {
		if inst.Tags["soulstack:keeper"] != keeperID || vm.Tags[driversdk.TagKeeper] != keeperID {
			t.Fatalf("keeper tag %q on the instance, %q reported, want %q", inst.Tags["soulstack:keeper"], vm.Tags[driversdk.TagKeeper], keeperID)
		}
	}
}

// TestCrashSafety: the fake accepts a RunInstances and holds its answer;
// the plugin process is killed; a new process given the same request
// returns the instance the first one made, through its idempotency token
// (the fake hides the new instance from the tag lookup), and makes the
// second VM only once.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetHidden(1)
	accepted := e.fake.HoldNextRun()
	done := make(chan error, 1)
	go func() {
		_, err := e.create(t, "req-crash", "db-0.aws.test", "db-1.aws.test")
		done <- err
	}()
	<-accepted
	pid := e.host.PID("aws")
	if pid == 0 {
		t.Fatal("no plugin process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	wantCode(t, <-done, driversdk.CodeDriverCrashed)
	before := e.fake.Instances()
	if len(before) != 1 {
		t.Fatalf("the fake has %d instances after the crash, want the 1 it accepted", len(before))
	}

	vms, err := e.create(t, "req-crash", "db-0.aws.test", "db-1.aws.test")
	if err != nil {
		t.Fatalf("Create after the crash: %v", err)
	}
	if now := e.host.PID("aws"); now == pid || now == 0 {
		t.Fatalf("no new plugin process (pid %d, was %d)", now, pid)
	}
	after := e.fake.Instances()
	if len(after) != 2 || len(vms) != 2 {
		t.Fatalf("after the retry the fake has %d instances and Create returned %d VMs, want 2 and 2", len(after), len(vms))
	}
	if vms[0].ID != before[0].ID || vms[1].ID != after[1].ID {
		t.Fatalf("the retry returned %s, %s; the fake made %s, %s", vms[0].ID, vms[1].ID, after[0].ID, after[1].ID)
	}

	// A third Create of the same request, naming the VMs otherwise, finds
	// them by tag and makes nothing either.
	e.fake.SetHidden(0)
	again, err := e.create(t, "req-crash", "x-0.aws.test", "x-1.aws.test")
	if err != nil || len(again) != 2 || again[0].ID != vms[0].ID || again[1].ID != vms[1].ID || len(e.fake.Instances()) != 2 {
		t.Fatalf("a third Create: %v, %v; the fake has %d instances", again, err, len(e.fake.Instances()))
	}
}

// TestTokenAfterTermination: a request whose instances were terminated
// (a failed create that was cleaned up) and is retried gets new
// instances, not the terminated ones its tokens name.
func TestTokenAfterTermination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, err := e.create(t, "req-again", "a-0.aws.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{first[0].ID}}); err != nil {
		t.Fatal(err)
	}
	second, err := e.create(t, "req-again", "a-0.aws.test")
	if err != nil {
		t.Fatal(err)
	}
	if second[0].ID == first[0].ID || e.fake.Live() != 1 {
		t.Fatalf("the retry returned %s (first %s); %d live instances", second[0].ID, first[0].ID, e.fake.Live())
	}
}

// TestNotOwned: Destroy and Resize refuse instances without this keeper's
// tag (a user's, another keeper's) and change nothing, not even the
// owned instance named with them.
func TestNotOwned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ours, err := e.create(t, "req-own", "own-0.aws.test")
	if err != nil {
		t.Fatal(err)
	}
	users := e.fake.Put(map[string]string{"Name": "precious"})
	others := e.fake.Put(map[string]string{"Name": "theirs", "soulstack:keeper": "another-keeper", "soulstack:request_id": "r", "soulstack:run_id": "r"})
	for _, foreign := range []string{users, others} {
		err := e.d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{ours[0].ID, foreign}})
		wantCode(t, err, "driver.not_owned")
		if !strings.Contains(err.Error(), foreign) {
			t.Errorf("the error does not name %s: %v", foreign, err)
		}
		_, err = e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{foreign}, Spec: json.RawMessage(`{"instance_type": "t3.large"}`)})
		wantCode(t, err, "driver.not_owned")
	}
	if n := e.fake.Calls("TerminateInstances") + e.fake.Calls("StopInstances") + e.fake.Calls("ModifyInstanceAttribute"); n != 0 {
		t.Fatalf("the driver changed instances (%d calls) though it refused", n)
	}
	for _, inst := range e.fake.Instances() {
		if inst.State != "running" || inst.InstanceType != "t3.micro" {
			t.Errorf("instance %s is %s %s", inst.ID, inst.State, inst.InstanceType)
		}
	}
	// List shows only this keeper's instances.
	listed, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov})
	if err != nil || len(listed) != 1 || listed[0].ID != ours[0].ID {
		t.Fatalf("List: %+v, %v", listed, err)
	}
}

// TestThrottling: the SDK's retryer rides out throttled answers; past its
// attempts the call fails with driver.unavailable.
func TestThrottling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.Throttle(4)
	if _, err := e.create(t, "req-throttle", "t-0.aws.test"); err != nil {
		t.Fatalf("Create through 4 throttled answers: %v", err)
	}
	if got := e.fake.Throttled(); got != 4 {
		t.Fatalf("the fake throttled %d requests, want 4", got)
	}
	e.prov = providerFor(e.fake, map[string]any{"max_attempts": 3})
	e.fake.Throttle(100)
	_, err := e.d.List(context.Background(), driversdk.ListRequest{Provider: e.prov})
	wantCode(t, err, driversdk.CodeDriverUnavailable)
	if got := e.fake.Throttled(); got != 4+3 {
		t.Fatalf("the fake throttled %d requests, want 4 + 3 attempts", got)
	}
}

// TestErrors: EC2's errors become the driver's codes, and no error carries
// a credential.
func TestErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(*env)
		code  string
		field string
	}{
		{"quota", func(e *env) { e.fake.FailNext("RunInstances", 1, 400, "VcpuLimitExceeded") }, "quota.exceeded", "count"},
		{"bad credentials", func(e *env) { e.fake.SetAccessKey("AKIAOTHER00000000000") }, "auth.failed", ""},
		{"unauthorized", func(e *env) { e.fake.FailNext("RunInstances", 1, 403, "UnauthorizedOperation") }, "auth.failed", ""},
		{"unknown AMI", func(e *env) { e.fake.FailNext("RunInstances", 1, 400, "InvalidAMIID.NotFound") }, "profile.invalid", "image_id"},
		{"capacity", func(e *env) { e.fake.FailNext("RunInstances", 100, 500, "InsufficientInstanceCapacity") }, "driver.unavailable", ""},
		{"5xx past the retryer", func(e *env) {
			e.prov = providerFor(e.fake, map[string]any{"max_attempts": 2})
			e.fake.FailNext("RunInstances", 2, 503, "Unavailable")
		}, "driver.unavailable", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.setup(e)
			_, err := e.create(t, "req-err", "e-0.aws.test")
			de := wantCode(t, err, tc.code)
			if de.Field != tc.field {
				t.Errorf("field %q, want %q", de.Field, tc.field)
			}
			if e.fake.Live() != 0 {
				t.Errorf("%d instances left after a failed create", e.fake.Live())
			}
		})
	}
	t.Run("transient 5xx is retried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.fake.FailNext("RunInstances", 2, 503, "Unavailable")
		if _, err := e.create(t, "req-5xx", "f-0.aws.test"); err != nil {
			t.Fatalf("Create through two 503 answers: %v", err)
		}
		if got := e.fake.Calls("RunInstances"); got != 3 {
			t.Fatalf("%d RunInstances calls, want 3", got)
		}
	})
}

// TestPartialFailure: the 4th of 5 VMs hits the quota; the driver
// terminates the 3 it made and names them, so no billed instance is left
// unknown.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetInstanceLimit(3)
	_, err := e.create(t, "req-part", "p-0.aws.test", "p-1.aws.test", "p-2.aws.test", "p-3.aws.test", "p-4.aws.test")
	wantCode(t, err, "quota.exceeded")
	insts := e.fake.Instances()
	if len(insts) != 3 {
		t.Fatalf("the fake made %d instances, want 3", len(insts))
	}
	for _, inst := range insts {
		if inst.State != "shutting-down" && inst.State != "terminated" {
			t.Errorf("instance %s was left %s", inst.ID, inst.State)
		}
		if !strings.Contains(err.Error(), inst.ID) {
			t.Errorf("the error does not name %s: %v", inst.ID, err)
		}
	}
	if !strings.Contains(err.Error(), "terminated") {
		t.Errorf("the error does not say the instances were terminated: %v", err)
	}
}

// TestResize: a running instance is stopped, changed and started
// (caused_downtime); the same spec again is unchanged; a type EC2 refuses
// is profile.invalid and the instance is started again.
func TestResize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetPending(1)
	vms, err := e.create(t, "req-resize", "r-0.aws.test")
	if err != nil {
		t.Fatal(err)
	}
	resize := func(typ string) ([]driversdk.ResizeResult, error) {
		return e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{vms[0].ID},
			Spec: json.RawMessage(`{"instance_type": "` + typ + `"}`)})
	}
	res, err := resize("t3.large")
	if err != nil || len(res) != 1 || !res[0].CausedDowntime || res[0].Unchanged || res[0].VMID != vms[0].ID {
		t.Fatalf("Resize: %+v, %v", res, err)
	}
	inst := e.fake.Instances()[0]
	if inst.InstanceType != "t3.large" || inst.State != "running" {
		t.Fatalf("after Resize the instance is %s %s", inst.State, inst.InstanceType)
	}
	res, err = resize("t3.large")
	if err != nil || len(res) != 1 || !res[0].Unchanged || res[0].CausedDowntime {
		t.Fatalf("Resize to the same type: %+v, %v", res, err)
	}
	if got := e.fake.Calls("StopInstances"); got != 1 {
		t.Fatalf("%d StopInstances calls, want 1", got)
	}
	e.fake.FailNext("ModifyInstanceAttribute", 1, 400, "InvalidInstanceType")
	_, err = resize("t3.huge")
	wantCode(t, err, "profile.invalid")
	if got := e.fake.Calls("StartInstances"); got != 2 {
		t.Fatalf("%d StartInstances calls, want 2 (the refused resize starts the instance again)", got)
	}
	_, err = e.d.Resize(context.Background(), driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{vms[0].ID}, Spec: json.RawMessage(`{"memory_mb": 512}`)})
	de := wantCode(t, err, "profile.invalid")
	if de.Field != "memory_mb" {
		t.Fatalf("field %q", de.Field)
	}
}

// TestValidateProfile: the profile, provider config and credentials are
// decoded strictly, the offending key named; no error quotes a
// credential.
func TestValidateProfile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := driversdk.Provider{Name: "aws", Region: "eu-central-1", Config: json.RawMessage(`{}`), Credentials: credentialsJSON()}
	with := func(f func(*driversdk.Provider)) driversdk.Provider { p := good; f(&p); return p }
	cases := []struct {
		name    string
		prov    driversdk.Provider
		profile string
		field   string
	}{
		{"unknown key", good, `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro", "flavor": "big"}`, "flavor"},
		{"no image", good, `{"instance_type": "t3.micro"}`, "image_id"},
		{"bad image", good, `{"image_id": "debian-12", "instance_type": "t3.micro"}`, "image_id"},
		{"no type", good, `{"image_id": "ami-0123456789abcdef0"}`, "instance_type"},
		{"bad group", good, `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro", "security_group_ids": ["default"]}`, "security_group_ids[0]"},
		{"bad volume", good, `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro", "volume_size_gb": "big"}`, "volume_size_gb"},
		{"reserved tag", good, `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro", "tags": {"soulstack:keeper": "x"}}`, "tags.soulstack:keeper"},
		{"unknown config key", with(func(p *driversdk.Provider) { p.Config = json.RawMessage(`{"zone": "a"}`) }), `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro"}`, "config.zone"},
		{"no region", with(func(p *driversdk.Provider) { p.Region = "" }), `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro"}`, "region"},
		{"no credentials", with(func(p *driversdk.Provider) { p.Credentials = nil }), `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro"}`, "credentials_ref"},
		{"credentials with an unknown key", with(func(p *driversdk.Provider) {
			p.Credentials = []byte(`{"access_key_id": "` + canaryKeyID + `", "secret_access_key": "` + canarySecret + `", "secret": "` + canarySecret + `"}`)
		}), `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro"}`, "credentials_ref"},
		{"credentials not JSON", with(func(p *driversdk.Provider) { p.Credentials = []byte(canarySecret) }), `{"image_id": "ami-0123456789abcdef0", "instance_type": "t3.micro"}`, "credentials_ref"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := e.d.ValidateProfile(context.Background(), tc.prov, json.RawMessage(tc.profile))
			de := wantCode(t, err, driversdk.CodeProfileInvalid)
			if de.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", de.Field, tc.field, err)
			}
			e.checkNoCanary(t, "ValidateProfile's error", err.Error())
		})
	}
	if err := e.d.ValidateProfile(context.Background(), good, json.RawMessage(profileJSON)); err != nil {
		t.Fatalf("the example profile: %v", err)
	}
}

// TestDeadline: an instance that never leaves pending makes Create give
// up at the keeper's deadline with driver.timeout, naming the instance
// it left (tagged, so a retry adopts it), and the plugin process answers
// in time instead of being killed.
func TestDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetPending(1 << 30)
	if _, err := e.d.Capabilities(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := e.host.PID("aws")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := e.d.Create(ctx, driversdk.CreateRequest{Provider: e.prov, RequestID: "req-slow", RunID: "run-slow",
		Profile: json.RawMessage(profileJSON), Count: 1})
	wantCode(t, err, driversdk.CodeDriverTimeout)
	insts := e.fake.Instances()
	if len(insts) != 1 || insts[0].State != "pending" {
		t.Fatalf("fake instances %+v", insts)
	}
	if !strings.Contains(err.Error(), insts[0].ID) {
		t.Errorf("the timeout does not name the instance left, %s: %v", insts[0].ID, err)
	}
	if now := e.host.PID("aws"); now != pid {
		t.Fatalf("the plugin process was replaced (%d, was %d): it did not honour the deadline", now, pid)
	}
	// The retry, with time enough, adopts the instance.
	e.fake.FinishPending()
	vms, err := e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, RequestID: "req-slow", RunID: "run-slow",
		Profile: json.RawMessage(profileJSON), Count: 1})
	if err != nil || len(vms) != 1 || vms[0].ID != insts[0].ID || len(e.fake.Instances()) != 1 {
		t.Fatalf("retry: %+v, %v", vms, err)
	}
}

// TestRetryWithOtherNames: a retry after a crash whose parameters differ
// (other names, so EC2 answers IdempotentParameterMismatch to the reused
// token) while the tag lookup misses the instance finds it by its
// client-token and makes no second one.
func TestRetryWithOtherNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetHidden(1)
	accepted := e.fake.HoldNextRun()
	done := make(chan error, 1)
	go func() {
		_, err := e.create(t, "req-rename", "n-0.aws.test")
		done <- err
	}()
	<-accepted
	if err := syscall.Kill(e.host.PID("aws"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-done, driversdk.CodeDriverCrashed)
	vms, err := e.create(t, "req-rename", "m-0.aws.test")
	if err != nil {
		t.Fatalf("retry with other names: %v", err)
	}
	insts := e.fake.Instances()
	if len(insts) != 1 || len(vms) != 1 || vms[0].ID != insts[0].ID {
		t.Fatalf("retry returned %+v; the fake has %d instances", vms, len(insts))
	}
	if e.fake.Calls("RunInstances") != 2 {
		t.Fatalf("%d RunInstances calls, want 2 (the held one and the mismatched retry)", e.fake.Calls("RunInstances"))
	}
}
