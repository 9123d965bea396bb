package plugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/logctx"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/promtest"
	"github.com/soulstack/soulstack/internal/secret"
)

func TestMain(m *testing.M) {
	drivertest.Main(m, "github.com/soulstack/soulstack/internal/plugin/internal/fakecloud/soul-cloud-fake")
}

// record is one captured log record, flattened to text.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r record) String() string { return fmt.Sprintf("%s %q %v", r.level, r.msg, r.attrs) }

// capture is a slog handler that keeps every record.
type capture struct {
	mu      sync.Mutex
	records []record
	attrs   []slog.Attr
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	add := func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve().String()
		return true
	}
	for _, a := range c.attrs {
		add(a)
	}
	r.Attrs(add)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, rec)
	return nil
}

func (c *capture) WithAttrs(attrs []slog.Attr) slog.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &captureView{c: c, attrs: append(slices.Clone(c.attrs), attrs...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c }

// captureView is a capture with attributes of its own.
type captureView struct {
	c     *capture
	attrs []slog.Attr
}

func (v *captureView) Enabled(context.Context, slog.Level) bool { return true }
func (v *captureView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.c.Handle(ctx, r)
}
func (v *captureView) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captureView{c: v.c, attrs: append(slices.Clone(v.attrs), attrs...)}
}
func (v *captureView) WithGroup(string) slog.Handler { return v }

// all returns the records so far.
func (c *capture) all() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.records)
}

// text returns every record as one text, for substring checks.
func (c *capture) text() string {
	var b strings.Builder
	for _, r := range c.all() {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// newHost returns a host over the test plugin dir, closed at cleanup, and
// the capture its logs go to.
func newHost(t *testing.T, cfg plugin.Config) (*plugin.Host, *capture) {
	t.Helper()
	logs := &capture{}
	cfg.PluginDir = drivertest.PluginDir(t)
	cfg.Log = slog.New(logctx.Handler(logs)) // as the keeper's logger
	h, err := plugin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h, logs
}

// fake returns the fake driver of h.
func fake(t *testing.T, h *plugin.Host) driversdk.Driver {
	t.Helper()
	d, err := h.Driver(context.Background(), "fake")
	if err != nil {
		t.Fatalf("Driver(fake): %v", err)
	}
	return d
}

// provider returns a fake-cloud provider with config cfg.
func provider(cfg string) driversdk.Provider {
	return driversdk.Provider{Name: "fake", FQDNSuffix: "fake.test", Config: json.RawMessage(cfg)}
}

// wantCode fails t unless err is a *driversdk.Error with code.
func wantCode(t *testing.T, err error, code string) *driversdk.Error {
	t.Helper()
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v (%T), want code %s", err, err, code)
	}
	return e
}

// gone reports whether no process with pid exists any more.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// waitGone waits for pid to be gone.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits for a record that match accepts: plugin log lines arrive
// independently of call results.
func waitLog(t *testing.T, logs *capture, match func(record) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if slices.ContainsFunc(logs.all(), match) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such record in the keeper log:\n%s", logs.text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDriverRoundTrip(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	ctx := context.Background()
	prov := provider(`{}`)

	caps, err := d.Capabilities(ctx)
	if err != nil || caps != (driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}) {
		t.Fatalf("Capabilities = %+v, %v", caps, err)
	}
	if err := d.ValidateProfile(ctx, prov, json.RawMessage(`{"cpus": 1, "memory_mb": 512}`)); err != nil {
		t.Fatalf("ValidateProfile: %v", err)
	}
	e := wantCode(t, d.ValidateProfile(ctx, prov, json.RawMessage(`{"cpus": 1, "disk_gb": 5}`)), driversdk.CodeProfileInvalid)
	if e.Field != "disk_gb" {
		t.Fatalf("Field = %q, want disk_gb (%v)", e.Field, e)
	}

	vms, err := d.Create(ctx, driversdk.CreateRequest{
		Provider: prov, RequestID: "req-1", RunID: "run-1", Count: 2,
		Profile:  json.RawMessage(`{"cpus": 2, "memory_mb": 1024}`),
		Names:    []string{"web-0.fake.test", "web-1.fake.test"},
		Userdata: []string{"#cloud-config\n", "#cloud-config\n"},
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(vms) != 2 || vms[0].FQDN != "web-0.fake.test" || vms[1].FQDN != "web-1.fake.test" || vms[0].ID == vms[1].ID {
		t.Fatalf("Create = %+v", vms)
	}
	if vms[0].Tags[driversdk.TagRequestID] != "req-1" || vms[0].Tags[driversdk.TagRunID] != "run-1" {
		t.Fatalf("tags = %v", vms[0].Tags)
	}
	if vms[0].Attributes["cpus"] != float64(2) || vms[0].Attributes["fake"] != true {
		t.Fatalf("attributes = %v", vms[0].Attributes)
	}

	listed, err := d.List(ctx, driversdk.ListRequest{Provider: prov, Tags: map[string]string{driversdk.TagRequestID: "req-1"}})
	if err != nil || len(listed) != 2 {
		t.Fatalf("List = %+v, %v", listed, err)
	}
	res, err := d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID}, Spec: json.RawMessage(`{"cpus": 1, "memory_mb": 256}`)})
	if err != nil || len(res) != 1 || res[0].VMID != vms[0].ID || !res[0].CausedDowntime || res[0].Unchanged {
		t.Fatalf("Resize = %+v, %v", res, err)
	}
	// The same size again: the driver's "unchanged" crosses the wire.
	res, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID}, Spec: json.RawMessage(`{"cpus": 1, "memory_mb": 256}`)})
	if err != nil || len(res) != 1 || !res[0].Unchanged || res[0].CausedDowntime {
		t.Fatalf("Resize to the same size = %+v, %v", res, err)
	}

	ids := []string{vms[0].ID, vms[1].ID}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids}); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids}); err != nil {
		t.Fatalf("Destroy again: %v", err)
	}
	wantCode(t, d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{"fake-nope"}}), driversdk.CodeVMNotFound)
	if !errors.Is(d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{"fake-nope"}}), &driversdk.Error{Code: driversdk.CodeVMNotFound}) {
		t.Fatal("errors.Is does not match a bare vm.not_found")
	}
	listed, err = d.List(ctx, driversdk.ListRequest{Provider: prov, Tags: map[string]string{driversdk.TagRequestID: "req-1"}})
	if err != nil || len(listed) != 0 {
		t.Fatalf("List after Destroy = %+v, %v", listed, err)
	}
}

// TestAddressesAndKeeperIDCrossTheWire: the keeper id reaches the driver
// (it comes back as the VM's soulstack.keeper tag) and the VM's public,
// private and other addresses come back (protocol 2); a VM made for
// another keeper deployment is refused with driver.not_owned.
func TestAddressesAndKeeperIDCrossTheWire(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	ctx := context.Background()
	mine, theirs := provider(`{}`), provider(`{}`)
	mine.KeeperID, theirs.KeeperID = "keeper-mine", "keeper-theirs"

	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: mine, RequestID: "req-addr", RunID: "run-addr", Count: 1})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create = %+v, %v", vms, err)
	}
	vm := vms[0]
	if vm.Tags[driversdk.TagKeeper] != "keeper-mine" {
		t.Fatalf("tags = %v, want %s=keeper-mine", vm.Tags, driversdk.TagKeeper)
	}
	if !strings.HasPrefix(vm.PublicIP, "203.0.113.") || !strings.HasPrefix(vm.PrivateIP, "192.0.2.") || vm.PrimaryIP != vm.PublicIP {
		t.Fatalf("addresses: primary %q public %q private %q", vm.PrimaryIP, vm.PublicIP, vm.PrivateIP)
	}
	want := []driversdk.Address{
		{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: "fake-net"},
		{IP: vm.PublicIP, Kind: driversdk.AddressPublic},
	}
	if !slices.Equal(vm.Addresses, want) {
		t.Fatalf("Addresses = %+v, want %+v", vm.Addresses, want)
	}
	listed, err := d.List(ctx, driversdk.ListRequest{Provider: mine, Tags: map[string]string{driversdk.TagKeeper: "keeper-mine"}})
	if err != nil || len(listed) != 1 || !slices.Equal(listed[0].Addresses, want) {
		t.Fatalf("List = %+v, %v", listed, err)
	}

	e := wantCode(t, d.Destroy(ctx, driversdk.DestroyRequest{Provider: theirs, VMIDs: []string{vm.ID}}), driversdk.CodeNotOwned)
	if !strings.Contains(e.Message, vm.ID) {
		t.Fatalf("message %q does not name the VM", e.Message)
	}
	_, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: theirs, VMIDs: []string{vm.ID}, Spec: json.RawMessage(`{"cpus": 4}`)})
	wantCode(t, err, driversdk.CodeNotOwned)
	if listed, _ := d.List(ctx, driversdk.ListRequest{Provider: mine}); len(listed) != 1 || listed[0].Attributes["cpus"] != float64(0) {
		t.Fatalf("a refused call changed the VM: %+v", listed)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: mine, VMIDs: []string{vm.ID}}); err != nil {
		t.Fatalf("Destroy by its own keeper: %v", err)
	}
}

func TestDriverErrorKeepsCodeMessageAndField(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	err := d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: provider(`{"fail": "Destroy"}`), VMIDs: []string{"x"}})
	e := wantCode(t, err, "quota.exceeded")
	if e.Field != "count" || e.Message != "the fake cloud's quota is used up" {
		t.Fatalf("error = %#v", e)
	}
	// A bad config key is reported with its field, prefixed by "config".
	e = wantCode(t, d.ValidateProfile(context.Background(), provider(`{"explode": true}`), nil), driversdk.CodeProfileInvalid)
	if e.Field != "config.explode" {
		t.Fatalf("Field = %q", e.Field)
	}
}

func TestProcessIsReused(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	if pid == 0 {
		t.Fatal("no process after Driver")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 20 {
		wg.Go(func() {
			_, err := d.Capabilities(context.Background())
			errs <- err
			_, err = d.Create(context.Background(), driversdk.CreateRequest{Provider: provider(`{}`), Count: 1})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := h.PID("fake"); got != pid {
		t.Fatalf("PID changed from %d to %d", pid, got)
	}
	// A second Driver for the same name shares the process.
	fake(t, h)
	if got := h.PID("fake"); got != pid {
		t.Fatalf("PID changed from %d to %d", pid, got)
	}
}

func TestVersionMismatchIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode string
		want       []string
	}{
		// A driver built before protocol 2 (no addresses, no keeper id).
		{"old", "v1", []string{"protocol version 1;", "this keeper speaks version 2", "older than this keeper"}},
		{"newer", "future", []string{"protocol version 3;", "this keeper speaks version 2", "newer than this keeper"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, plugin.Config{Env: []string{"SOULSTACK_FAKECLOUD_HANDSHAKE=" + tc.mode}})
			_, err := h.Driver(context.Background(), "fake")
			e := wantCode(t, err, driversdk.CodeDriverIncompatible)
			for _, want := range tc.want {
				if !strings.Contains(e.Message, want) {
					t.Fatalf("message %q lacks %q", e.Message, want)
				}
			}
			if h.PID("fake") != 0 {
				t.Fatal("an incompatible plugin is left running")
			}
		})
	}
}

func TestNotAPlugin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ mode, want string }{
		{"garbage", "Unrecognized remote plugin message"},
		{"exit", "fake cloud: refusing to start"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, plugin.Config{Env: []string{"SOULSTACK_FAKECLOUD_HANDSHAKE=" + tc.mode}})
			_, err := h.Driver(context.Background(), "fake")
			e := wantCode(t, err, driversdk.CodeDriverIncompatible)
			if !strings.Contains(e.Message, tc.want) {
				t.Fatalf("message %q lacks %q", e.Message, tc.want)
			}
		})
	}
}

func TestMissingBinary(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	for _, name := range []string{"nosuchdriver", "../fake", "Fake", ""} {
		_, err := h.Driver(context.Background(), name)
		wantCode(t, err, driversdk.CodeDriverNotFound)
	}
}

func TestCrashMidCallThenRestart(t *testing.T) {
	t.Parallel()
	h, logs := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	start := time.Now()
	_, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: provider(`{"crash": "Create"}`), Count: 1})
	e := wantCode(t, err, driversdk.CodeDriverCrashed)
	if !strings.Contains(e.Message, "exited") {
		t.Fatalf("message = %q", e.Message)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("crash took %s to report", time.Since(start))
	}
	waitGone(t, pid)
	caps, err := d.Capabilities(context.Background())
	if err != nil || !caps.Listable {
		t.Fatalf("Capabilities after the crash = %+v, %v", caps, err)
	}
	if got := h.PID("fake"); got == 0 || got == pid {
		t.Fatalf("PID after restart = %d (was %d)", got, pid)
	}
	waitLog(t, logs, func(r record) bool { return r.msg == "crashing on purpose" && r.level == slog.LevelError })
	// The host's metrics count both calls by their result, and time them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.Collectors()...)
	for series, want := range map[string]float64{
		`soulstack_driver_calls_total{code="driver.crashed",driver="fake",method="Create"}`: 1,
		`soulstack_driver_calls_total{code="ok",driver="fake",method="Capabilities"}`:       1,
		`soulstack_driver_call_duration_seconds_count{driver="fake",method="Create"}`:       1,
	} {
		if got := promtest.Gathered(t, reg, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

func TestProcessDeadBetweenCallsIsRestarted(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.PID("fake") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the host did not notice the process died")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := d.Capabilities(context.Background()); err != nil {
		t.Fatalf("Capabilities after the process died: %v", err)
	}
	if got := h.PID("fake"); got == 0 || got == pid {
		t.Fatalf("PID = %d (was %d)", got, pid)
	}
}

func TestHangIsKilled(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{CreateTimeout: 300 * time.Millisecond, KillGrace: 200 * time.Millisecond})
	d := fake(t, h)
	pid := h.PID("fake")
	start := time.Now()
	_, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: provider(`{"hang": "Create"}`), Count: 1})
	took := time.Since(start)
	e := wantCode(t, err, driversdk.CodeDriverTimeout)
	if !strings.Contains(e.Message, "killed") {
		t.Fatalf("message = %q", e.Message)
	}
	if took < 500*time.Millisecond || took > 3*time.Second {
		t.Fatalf("the hung call took %s, want about 500ms", took)
	}
	waitGone(t, pid)
	if _, err := d.Capabilities(context.Background()); err != nil {
		t.Fatalf("Capabilities after the kill: %v", err)
	}
}

func TestDeadlineHonouredByDriver(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{KillGrace: 5 * time.Second})
	d := fake(t, h)
	pid := h.PID("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := d.Create(ctx, driversdk.CreateRequest{Provider: provider(`{"slow": "Create"}`), Count: 1})
	took := time.Since(start)
	e := wantCode(t, err, driversdk.CodeDriverTimeout)
	if !strings.Contains(e.Message, "gave up") {
		t.Fatalf("message = %q", e.Message)
	}
	if took > 2*time.Second {
		t.Fatalf("the call took %s although the driver honoured its 300ms deadline", took)
	}
	if got := h.PID("fake"); got != pid {
		t.Fatalf("a driver that honoured its deadline was replaced: PID %d -> %d", pid, got)
	}
}

func TestCallerCancel(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := d.Create(ctx, driversdk.CreateRequest{Provider: provider(`{"slow": "Create"}`), Count: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("cancel took %s", took)
	}
	if got := h.PID("fake"); got != pid {
		t.Fatalf("cancelling a call replaced the process: %d -> %d", pid, got)
	}
}

func TestPanicInDriver(t *testing.T) {
	t.Parallel()
	h, logs := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	_, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: provider(`{"panic": "Create"}`), Count: 1})
	e := wantCode(t, err, driversdk.CodeDriverFailed)
	if !strings.Contains(e.Message, "panicked") {
		t.Fatalf("message = %q", e.Message)
	}
	if got := h.PID("fake"); got != pid {
		t.Fatalf("a recovered panic replaced the process: %d -> %d", pid, got)
	}
	waitLog(t, logs, func(r record) bool {
		return r.msg == "driver panicked" && strings.Contains(r.attrs["stack"], "fakecloud")
	})
}

func TestChattyPlugin(t *testing.T) {
	t.Parallel()
	h, logs := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	prov := provider(`{"chatter": 3000}`)
	for range 3 {
		if err := d.ValidateProfile(context.Background(), prov, nil); err != nil {
			t.Fatalf("ValidateProfile with a chatty plugin: %v", err)
		}
	}
	vms, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, Count: 3})
	if err != nil || len(vms) != 3 {
		t.Fatalf("Create with a chatty plugin = %v, %v", vms, err)
	}
	if got := h.PID("fake"); got != pid {
		t.Fatalf("the chatty plugin was replaced: %d -> %d", pid, got)
	}
	// Everything it wrote reaches the log, one record per line, the
	// structured lines with their level and attributes.
	deadline := time.Now().Add(5 * time.Second)
	var structured, plain, stdout, long int
	for {
		structured, plain, stdout, long = 0, 0, 0, 0
		for _, r := range logs.all() {
			switch {
			case r.msg == "chatter" && r.level == slog.LevelInfo && r.attrs["i"] != "" && r.attrs["driver"] == "fake":
				structured++
			case strings.HasPrefix(r.msg, "plain text line"):
				plain++
			case strings.HasPrefix(r.msg, "a driver bug") && r.level == slog.LevelWarn:
				stdout++
			case strings.HasPrefix(r.msg, "a very long line") && r.attrs["truncated"] == "true":
				long++
			}
		}
		if structured >= 4*600 && plain >= 4*600 && stdout >= 4*600 && long >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if structured < 4*600 || plain < 4*600 || stdout < 4*600 || long < 4 {
		t.Fatalf("records: %d structured, %d plain, %d stdout, %d long; want 2400, 2400, 2400, 4", structured, plain, stdout, long)
	}
}

func TestLogsAndCredentials(t *testing.T) {
	t.Parallel()
	keeper := secret.NewKeeper()
	h, logs := newHost(t, plugin.Config{Secrets: keeper})
	d := fake(t, h)
	creds := "fake-cloud-api-key-" + fmt.Sprint(time.Now().UnixNano())
	// What the keeper does with every resolved credential.
	keeper.RegisterResolved(creds)
	prov := provider(`{"log_credentials": true}`)
	prov.Credentials = []byte(creds)
	vms, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(creds))
	if vms[0].Attributes["credentials_sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("the credentials did not arrive in the plugin: %v", vms[0].Attributes)
	}
	_ = h.Close()
	text := logs.text()
	if strings.Contains(text, creds) {
		t.Fatalf("the credentials are in the keeper log:\n%s", text)
	}
	var seen bool
	for _, r := range logs.all() {
		if r.msg == "calling the fake cloud API" && r.attrs["auth"] == secret.Masked {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("the plugin's log line with the credentials is not in the keeper log, masked:\n%s", text)
	}
}

// TestDriverLinesCarryTheRun: what a driver logs during a call made for a
// run reaches the keeper's log naming the run, and so does what the host
// logs of the call's failure; a call outside a run names none.
func TestDriverLinesCarryTheRun(t *testing.T) {
	t.Parallel()
	h, logs := newHost(t, plugin.Config{})
	d := fake(t, h)
	prov := provider(`{"log_credentials": true, "crash": "Destroy"}`)
	prov.Credentials = []byte("c")
	ctx := logctx.WithRun(context.Background(), "run_logs")
	if _, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, Count: 1}); err != nil {
		t.Fatal(err)
	}
	err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{"x"}})
	wantCode(t, err, driversdk.CodeDriverCrashed)
	_ = h.Close()

	var runs []string
	for _, r := range logs.all() {
		switch r.msg {
		case "calling the fake cloud API", "crashing on purpose", "driver crashed during a call":
			runs = append(runs, r.msg+"="+r.attrs["run"])
		}
	}
	want := []string{
		"calling the fake cloud API=run_logs",
		"calling the fake cloud API=",
		"calling the fake cloud API=run_logs",
		"crashing on purpose=run_logs",
		"driver crashed during a call=run_logs",
	}
	if !slices.Equal(runs, want) {
		t.Fatalf("the lines' runs:\n got %q\nwant %q\n%s", runs, want, logs.text())
	}
}

func TestUnsupportedMethods(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{Env: []string{"SOULSTACK_FAKECLOUD_CAPS=none"}})
	d := fake(t, h)
	_, err := d.Resize(context.Background(), driversdk.ResizeRequest{Provider: provider(`{}`), VMIDs: []string{"x"}})
	wantCode(t, err, driversdk.CodeResizeUnsupported)
	_, err = d.List(context.Background(), driversdk.ListRequest{Provider: provider(`{}`)})
	wantCode(t, err, driversdk.CodeListUnsupported)
}

func TestClose(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{})
	d := fake(t, h)
	pid := h.PID("fake")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if _, err := d.Capabilities(context.Background()); !errors.Is(err, plugin.ErrClosed) {
		t.Fatalf("Capabilities after Close: %v", err)
	}
	if _, err := h.Driver(context.Background(), "fake"); !errors.Is(err, plugin.ErrClosed) {
		t.Fatalf("Driver after Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := plugin.Config{}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.KillGrace = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "kill_grace") {
		t.Fatalf("Validate = %v", err)
	}
	if _, err := plugin.New(plugin.Config{CallTimeout: -1}); err == nil {
		t.Fatal("New accepted a negative timeout")
	}
}

func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{StartTimeout: 300 * time.Millisecond, Env: []string{"SOULSTACK_FAKECLOUD_HANDSHAKE=sleep"}})
	start := time.Now()
	_, err := h.Driver(context.Background(), "fake")
	wantCode(t, err, driversdk.CodeDriverTimeout)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a plugin that never completes its handshake held the keeper for %s", took)
	}
}

// TestPluginEnvironment checks that a plugin gets a minimal environment,
// none of the keeper's other variables (which may hold secrets).
func TestPluginEnvironment(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, plugin.Config{Env: []string{"SOULSTACK_FAKECLOUD_CAPS=list"}})
	vms, err := fake(t, h).Create(context.Background(), driversdk.CreateRequest{Provider: provider(`{}`), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := vms[0].Attributes["env"].([]any)
	allowed := map[string]bool{
		"PATH": true, "HOME": true, "TMPDIR": true, "LANG": true, "LC_ALL": true, "TZ": true, "USER": true, "LOGNAME": true,
		"SOULSTACK_FAKECLOUD_CAPS": true, // from Config.Env
		"SOULSTACK_CLOUD_DRIVER":   true, // the magic cookie
		"PLUGIN_MIN_PORT":          true, "PLUGIN_MAX_PORT": true, "PLUGIN_PROTOCOL_VERSIONS": true,
	}
	if len(names) == 0 {
		t.Fatalf("no environment reported: %v", vms[0].Attributes)
	}
	for _, n := range names {
		if !allowed[n.(string)] {
			t.Errorf("the plugin inherited %s", n)
		}
	}
}
