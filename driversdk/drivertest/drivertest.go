// Package drivertest is the conformance suite for CloudDriver plugins. A
// driver author builds the driver's executable and runs the suite against
// it from an ordinary Go test:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Options{
//			Binary:   drivertest.Build(t, "github.com/acme/soul-cloud-acme"),
//			Provider: driversdk.Provider{Name: "test", Config: json.RawMessage(`{"zone": "test-1"}`)},
//			Profile:  json.RawMessage(`{"size": "small"}`),
//		})
//	}
//
// The suite starts the executable as the keeper does (the keeper's own
// PluginHost, a real subprocess, gRPC through hashicorp/go-plugin), so it
// checks the handshake and the wire as well as the driver. It makes real
// VMs (Options.Count of them, two by default) and destroys them again;
// point it at a test account.
//
// What it checks:
//   - Capabilities answers, and the same way twice;
//   - ValidateProfile accepts Options.Profile and rejects it with an unknown
//     key added: code profile.invalid, Field naming that key;
//   - Create returns Count VMs with distinct IDs, the requested Names as
//     their FQDNs, a primary IP, and the run, request ID and keeper tags
//     (soulstack.keeper = Provider.KeeperID);
//   - the VMs' addresses are consistent: a PublicIP or a PrivateIP (or
//     both), each listed in Addresses with its kind (public, private),
//     every Address a valid IP of one of those two kinds, and PrimaryIP
//     one of the Addresses (List reports the same addresses);
//   - with IdempotencyTokens, a repeated Create returns the same VMs;
//   - with Listable, List by the request ID tag finds exactly those VMs;
//     without it the keeper answers list.unsupported;
//   - with Resizable, Resize answers one result per VM, and Resize again
//     with the same spec succeeds without reporting a VM both Unchanged
//     and CausedDowntime; without it the keeper answers resize.unsupported;
//   - Destroy removes the VMs (List no longer shows them), a second Destroy
//     of the same IDs succeeds, and Destroy of an ID the driver never made
//     fails with vm.not_found;
//   - ownership: a VM made with another keeper's id (Options.OtherKeeperID)
//     is refused by Destroy (and, with Resizable, by Resize) with code
//     driver.not_owned, and is still there afterwards (with Listable);
//     its own keeper then destroys it;
//   - deadlines: a Create under a short deadline answers (with VMs or with
//     driver.timeout) before the keeper would take the driver for hung.
//
// Options grows only by new fields whose zero value keeps the behaviour
// of the suite before them, so a driver's test keeps compiling and
// meaning the same. Since protocol 2: Provider.KeeperID (default: a
// random conformance keeper id) and OtherKeeperID.
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/plugin"
)

// Options says how to run the suite against a driver.
type Options struct {
	// Binary is the path of the driver's executable (see Build). Required.
	Binary string
	// Provider is sent with every call: the config and credentials of a
	// test account. FQDNSuffix defaults to "conformance.test".
	Provider driversdk.Provider
	// Profile is a profile spec (a JSON object) the driver accepts; the
	// VMs are made with it. Default {}.
	Profile json.RawMessage
	// ResizeSpec is the spec Resize is checked with on a Resizable driver.
	// Default: Profile.
	ResizeSpec json.RawMessage
	// Count is how many VMs Create is asked for. Default 2.
	Count int
	// UnknownVMID is a well-formed ID of a VM the driver never made.
	// Default "soulstack-conformance-no-such-vm".
	UnknownVMID string
	// Timeout bounds Create, Destroy and Resize (other calls get 30 s).
	// Default 10 min.
	Timeout time.Duration
	// DeadlineProbe is the deadline of the deadline check's Create.
	// Default 200 ms.
	DeadlineProbe time.Duration
	// Env holds extra KEY=VALUE variables for the plugin process, which
	// otherwise gets only PATH, HOME, TMPDIR, locale and TZ.
	Env []string
	// OtherKeeperID is the keeper deployment id the ownership check makes
	// a VM for, which Provider.KeeperID must then not be able to destroy.
	// Default: a random id other than Provider.KeeperID. (Provider.KeeperID
	// itself defaults to a random "conformance-keeper-…" id.)
	OtherKeeperID string
}

func (o Options) withDefaults() Options {
	if o.Provider.FQDNSuffix == "" {
		o.Provider.FQDNSuffix = "conformance.test"
	}
	if o.Provider.KeeperID == "" {
		o.Provider.KeeperID = "conformance-keeper-" + randomHex()
	}
	if o.OtherKeeperID == "" {
		o.OtherKeeperID = "conformance-other-keeper-" + randomHex()
	}
	if len(o.Profile) == 0 {
		o.Profile = json.RawMessage(`{}`)
	}
	if len(o.ResizeSpec) == 0 {
		o.ResizeSpec = o.Profile
	}
	if o.Count == 0 {
		o.Count = 2
	}
	if o.UnknownVMID == "" {
		o.UnknownVMID = "soulstack-conformance-no-such-vm"
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.DeadlineProbe == 0 {
		o.DeadlineProbe = 200 * time.Millisecond
	}
	return o
}

// unknownKey is the profile key the suite adds to check ValidateProfile.
const unknownKey = "soulstack_conformance_unknown_key"

// killGrace is how long after a deadline the suite's host waits before it
// takes the driver for hung.
const killGrace = 2 * time.Second

// Build compiles the main package pkg (an import path, or a directory such
// as ".") into a temporary directory and returns the executable's path,
// named soul-cloud-<last element of pkg>.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	base := filepath.Base(pkg)
	if pkg == "." {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Base(wd)
	}
	name := strings.TrimPrefix(base, plugin.BinaryPrefix)
	out := filepath.Join(t.TempDir(), plugin.BinaryPrefix+name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// suite is one run of the suite.
type suite struct {
	opts      Options
	host      *plugin.Host
	name      string
	d         driversdk.Driver
	caps      driversdk.Capabilities
	requestID string
	runID     string

	mu      sync.Mutex
	created map[string]string // VM IDs to destroy at cleanup -> their keeper id
}

// Run runs the conformance suite against the driver executable
// opts.Binary, each check as a subtest of t.
func Run(t *testing.T, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	if opts.Binary == "" {
		t.Fatal("drivertest: Options.Binary is required")
	}
	if opts.OtherKeeperID == opts.Provider.KeeperID {
		t.Fatal("drivertest: Options.OtherKeeperID must differ from Provider.KeeperID")
	}
	s := &suite{opts: opts, created: map[string]string{}}
	s.start(t)
	s.runID = "conformance-run-" + randomHex()
	s.requestID = "conformance-req-" + randomHex()
	t.Cleanup(func() { s.cleanup(t) })

	t.Run("Capabilities", s.testCapabilities)
	t.Run("ValidateProfile", s.testValidateProfile)
	var vms []driversdk.VM
	t.Run("Create", func(t *testing.T) { vms = s.testCreate(t) })
	if len(vms) != opts.Count {
		return // the checks below need the VMs
	}
	t.Run("CreateIdempotent", func(t *testing.T) { s.testCreateIdempotent(t, vms) })
	t.Run("List", func(t *testing.T) { s.testList(t, vms) })
	t.Run("Resize", func(t *testing.T) { s.testResize(t, vms) })
	t.Run("Destroy", func(t *testing.T) { s.testDestroy(t, vms) })
	t.Run("DestroyUnknown", s.testDestroyUnknown)
	t.Run("NotOwned", s.testNotOwned)
	t.Run("Deadline", s.testDeadline)
}

// start puts the binary in a plugin dir of its own and starts it through a
// PluginHost, with its log going to t's log.
func (s *suite) start(t *testing.T) {
	t.Helper()
	bin, err := filepath.Abs(s.opts.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("drivertest: driver binary: %v", err)
	}
	s.name = strings.TrimPrefix(filepath.Base(bin), plugin.BinaryPrefix)
	if s.name == filepath.Base(bin) || s.name == "" {
		s.name = "conformance"
	}
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, plugin.BinaryPrefix+s.name)); err != nil {
		t.Fatal(err)
	}
	w := &testLog{t: t}
	h, err := plugin.New(plugin.Config{
		PluginDir:      dir,
		Base:           base.Base{Log: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		CreateTimeout:  s.opts.Timeout,
		DestroyTimeout: s.opts.Timeout,
		ResizeTimeout:  s.opts.Timeout,
		KillGrace:      killGrace,
		Env:            s.opts.Env,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.host = h
	t.Cleanup(func() {
		_ = h.Close()
		w.stop()
	})
	d, err := h.Driver(context.Background(), s.name)
	if err != nil {
		t.Fatalf("drivertest: start the driver: %v", err)
	}
	s.d = d
}

// testLog writes the host's log to t.Log until stopped (t.Log after the
// test has finished would panic).
type testLog struct {
	t       *testing.T
	mu      sync.Mutex
	stopped bool
}

var _ io.Writer = (*testLog)(nil)

func (w *testLog) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

func (w *testLog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// remember records VMs to destroy at cleanup: their keeper is the one
// their tag names, else the suite's.
func (s *suite) remember(vms []driversdk.VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, vm := range vms {
		if vm.ID == "" {
			continue
		}
		keeper := vm.Tags[driversdk.TagKeeper]
		if keeper != s.opts.OtherKeeperID {
			keeper = s.opts.Provider.KeeperID
		}
		s.created[vm.ID] = keeper
	}
}

// forget drops VMs the suite destroyed itself.
func (s *suite) forget(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.created, id)
	}
}

// cleanup destroys every VM the suite made, those it knows of and, on a
// Listable driver, those tagged with its run ID.
func (s *suite) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	if s.caps.Listable {
		if vms, err := s.d.List(ctx, driversdk.ListRequest{Provider: s.opts.Provider, Tags: map[string]string{driversdk.TagRunID: s.runID}}); err == nil {
			s.remember(vms)
		}
	}
	s.mu.Lock()
	byKeeper := map[string][]string{}
	for id, keeper := range s.created {
		byKeeper[keeper] = append(byKeeper[keeper], id)
	}
	s.mu.Unlock()
	for keeper, ids := range byKeeper {
		p := s.opts.Provider
		p.KeeperID = keeper
		if err := s.d.Destroy(ctx, driversdk.DestroyRequest{Provider: p, VMIDs: ids}); err != nil {
			t.Errorf("drivertest cleanup: destroy %v: %v (destroy them by hand)", ids, err)
		}
	}
}

// code returns err's driver error code, failing t when err is not an
// *driversdk.Error.
func code(t *testing.T, err error) string {
	t.Helper()
	var e *driversdk.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *driversdk.Error", err, err)
	}
	return e.Code
}

func (s *suite) testCapabilities(t *testing.T) {
	ctx := context.Background()
	c, err := s.d.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	again, err := s.d.Capabilities(ctx)
	if err != nil || again != c {
		t.Fatalf("a second Capabilities = %+v, %v; first %+v", again, err, c)
	}
	s.caps = c
	t.Logf("capabilities: %+v", c)
}

func (s *suite) testValidateProfile(t *testing.T) {
	ctx := context.Background()
	if err := s.d.ValidateProfile(ctx, s.opts.Provider, s.opts.Profile); err != nil {
		t.Fatalf("ValidateProfile(Options.Profile): %v", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(s.opts.Profile, &spec); err != nil || spec == nil {
		t.Fatalf("Options.Profile is not a JSON object: %s", s.opts.Profile)
	}
	spec[unknownKey] = 1
	bad, _ := json.Marshal(spec)
	err := s.d.ValidateProfile(ctx, s.opts.Provider, bad)
	if err == nil {
		t.Fatalf("ValidateProfile accepted the unknown key %q", unknownKey)
	}
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != driversdk.CodeProfileInvalid {
		t.Fatalf("ValidateProfile with an unknown key: %v, want code %s", err, driversdk.CodeProfileInvalid)
	}
	if !strings.Contains(e.Field, unknownKey) {
		t.Fatalf("ValidateProfile with an unknown key: Field = %q, want it to name %q", e.Field, unknownKey)
	}
}

func (s *suite) names(n int, prefix string) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d.%s", prefix, i, s.opts.Provider.FQDNSuffix)
	}
	return names
}

func (s *suite) testCreate(t *testing.T) []driversdk.VM {
	ctx := context.Background()
	names := s.names(s.opts.Count, "conformance-"+randomHex())
	req := driversdk.CreateRequest{
		Provider:  s.opts.Provider,
		RequestID: s.requestID,
		RunID:     s.runID,
		Profile:   s.opts.Profile,
		Count:     s.opts.Count,
		Names:     names,
	}
	vms, err := s.d.Create(ctx, req)
	s.remember(vms)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(vms) != s.opts.Count {
		t.Fatalf("Create(count %d) returned %d VMs", s.opts.Count, len(vms))
	}
	seen := map[string]bool{}
	for i, vm := range vms {
		switch {
		case vm.ID == "":
			t.Errorf("VM %d has no ID", i)
		case seen[vm.ID]:
			t.Errorf("VM ID %q returned twice", vm.ID)
		}
		seen[vm.ID] = true
		if vm.FQDN != names[i] {
			t.Errorf("VM %d: FQDN %q, want the requested name %q", i, vm.FQDN, names[i])
		}
		if vm.PrimaryIP == "" {
			t.Errorf("VM %d (%s) has no primary IP", i, vm.ID)
		}
		if vm.Tags[driversdk.TagRequestID] != s.requestID || vm.Tags[driversdk.TagRunID] != s.runID {
			t.Errorf("VM %d (%s) tags %v, want %s=%s and %s=%s", i, vm.ID, vm.Tags,
				driversdk.TagRequestID, s.requestID, driversdk.TagRunID, s.runID)
		}
		if got := vm.Tags[driversdk.TagKeeper]; got != s.opts.Provider.KeeperID {
			t.Errorf("VM %d (%s) tag %s = %q, want the keeper id %q (tags %v)", i, vm.ID, driversdk.TagKeeper, got, s.opts.Provider.KeeperID, vm.Tags)
		}
		for _, p := range addressProblems(vm) {
			t.Errorf("VM %d (%s): %s", i, vm.ID, p)
		}
	}
	return vms
}

// addressProblems returns what is inconsistent in vm's addresses.
func addressProblems(vm driversdk.VM) []string {
	var out []string
	if vm.PublicIP == "" && vm.PrivateIP == "" {
		out = append(out, "has neither a PublicIP nor a PrivateIP")
	}
	has := map[string]string{} // ip -> kind
	for _, a := range vm.Addresses {
		if _, err := netip.ParseAddr(a.IP); err != nil {
			out = append(out, fmt.Sprintf("address %q is not an IP", a.IP))
		}
		if a.Kind != driversdk.AddressPublic && a.Kind != driversdk.AddressPrivate {
			out = append(out, fmt.Sprintf("address %s has kind %q, want %q or %q", a.IP, a.Kind, driversdk.AddressPublic, driversdk.AddressPrivate))
		}
		has[a.IP] = a.Kind
	}
	for _, want := range []struct{ ip, kind, name string }{
		{vm.PublicIP, driversdk.AddressPublic, "PublicIP"},
		{vm.PrivateIP, driversdk.AddressPrivate, "PrivateIP"},
	} {
		if want.ip == "" {
			continue
		}
		if kind, ok := has[want.ip]; !ok || kind != want.kind {
			out = append(out, fmt.Sprintf("%s %s is not in Addresses as %s (Addresses %+v)", want.name, want.ip, want.kind, vm.Addresses))
		}
	}
	if _, ok := has[vm.PrimaryIP]; vm.PrimaryIP != "" && !ok {
		out = append(out, fmt.Sprintf("PrimaryIP %s is not one of its Addresses %+v", vm.PrimaryIP, vm.Addresses))
	}
	return out
}

func (s *suite) testCreateIdempotent(t *testing.T, vms []driversdk.VM) {
	if !s.caps.IdempotencyTokens {
		t.Skip("the driver does not declare IdempotencyTokens")
	}
	again, err := s.d.Create(context.Background(), driversdk.CreateRequest{
		Provider:  s.opts.Provider,
		RequestID: s.requestID,
		RunID:     s.runID,
		Profile:   s.opts.Profile,
		Count:     s.opts.Count,
		Names:     s.names(s.opts.Count, "conformance-repeat"),
	})
	s.remember(again)
	if err != nil {
		t.Fatalf("a repeated Create: %v", err)
	}
	if !sameIDs(vms, again) {
		t.Fatalf("a repeated Create with the same request ID made other VMs: %v, first %v", ids(again), ids(vms))
	}
}

func ids(vms []driversdk.VM) []string {
	out := make([]string, len(vms))
	for i, vm := range vms {
		out[i] = vm.ID
	}
	return out
}

func sameIDs(a, b []driversdk.VM) bool {
	if len(a) != len(b) {
		return false
	}
	set := map[string]bool{}
	for _, vm := range a {
		set[vm.ID] = true
	}
	for _, vm := range b {
		if !set[vm.ID] {
			return false
		}
	}
	return true
}

// listByRequest lists the VMs tagged with the suite's request ID.
func (s *suite) listByRequest(t *testing.T) []driversdk.VM {
	t.Helper()
	vms, err := s.d.List(context.Background(), driversdk.ListRequest{
		Provider: s.opts.Provider,
		Tags:     map[string]string{driversdk.TagRequestID: s.requestID},
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return vms
}

func (s *suite) testList(t *testing.T, vms []driversdk.VM) {
	if !s.caps.Listable {
		_, err := s.d.List(context.Background(), driversdk.ListRequest{Provider: s.opts.Provider})
		if c := code(t, err); c != driversdk.CodeListUnsupported {
			t.Fatalf("List on a driver that is not Listable: code %s, want %s", c, driversdk.CodeListUnsupported)
		}
		return
	}
	listed := s.listByRequest(t)
	if !sameIDs(vms, listed) {
		t.Fatalf("List by %s=%s found %v, want %v", driversdk.TagRequestID, s.requestID, ids(listed), ids(vms))
	}
	created := map[string]driversdk.VM{}
	for _, vm := range vms {
		created[vm.ID] = vm
	}
	for _, vm := range listed {
		if vm.Tags[driversdk.TagRequestID] != s.requestID || vm.Tags[driversdk.TagKeeper] != s.opts.Provider.KeeperID {
			t.Errorf("listed VM %s lacks the request ID or keeper tag: %v", vm.ID, vm.Tags)
		}
		c := created[vm.ID]
		if vm.PublicIP != c.PublicIP || vm.PrivateIP != c.PrivateIP || !sameAddresses(vm.Addresses, c.Addresses) {
			t.Errorf("listed VM %s has public %q private %q addresses %+v; Create said %q %q %+v",
				vm.ID, vm.PublicIP, vm.PrivateIP, vm.Addresses, c.PublicIP, c.PrivateIP, c.Addresses)
		}
	}
}

func sameAddresses(a, b []driversdk.Address) bool {
	key := func(x driversdk.Address) string { return x.IP + " " + x.Kind + " " + x.Network }
	as, bs := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		as[i] = key(a[i])
	}
	for i := range b {
		bs[i] = key(b[i])
	}
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

func (s *suite) testResize(t *testing.T, vms []driversdk.VM) {
	req := driversdk.ResizeRequest{Provider: s.opts.Provider, VMIDs: ids(vms), Spec: s.opts.ResizeSpec}
	res, err := s.d.Resize(context.Background(), req)
	if !s.caps.Resizable {
		if c := code(t, err); c != driversdk.CodeResizeUnsupported {
			t.Fatalf("Resize on a driver that is not Resizable: code %s, want %s", c, driversdk.CodeResizeUnsupported)
		}
		return
	}
	if err != nil {
		t.Fatalf("Resize on a Resizable driver: %v", err)
	}
	got := map[string]bool{}
	for _, r := range res {
		got[r.VMID] = true
	}
	if len(res) != len(vms) || len(got) != len(vms) {
		t.Fatalf("Resize of %d VMs returned %+v", len(vms), res)
	}
	for _, vm := range vms {
		if !got[vm.ID] {
			t.Errorf("Resize returned no result for VM %s", vm.ID)
		}
	}
	// The same spec again: the VMs have it now, so a driver that reports
	// a VM unchanged must not also report downtime for it.
	again, err := s.d.Resize(context.Background(), req)
	if err != nil {
		t.Fatalf("Resize to the spec the VMs have: %v", err)
	}
	for _, r := range append(res, again...) {
		if r.Unchanged && r.CausedDowntime {
			t.Errorf("Resize reported VM %s both unchanged and restarted (caused_downtime)", r.VMID)
		}
	}
}

func (s *suite) testDestroy(t *testing.T, vms []driversdk.VM) {
	ctx := context.Background()
	req := driversdk.DestroyRequest{Provider: s.opts.Provider, VMIDs: ids(vms)}
	if err := s.d.Destroy(ctx, req); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if s.caps.Listable {
		if left := s.listByRequest(t); len(left) != 0 {
			t.Errorf("List still shows %v after Destroy", ids(left))
		}
	}
	if err := s.d.Destroy(ctx, req); err != nil {
		t.Fatalf("a second Destroy of the same VMs: %v (destroy must be idempotent)", err)
	}
}

func (s *suite) testDestroyUnknown(t *testing.T) {
	err := s.d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: s.opts.Provider, VMIDs: []string{s.opts.UnknownVMID}})
	if err == nil {
		t.Fatalf("Destroy of the unknown VM %q succeeded", s.opts.UnknownVMID)
	}
	if c := code(t, err); c != driversdk.CodeVMNotFound {
		t.Fatalf("Destroy of an unknown VM: %v, want code %s", err, driversdk.CodeVMNotFound)
	}
}

// testNotOwned makes a VM as another keeper deployment and checks that
// this keeper can neither destroy nor resize it.
func (s *suite) testNotOwned(t *testing.T) {
	ctx := context.Background()
	other := s.opts.Provider
	other.KeeperID = s.opts.OtherKeeperID
	requestID := "conformance-notowned-" + randomHex()
	vms, err := s.d.Create(ctx, driversdk.CreateRequest{
		Provider: other, RequestID: requestID, RunID: s.runID, Profile: s.opts.Profile, Count: 1,
		Names: s.names(1, "conformance-other-"+randomHex()),
	})
	s.remember(vms)
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create for another keeper: %v, %v", ids(vms), err)
	}
	vm := vms[0]
	if got := vm.Tags[driversdk.TagKeeper]; got != other.KeeperID {
		t.Fatalf("VM %s made for keeper %q has %s = %q", vm.ID, other.KeeperID, driversdk.TagKeeper, got)
	}
	err = s.d.Destroy(ctx, driversdk.DestroyRequest{Provider: s.opts.Provider, VMIDs: []string{vm.ID}})
	if err == nil {
		t.Fatalf("keeper %q destroyed VM %s, which carries keeper %q's tag", s.opts.Provider.KeeperID, vm.ID, other.KeeperID)
	}
	if c := code(t, err); c != driversdk.CodeNotOwned {
		t.Fatalf("Destroy of another keeper's VM: %v, want code %s", err, driversdk.CodeNotOwned)
	}
	if s.caps.Resizable {
		_, err := s.d.Resize(ctx, driversdk.ResizeRequest{Provider: s.opts.Provider, VMIDs: []string{vm.ID}, Spec: s.opts.ResizeSpec})
		if c := code(t, err); c != driversdk.CodeNotOwned {
			t.Fatalf("Resize of another keeper's VM: %v, want code %s", err, driversdk.CodeNotOwned)
		}
	}
	if s.caps.Listable {
		left, err := s.d.List(ctx, driversdk.ListRequest{Provider: other, Tags: map[string]string{driversdk.TagRequestID: requestID}})
		if err != nil || len(left) != 1 || left[0].ID != vm.ID {
			t.Fatalf("after the refused Destroy, List by its request = %v, %v; want VM %s still there", ids(left), err, vm.ID)
		}
	}
	if err := s.d.Destroy(ctx, driversdk.DestroyRequest{Provider: other, VMIDs: []string{vm.ID}}); err != nil {
		t.Fatalf("Destroy of the VM by the keeper that made it: %v", err)
	}
	s.forget(vm.ID)
}

func (s *suite) testDeadline(t *testing.T) {
	pid := s.host.PID(s.name)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.DeadlineProbe)
	defer cancel()
	start := time.Now()
	vms, err := s.d.Create(ctx, driversdk.CreateRequest{
		Provider:  s.opts.Provider,
		RequestID: "conformance-deadline-" + randomHex(),
		RunID:     s.runID,
		Profile:   s.opts.Profile,
		Count:     1,
	})
	took := time.Since(start)
	s.remember(vms)
	if err != nil {
		if c := code(t, err); c != driversdk.CodeDriverTimeout {
			t.Fatalf("Create under a %s deadline: %v, want VMs or code %s", s.opts.DeadlineProbe, err, driversdk.CodeDriverTimeout)
		}
	}
	if now := s.host.PID(s.name); now != pid {
		t.Fatalf("Create under a %s deadline did not answer within %s after it (%s): the keeper killed the driver", s.opts.DeadlineProbe, killGrace, err)
	}
	t.Logf("Create under a %s deadline answered after %s: %v", s.opts.DeadlineProbe, took.Round(time.Millisecond), err)
}
