package cloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// fakeCloud is an in-memory stand-in for a cloud provider's API, which
// cannot run here; the real plugin path is tested with soul-cloud-local.
type fakeCloud struct {
	mu          sync.Mutex
	vms         map[string]driversdk.VM
	next        int
	failDestroy bool
	failCreate  bool
	resizable   bool
	unlistable  bool // no Listable capability
	// strictDestroy: Destroy of a VM it no longer has is vm.not_found
	// (and destroys nothing), as a driver that keeps no tombstones.
	strictDestroy bool
	unlisted      map[string]bool // live VMs List does not show (a lagging list)
	// resizeAlways: Resize never reports a VM unchanged, as a driver
	// that predates ResizeResult.Unchanged.
	resizeAlways bool
	creds        []byte
	config       json.RawMessage // the provider config of the last Create
	// public: VMs get a public address (198.51.100.N) besides their
	// private one, which is then their PrimaryIP no more.
	public    bool
	userdata  []string
	destroyed [][]string // the VM IDs of each Destroy call
	resized   [][]string // the VM IDs of each Resize call
}

func (f *fakeCloud) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: f.resizable, Listable: !f.unlistable}, nil
}

func (f *fakeCloud) ValidateProfile(_ context.Context, _ driversdk.Provider, profile json.RawMessage) error {
	var m map[string]any
	_ = json.Unmarshal(profile, &m)
	for k := range m {
		if k != "size" && k != "ssh_user" {
			return &driversdk.Error{Code: "profile.invalid", Field: k, Message: "unknown key"}
		}
	}
	return nil
}

func (f *fakeCloud) Create(_ context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creds, f.userdata, f.config = req.Provider.Credentials, req.Userdata, req.Provider.Config
	if f.failCreate {
		return nil, driversdk.Errorf("quota.exceeded", "the provider's quota is used up")
	}
	var out []driversdk.VM
	for i := 0; i < req.Count; i++ {
		f.next++
		id := fmt.Sprintf("vm-%d", f.next)
		name := fmt.Sprintf("%s.%s", id, req.Provider.FQDNSuffix)
		if req.Names != nil {
			name = req.Names[i]
		}
		vm := driversdk.VM{ID: id, FQDN: name, PrimaryIP: fmt.Sprintf("10.9.0.%d", f.next), Attributes: map[string]any{"size": "s"},
			Tags: map[string]string{driversdk.TagRequestID: req.RequestID, driversdk.TagRunID: req.RunID}}
		vm.PrivateIP = vm.PrimaryIP
		vm.Addresses = []driversdk.Address{{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: "net-a"}}
		if f.public {
			vm.PublicIP = fmt.Sprintf("198.51.100.%d", f.next)
			vm.PrimaryIP = vm.PublicIP
			vm.Addresses = append(vm.Addresses, driversdk.Address{IP: vm.PublicIP, Kind: driversdk.AddressPublic})
		}
		f.vms[id] = vm
		out = append(out, vm)
	}
	return out, nil
}

func (f *fakeCloud) Destroy(_ context.Context, req driversdk.DestroyRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed = append(f.destroyed, req.VMIDs)
	if f.failDestroy {
		return driversdk.Errorf("quota.api_down", "the provider's API is down")
	}
	for _, id := range req.VMIDs {
		if _, ok := f.vms[id]; !ok && f.strictDestroy {
			return driversdk.Errorf(driversdk.CodeVMNotFound, "no VM %q", id)
		}
	}
	for _, id := range req.VMIDs {
		delete(f.vms, id)
	}
	return nil
}

// Resize sets the VMs' size attribute; a VM that has it already is left
// alone and reported unchanged (unless resizeAlways).
func (f *fakeCloud) Resize(_ context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resized = append(f.resized, req.VMIDs)
	var sp struct{ Size string }
	_ = json.Unmarshal(req.Spec, &sp)
	var out []driversdk.ResizeResult
	for _, id := range req.VMIDs {
		vm, ok := f.vms[id]
		if !ok {
			return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "no VM %q", id)
		}
		if vm.Attributes["size"] == sp.Size && !f.resizeAlways {
			out = append(out, driversdk.ResizeResult{VMID: id, Unchanged: true})
			continue
		}
		vm.Attributes["size"] = sp.Size
		out = append(out, driversdk.ResizeResult{VMID: id, CausedDowntime: true})
	}
	return out, nil
}

func (f *fakeCloud) List(context.Context, driversdk.ListRequest) ([]driversdk.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []driversdk.VM
	for id, vm := range f.vms {
		if !f.unlisted[id] {
			out = append(out, vm)
		}
	}
	return out, nil
}

// keeperHost is the keeper side the states see, over a real store.
type keeperHost struct {
	st    *sqlstore.Store
	cloud *fakeCloud
	// joins is the keeper's JoinsByItself; nil: its userdata never joins.
	joins func(driver string) bool
}

// services are the states' services of this keeper.
func (h *keeperHost) services() cloud.Services {
	return cloud.Services{Registry: h.st, Driver: h.Driver, Credentials: h.Credentials,
		AuthorizedKey: func(context.Context, string) (string, error) { return "ssh-ed25519 AAAAkeeper soulstack-keeper", nil }, Userdata: h.Userdata, BootstrapTTL: time.Hour,
		KeeperID: "kd-cloudtest", CheckSeed: h.CheckSeed, JoinsByItself: h.joins}
}

// provision wires the registered state m with the keeper's services, as
// the keeper does when it is built.
func provision(t *testing.T, m module.Module, h *keeperHost) module.Module {
	t.Helper()
	pm, err := m.(module.Provisioner[cloud.Services]).Provision(h.services())
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

func (h *keeperHost) Driver(_ context.Context, name string) (driversdk.Driver, error) {
	if name != "fake" {
		return nil, driversdk.Errorf("driver.not_found", "no plugin soul-cloud-%s", name)
	}
	return h.cloud, nil
}
func (h *keeperHost) Credentials(_ context.Context, p store.Provider) ([]byte, error) {
	if p.CredentialsRef == "" {
		return nil, nil
	}
	return []byte("resolved:" + p.CredentialsRef), nil
}
func (h *keeperHost) Userdata(u cloud.UserdataVars) (string, error) {
	return fmt.Sprintf("#cloud-config\n# sid=%s index=%d token=%s\n", u.SID, u.Index, u.Token), nil
}

// CheckSeed checks seeds with the scenario package, as the keeper does.
func (h *keeperHost) CheckSeed(name, text string, input map[string]any) (secret, problems []string) {
	plan, err := scenario.Load(name, []byte(text), input)
	var se *scenario.Error
	if errors.As(err, &se) {
		var out []string
		for _, p := range se.Problems {
			out = append(out, p.Pos.String()+": "+p.Message)
		}
		return nil, out
	}
	if err != nil {
		return nil, []string{name + ": " + err.Error()}
	}
	return plan.SecretInputs, nil
}

func setup(t *testing.T) (*keeperHost, context.Context) {
	t.Helper()
	return setupOn(t, testdb.SQLite)
}

func setupOn(t *testing.T, b testdb.Backend) (*keeperHost, context.Context) {
	t.Helper()
	st := b.Open(t)
	ctx := context.Background()
	if _, err := st.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "acme", Driver: "fake", FQDNSuffix: "acme.test", CredentialsRef: "env:ACME", Config: json.RawMessage(`{"max_count":3}`)}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ProfileCreate(ctx, store.ProfileCreateParams{Profile: store.Profile{Name: "small", Provider: "acme", Spec: json.RawMessage(`{"size":"s","ssh_user":"ubuntu"}`)}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	return &keeperHost{st: st, cloud: &fakeCloud{vms: map[string]driversdk.VM{}}}, ctx
}

func run(t *testing.T, m module.Module, h *keeperHost, params map[string]any) (module.Result, error) {
	t.Helper()
	raw, _ := json.Marshal(module.ApplyDefaults(m.Info(), params))
	return provision(t, m, h).Run(context.Background(), module.RunInfo{ID: "run_test", Step: "provision", Creator: "tok_creator"}, raw, nil)
}

// TestUnprovisioned: a cloud state the keeper did not provision (the
// registered value) fails with module.keeper_services_unavailable and
// touches nothing.
func TestUnprovisioned(t *testing.T) {
	t.Parallel()
	for m, params := range map[module.Module]map[string]any{
		&cloud.Created{}:   {"provider": "acme", "count": 1},
		&cloud.Destroyed{}: {"provider": "acme", "vm_ids": []any{"vm-1"}},
		&cloud.Resized{}:   {"provider": "acme", "vm_ids": []any{"vm-1"}, "profile": "small"},
	} {
		raw, _ := json.Marshal(params)
		_, err := m.Run(context.Background(), module.RunInfo{ID: "run_test"}, raw, nil)
		var me *module.Error
		if !errors.As(err, &me) || me.Code != "module.keeper_services_unavailable" {
			t.Errorf("%s unprovisioned: %v, want module.keeper_services_unavailable", m.Info().ID, err)
		}
	}
	if _, err := (&cloud.Created{}).Provision(cloud.Services{}); err == nil {
		t.Error("provisioned with no services at all")
	}
}

func TestCreated(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "profile": "small", "count": 2, "generate_userdata": true})
	if err != nil || !res.Changed {
		t.Fatalf("create: %+v, %v", res, err)
	}
	out := res.Output.(map[string]any)
	hosts := out["hosts"].([]any)
	if out["count"] != 2 || out["action"] != "created" || len(hosts) != 2 || len(out["vm_ids"].([]string)) != 2 {
		t.Fatalf("output = %#v", out)
	}
	first := hosts[0].(map[string]any)
	token := first["bootstrap_token"].(string)
	sid := first["sid"].(string)
	if !strings.HasPrefix(token, "sbt_") || sid != "vm-1.acme.test" || first["primary_ip"] != "10.9.0.1" {
		t.Fatalf("host = %#v", first)
	}
	so, err := h.st.SoulGet(ctx, sid)
	if err != nil || so.Status != store.SoulPending || so.CreatedByAID != nil || so.Connection.User != "ubuntu" || so.Address != "10.9.0.1" || so.VMID != "vm-1" {
		t.Fatalf("soul = %+v, %v", so, err)
	}
	toks, _ := h.st.BootstrapTokens(ctx, sid)
	if len(toks) != 1 || toks[0].Hash == token || toks[0].Status != store.BootstrapIssued || time.Until(toks[0].ExpiresAt) < 59*time.Minute {
		t.Fatalf("tokens = %+v", toks)
	}
	if string(h.cloud.creds) != "resolved:env:ACME" || len(h.cloud.userdata) != 2 || !strings.Contains(h.cloud.userdata[1], "token="+hosts[1].(map[string]any)["bootstrap_token"].(string)) {
		t.Fatalf("driver got creds %q userdata %q", h.cloud.creds, h.cloud.userdata)
	}
	events, _ := h.st.AuditList(ctx, store.AuditListParams{})
	last := events[len(events)-1]
	if last.Action != "cloud.provisioned" || strings.Contains(last.Payload, token) || !strings.Contains(last.Payload, `"vm-1"`) {
		t.Fatalf("audit = %s %s", last.Action, last.Payload)
	}
	// The VMs carry the request id the keeper recorded before Create.
	for _, vm := range h.cloud.vms {
		req, err := h.st.CloudRequestGet(ctx, vm.Tags[driversdk.TagRequestID])
		if err != nil || req.Status != "created" || req.RunID != "run_test" {
			t.Fatalf("request of %s = %+v, %v", vm.ID, req, err)
		}
	}
}

func TestCreatedSelfOnboardAndLimits(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "profile": map[string]any{"size": "m"}, "count": 2, "self_onboard": true, "name": "web"})
	if err != nil {
		t.Fatal(err)
	}
	hosts := res.Output.(map[string]any)["hosts"].([]any)
	if hosts[0].(map[string]any)["sid"] != "web-1.acme.test" || hosts[1].(map[string]any)["sid"] != "web-2.acme.test" {
		t.Fatalf("self_onboard names = %v", hosts)
	}
	if !strings.Contains(h.cloud.userdata[0], "sid=web-1.acme.test") {
		t.Fatalf("userdata = %q", h.cloud.userdata[0])
	}
	cases := []struct {
		name   string
		params map[string]any
		code   string
	}{
		{"duplicate self_onboard names", map[string]any{"provider": "acme", "count": 1, "self_onboard": true, "name": "web"}, "cloud.name_taken"},
		{"count above max_count", map[string]any{"provider": "acme", "count": 4}, "cloud.count_exceeded"},
		{"unknown provider", map[string]any{"provider": "ghost"}, "provider.not_found"},
		{"unknown profile", map[string]any{"provider": "acme", "profile": "huge"}, "profile.not_found"},
		{"profile keys the driver refuses", map[string]any{"provider": "acme", "profile": map[string]any{"colour": "red"}}, "profile.invalid"},
	}
	for _, c := range cases {
		_, err := run(t, &cloud.Created{}, h, c.params)
		if module.Code(err) != c.code {
			t.Errorf("%s: err = %v (%s), want %s", c.name, err, module.Code(err), c.code)
		}
	}
	souls, _ := h.st.SoulsOfProvider(ctx, "acme")
	if len(souls) != 2 {
		t.Fatalf("refused creates changed the registry: %d souls", len(souls))
	}
}

func TestDestroyed(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	res, _ := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 2})
	out := res.Output.(map[string]any)
	ids := out["vm_ids"].([]string)
	sids := []any{out["hosts"].([]any)[0].(map[string]any)["sid"], out["hosts"].([]any)[1].(map[string]any)["sid"]}
	vmIDs := []any{ids[0], ids[1]}

	// A failing destroy leaves the registries untouched.
	h.cloud.failDestroy = true
	_, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": vmIDs, "sids": sids})
	if module.Code(err) != "quota.api_down" {
		t.Fatalf("failing destroy: %v", err)
	}
	so, _ := h.st.SoulGet(ctx, sids[0].(string))
	toks, _ := h.st.BootstrapTokens(ctx, sids[0].(string))
	if so.Status != store.SoulPending || toks[0].Status != store.BootstrapIssued {
		t.Fatalf("registries changed by a failed destroy: %s %s", so.Status, toks[0].Status)
	}
	h.cloud.failDestroy = false
	res, err = run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": vmIDs, "sids": sids})
	if err != nil {
		t.Fatal(err)
	}
	o := res.Output.(map[string]any)
	if o["souls_destroyed"] != 2 || o["bootstraps_burned"] != 2 || o["action"] != "destroyed" || len(h.cloud.vms) != 0 {
		t.Fatalf("destroy output = %#v", o)
	}
	so, _ = h.st.SoulGet(ctx, sids[1].(string))
	if so.Status != store.SoulDestroyed {
		t.Fatalf("soul after destroy = %s", so.Status)
	}
}

func TestResized(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	if _, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 1}); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": []any{"vm-1"}, "profile": map[string]any{"size": "l"}})
	if module.Code(err) != "resize.unsupported" {
		t.Fatalf("resize on a driver without the capability: %v", err)
	}
	h.cloud.resizable = true
	res, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": []any{"vm-1"}, "profile": map[string]any{"size": "l"}})
	if err != nil || res.Output.(map[string]any)["vms"].([]any)[0].(map[string]any)["caused_downtime"] != true {
		t.Fatalf("resize: %+v, %v", res, err)
	}
}

func TestAuditFailureFailsTheStep(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	testdb.SQLite.BreakAudit(t, h.st.DB())
	_, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 1})
	if module.Code(err) != "cloud.registry_failed" || !strings.Contains(err.Error(), "soulctl cloud orphans") {
		t.Fatalf("create with a broken audit: %v", err)
	}
	if souls, _ := h.st.SoulsOfProvider(ctx, "acme"); len(souls) != 0 {
		t.Fatalf("souls kept: %+v", souls)
	}
	var me *module.Error
	if !errors.As(err, &me) {
		t.Fatal("not a module error")
	}
}

// TestPairing: destroyed and resized act only on VMs this keeper created at
// that provider, and destroyed only on souls that are those VMs; anything
// else fails with cloud.pairing_mismatch before the driver is called, and
// every audit event of the states names the run's creator.
func TestPairing(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	h.cloud.resizable = true
	if _, err := h.st.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "other", Driver: "fake", FQDNSuffix: "other.test"}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := res.Output.(map[string]any)["vm_ids"].([]string)
	// A VM the keeper did not create, made at the provider behind its back.
	h.cloud.vms["vm-foreign"] = driversdk.VM{ID: "vm-foreign", FQDN: "foreign.acme.test"}
	if _, err := h.st.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "db.example.com", Address: "10.0.0.5", Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		m      module.Module
		params map[string]any
		want   string
	}{
		{"hand-registered soul paired with a real VM", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": []any{ids[0]}, "sids": []any{"db.example.com"}}, "registered by hand"},
		{"soul of another VM", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": []any{ids[0]}, "sids": []any{"vm-2.acme.test"}}, "not among vm_ids"},
		{"unknown soul", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": []any{ids[0]}, "sids": []any{"ghost.acme.test"}}, "not registered"},
		{"VM the keeper did not create", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": []any{"vm-foreign"}}, "not created by this keeper"},
		{"VM of another provider", &cloud.Destroyed{}, map[string]any{"provider": "other", "vm_ids": []any{ids[0]}}, "not created by this keeper at provider \"other\""},
		{"resize of a VM the keeper did not create", &cloud.Resized{}, map[string]any{"provider": "acme", "vm_ids": []any{"vm-foreign"}, "profile": map[string]any{"size": "l"}}, "not created by this keeper"},
	}
	for _, c := range cases {
		_, err := run(t, c.m, h, c.params)
		if module.Code(err) != "cloud.pairing_mismatch" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v (%s), want cloud.pairing_mismatch saying %q", c.name, err, module.Code(err), c.want)
		}
	}
	if len(h.cloud.vms) != 3 {
		t.Fatalf("VMs left = %d, want all 3: a refused step reached the driver", len(h.cloud.vms))
	}
	for _, sid := range []string{"db.example.com", "vm-1.acme.test", "vm-2.acme.test"} {
		if so, _ := h.st.SoulGet(ctx, sid); so.Status == store.SoulDestroyed {
			t.Fatalf("soul %s destroyed by a refused step", sid)
		}
	}
	// The right pairs go through.
	if _, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": []any{ids[0]}, "profile": map[string]any{"size": "l"}}); err != nil {
		t.Fatal(err)
	}
	res, err = run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": []any{ids[0], ids[1]}, "sids": []any{"vm-2.acme.test", "vm-1.acme.test"}})
	if err != nil || res.Output.(map[string]any)["souls_destroyed"] != 2 {
		t.Fatalf("destroy of the right pairs: %+v, %v", res, err)
	}
	events, _ := h.st.AuditList(ctx, store.AuditListParams{})
	ok, mismatches := 0, 0
	for _, e := range events {
		if e.Action == "cloud.provisioned" {
			if e.ActorAID != "tok_creator" {
				t.Errorf("cloud.provisioned by %q, want the run's creator: %s", e.ActorAID, e.Payload)
			}
			switch p := payload(t, e.Payload); {
			case p["outcome"] == "ok":
				ok++
			case p["outcome"] == "failed" && p["error_code"] == "cloud.pairing_mismatch":
				mismatches++
			default:
				t.Errorf("cloud.provisioned payload = %s", e.Payload)
			}
		}
	}
	if ok != 3 || mismatches != len(cases) {
		t.Fatalf("cloud.provisioned events: %d ok, %d pairing mismatches; want 3 (created, resized, destroyed) and %d", ok, mismatches, len(cases))
	}
}

func payload(t *testing.T, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("audit payload %q: %v", raw, err)
	}
	return m
}

// provisioned returns the payloads of the cloud.provisioned events after
// the first skip events, checking that each names the run's creator.
func provisioned(t *testing.T, h *keeperHost) []map[string]any {
	t.Helper()
	events, err := h.st.AuditList(context.Background(), store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range events {
		if e.Action != "cloud.provisioned" {
			continue
		}
		if e.ActorAID != "tok_creator" || e.Object != "provider/acme" {
			t.Errorf("cloud.provisioned by %q on %q, want tok_creator on provider/acme: %s", e.ActorAID, e.Object, e.Payload)
		}
		out = append(out, payload(t, e.Payload))
	}
	return out
}

// lastProvisioned is the payload of the newest cloud.provisioned event.
func lastProvisioned(t *testing.T, h *keeperHost) map[string]any {
	t.Helper()
	all := provisioned(t, h)
	if len(all) == 0 {
		t.Fatal("no cloud.provisioned event")
	}
	return all[len(all)-1]
}

func create(t *testing.T, h *keeperHost, n int) (vmIDs, sids []any) {
	t.Helper()
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": n})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res.Output.(map[string]any)["hosts"].([]any) {
		vmIDs = append(vmIDs, x.(map[string]any)["vm_id"])
		sids = append(sids, x.(map[string]any)["sid"])
	}
	return vmIDs, sids
}

// TestDestroyedChangesWhen checks each line of core.cloud.destroyed's
// "changes when" / "does not change when" and the already-gone note:
// a VM still there is destroyed (changed); a VM already gone is not asked
// for again, and the step changes only when a registry row moves; once
// the VMs are gone and the rows final the step is ok and unchanged.
func TestDestroyedChangesWhen(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	ids, sids := create(t, h, 2)
	destroy := func(params map[string]any) map[string]any {
		t.Helper()
		params["provider"] = "acme"
		res, err := run(t, &cloud.Destroyed{}, h, params)
		if err != nil {
			t.Fatal(err)
		}
		out := res.Output.(map[string]any)
		out["changed"] = res.Changed
		return out
	}
	// Changes when a VM was still at the provider and was destroyed (no
	// sids: no registry row moves).
	out := destroy(map[string]any{"vm_ids": []any{ids[0]}})
	if out["changed"] != true || fmt.Sprint(out["already_gone"]) != "[]" || fmt.Sprint(h.cloud.destroyed) != fmt.Sprintf("[[%s]]", ids[0]) || out["souls_destroyed"] != 0 {
		t.Fatalf("destroy of a live VM: %v, driver calls %v", out, h.cloud.destroyed)
	}
	if so, _ := h.st.SoulGet(ctx, sids[0].(string)); so.Status != store.SoulPending {
		t.Fatalf("soul without sids = %s", so.Status)
	}
	// Changes when a registry row moved, even though the VM was already
	// gone.
	out = destroy(map[string]any{"vm_ids": []any{ids[0]}, "sids": []any{sids[0]}})
	if out["changed"] != true || fmt.Sprint(out["already_gone"]) != fmt.Sprintf("[%s]", ids[0]) || out["souls_destroyed"] != 1 || out["bootstraps_burned"] != 1 {
		t.Fatalf("cascade of a gone VM: %v, driver calls %v", out, h.cloud.destroyed)
	}
	// Does not change when every VM was already gone and the rows final:
	// ok, unchanged, and no pairing mismatch for a VM this keeper made
	// that is gone.
	out = destroy(map[string]any{"vm_ids": []any{ids[0]}, "sids": []any{sids[0]}})
	if out["changed"] != false || fmt.Sprint(out["already_gone"]) != fmt.Sprintf("[%s]", ids[0]) || out["souls_destroyed"] != 0 || out["bootstraps_burned"] != 0 || out["seeds_orphaned"] != 0 {
		t.Fatalf("repeated destroy: %v, driver calls %v", out, h.cloud.destroyed)
	}
	// Destroy was still asked each time (destroying a gone VM succeeds by
	// the driver contract).
	if fmt.Sprint(h.cloud.destroyed) != fmt.Sprintf("[[%s] [%s] [%s]]", ids[0], ids[0], ids[0]) {
		t.Fatalf("driver calls = %v", h.cloud.destroyed)
	}
	if p := lastProvisioned(t, h); p["outcome"] != "ok" || p["changed"] != false || fmt.Sprint(p["already_gone"]) != fmt.Sprintf("[%s]", ids[0]) {
		t.Fatalf("audit of the unchanged destroy = %v", p)
	}
	// A mix, with a driver that answers vm.not_found for a VM it no longer
	// has: one gone, one live; the live one is asked for again alone.
	h.cloud.strictDestroy = true
	out = destroy(map[string]any{"vm_ids": []any{ids[0], ids[1]}, "sids": []any{sids[0], sids[1]}})
	if out["changed"] != true || fmt.Sprint(out["already_gone"]) != fmt.Sprintf("[%s]", ids[0]) || fmt.Sprint(h.cloud.destroyed[3:]) != fmt.Sprintf("[[%s %s] [%s]]", ids[0], ids[1], ids[1]) || out["souls_destroyed"] != 1 || len(h.cloud.vms) != 0 {
		t.Fatalf("destroy of one gone and one live VM: %v, driver calls %v", out, h.cloud.destroyed)
	}
	if p := lastProvisioned(t, h); p["changed"] != true || fmt.Sprint(p["destroyed_now"]) != fmt.Sprintf("[%s]", ids[1]) {
		t.Fatalf("audit of the mixed destroy = %v", p)
	}
	// The same driver, everything gone: ok, unchanged.
	out = destroy(map[string]any{"vm_ids": []any{ids[0], ids[1]}, "sids": []any{sids[0], sids[1]}})
	if out["changed"] != false || fmt.Sprint(out["already_gone"]) != fmt.Sprintf("[%s %s]", ids[0], ids[1]) {
		t.Fatalf("repeated destroy with a driver without tombstones: %v, driver calls %v", out, h.cloud.destroyed)
	}
	// A VM this keeper never made is still a pairing mismatch, gone or not.
	_, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": []any{"vm-never"}})
	if module.Code(err) != "cloud.pairing_mismatch" {
		t.Fatalf("destroy of a VM the keeper never made: %v", err)
	}
}

// TestDestroyedLaggingList: a VM the driver's list does not show yet is
// still destroyed (Destroy is asked for every VM), so a lagging list
// never leaves a VM running.
func TestDestroyedLaggingList(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	ids, _ := create(t, h, 1)
	h.cloud.unlisted = map[string]bool{ids[0].(string): true}
	if _, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids}); err != nil {
		t.Fatal(err)
	}
	if len(h.cloud.vms) != 0 {
		t.Fatalf("VMs left at the provider: %v", h.cloud.vms)
	}
}

// TestDestroyedUnlistableDriver: a driver that cannot list its VMs cannot
// tell which are gone: every VM is asked for and the step changes.
func TestDestroyedUnlistableDriver(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	ids, _ := create(t, h, 1)
	h.cloud.unlistable = true
	for i := 0; i < 2; i++ {
		res, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids})
		if err != nil || !res.Changed || fmt.Sprint(res.Output.(map[string]any)["already_gone"]) != "[]" {
			t.Fatalf("destroy %d with an unlistable driver: %+v, %v", i, res, err)
		}
	}
	if len(h.cloud.destroyed) != 2 {
		t.Fatalf("driver calls = %v, want both destroys", h.cloud.destroyed)
	}
}

// TestResizedChangesWhen checks each line of core.cloud.resized's "changes
// when" / "does not change when" and the driver note.
func TestResizedChangesWhen(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	h.cloud.resizable = true
	ids, _ := create(t, h, 2) // both of size s
	souls, _ := h.st.SoulsOfProvider(context.Background(), "acme")
	resize := func(vmIDs []any, profile any) (bool, []any) {
		t.Helper()
		res, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": vmIDs, "profile": profile})
		if err != nil {
			t.Fatal(err)
		}
		return res.Changed, res.Output.(map[string]any)["vms"].([]any)
	}
	perVM := func(vms []any) string {
		var b strings.Builder
		for _, v := range vms {
			m := v.(map[string]any)
			fmt.Fprintf(&b, "%s changed=%v downtime=%v;", m["vm_id"], m["changed"], m["caused_downtime"])
		}
		return b.String()
	}
	// Changes when the driver resized at least one VM.
	changed, vms := resize([]any{ids[0]}, map[string]any{"size": "l"})
	if !changed || perVM(vms) != fmt.Sprintf("%s changed=true downtime=true;", ids[0]) {
		t.Fatalf("resize s -> l: changed=%v %s", changed, perVM(vms))
	}
	// One of two already has the size: still changed, and the entries say which.
	changed, vms = resize(ids, map[string]any{"size": "l"})
	if !changed || perVM(vms) != fmt.Sprintf("%s changed=false downtime=false;%s changed=true downtime=true;", ids[0], ids[1]) {
		t.Fatalf("resize of one l and one s VM to l: changed=%v %s", changed, perVM(vms))
	}
	// Does not change when every VM already has the size (by profile name
	// too), and the audit event says so.
	changed, vms = resize(ids, map[string]any{"size": "l"})
	if changed || perVM(vms) != fmt.Sprintf("%s changed=false downtime=false;%s changed=false downtime=false;", ids[0], ids[1]) {
		t.Fatalf("resize to the size the VMs have: changed=%v %s", changed, perVM(vms))
	}
	if p := lastProvisioned(t, h); p["action"] != "resized" || p["outcome"] != "ok" || p["changed"] != false {
		t.Fatalf("audit of the unchanged resize = %v", p)
	}
	// A driver that does not report Unchanged has every VM counted resized.
	h.cloud.resizeAlways = true
	if changed, vms = resize(ids, map[string]any{"size": "l"}); !changed {
		t.Fatalf("resize with a driver that never reports unchanged: %s", perVM(vms))
	}
	// The souls registry is not touched by any of them.
	if got, _ := h.st.SoulsOfProvider(context.Background(), "acme"); fmt.Sprint(got) != fmt.Sprint(souls) {
		t.Fatalf("souls after the resizes = %+v, before %+v", got, souls)
	}
}

// TestProvisionedOnFailures: a failing step of every state writes
// cloud.provisioned with outcome failed, the error's code (not its text),
// the provider, the state and the VMs known, as the run's creator.
func TestProvisionedOnFailures(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	ids, sids := create(t, h, 1)
	h.cloud.resizable = true
	cases := []struct {
		name    string
		m       module.Module
		params  map[string]any
		prepare func()
		code    string
		vmIDs   string
		extra   func(p map[string]any) bool
	}{
		{"created: count above max_count", &cloud.Created{}, map[string]any{"provider": "acme", "count": 9}, nil, "cloud.count_exceeded", "[]",
			func(p map[string]any) bool { return p["request_id"] == nil }},
		{"created: the driver fails", &cloud.Created{}, map[string]any{"provider": "acme", "count": 1}, func() { h.cloud.failCreate = true }, "quota.exceeded", "[]",
			func(p map[string]any) bool { s, _ := p["request_id"].(string); return strings.HasPrefix(s, "req_") }},
		{"destroyed: the driver fails", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": ids, "sids": sids}, func() { h.cloud.failDestroy = true }, "quota.api_down", fmt.Sprint(ids),
			func(p map[string]any) bool { return fmt.Sprint(p["sids"]) == fmt.Sprint(sids) }},
		{"destroyed: pairing mismatch", &cloud.Destroyed{}, map[string]any{"provider": "acme", "vm_ids": []any{"vm-never"}}, nil, "cloud.pairing_mismatch", "[vm-never]", nil},
		{"resized: unsupported", &cloud.Resized{}, map[string]any{"provider": "acme", "vm_ids": ids, "profile": map[string]any{"size": "l"}}, func() { h.cloud.resizable = false }, "resize.unsupported", fmt.Sprint(ids), nil},
		{"resized: profile refused", &cloud.Resized{}, map[string]any{"provider": "acme", "vm_ids": ids, "profile": map[string]any{"colour": "red"}}, nil, "profile.invalid", fmt.Sprint(ids), nil},
	}
	for _, c := range cases {
		// Sequential: the cases share the host and count its events.
		t.Run(c.name, func(t *testing.T) {
			h.cloud.failCreate, h.cloud.failDestroy, h.cloud.resizable = false, false, true
			if c.prepare != nil {
				c.prepare()
			}
			before := len(provisioned(t, h))
			_, err := run(t, c.m, h, c.params)
			if module.Code(err) != c.code {
				t.Fatalf("err = %v (%s), want %s", err, module.Code(err), c.code)
			}
			all := provisioned(t, h)
			if len(all) != before+1 {
				t.Fatalf("%d cloud.provisioned events written, want 1", len(all)-before)
			}
			p := all[len(all)-1]
			state := strings.TrimPrefix(string(c.m.Info().ID), "core.cloud.")
			if p["outcome"] != "failed" || p["error_code"] != c.code || p["action"] != state || p["provider"] != "acme" ||
				fmt.Sprint(p["vm_ids"]) != c.vmIDs || p["run_id"] != "run_test" || p["step"] != "provision" || (c.extra != nil && !c.extra(p)) {
				t.Errorf("payload = %v", p)
			}
			if raw, _ := json.Marshal(p); strings.Contains(string(raw), err.Error()) {
				t.Errorf("the payload holds the error's text: %s", raw)
			}
		})
	}
	// A successful destroy of the same VMs after the failed one: ok.
	h.cloud.failDestroy = false
	if _, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids, "sids": sids}); err != nil {
		t.Fatal(err)
	}
	if p := lastProvisioned(t, h); p["outcome"] != "ok" || p["changed"] != true {
		t.Fatalf("destroy after the failure: %v", p)
	}
}

// TestAuditFailureFailsEveryState: on both backends, when the audit log
// cannot be written every state fails, whether it changed something or
// not, and a failed step says its failure could not be audited either.
func TestAuditFailureFailsEveryState(t *testing.T) {
	t.Parallel()
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			h, ctx := setupOn(t, b)
			h.cloud.resizable = true
			ids, sids := create(t, h, 2)
			// One VM already gone with its rows final, for the unchanged case.
			if _, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids[1:], "sids": sids[1:]}); err != nil {
				t.Fatal(err)
			}
			b.BreakAudit(t, h.st.DB())

			_, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": ids[:1], "profile": map[string]any{"size": "l"}})
			if module.Code(err) != "cloud.audit_failed" {
				t.Errorf("resize with a broken audit: %v (%s)", err, module.Code(err))
			}
			_, err = run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": ids[:1], "profile": map[string]any{"size": "l"}})
			if module.Code(err) != "cloud.audit_failed" {
				t.Errorf("unchanged resize with a broken audit: %v (%s)", err, module.Code(err))
			}
			_, err = run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids[1:], "sids": sids[1:]})
			if module.Code(err) != "cloud.registry_failed" {
				t.Errorf("unchanged destroy with a broken audit: %v (%s)", err, module.Code(err))
			}
			res, err := run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": ids[:1], "sids": sids[:1]})
			if module.Code(err) != "cloud.registry_failed" || !res.Changed || !strings.Contains(err.Error(), "could not be written either") {
				t.Errorf("destroy with a broken audit: %+v, %v (%s)", res, err, module.Code(err))
			}
			// The cascade and its event are one transaction: nothing moved.
			if so, _ := h.st.SoulGet(ctx, sids[0].(string)); so.Status != store.SoulPending {
				t.Errorf("soul after a destroy whose audit failed = %s, want pending", so.Status)
			}
			if toks, _ := h.st.BootstrapTokens(ctx, sids[0].(string)); len(toks) != 1 || toks[0].Status != store.BootstrapIssued {
				t.Errorf("tokens after a destroy whose audit failed = %+v", toks)
			}
			_, err = run(t, &cloud.Destroyed{}, h, map[string]any{"provider": "acme", "vm_ids": []any{"vm-never"}})
			if module.Code(err) != "cloud.pairing_mismatch" || !strings.Contains(err.Error(), "could not be written either") {
				t.Errorf("refused destroy with a broken audit: %v", err)
			}
			if n := len(provisioned(t, h)); n != 2 {
				t.Errorf("cloud.provisioned events = %d, want the 2 written before the audit broke", n)
			}
		})
	}
}

// TestCreatedChangesWhen checks each line of core.cloud.created's "changes
// when" / "does not change when": a repeat makes new VMs and is changed; a
// failed Create is changed; a step refused before Create changes nothing
// and never reaches the driver.
func TestCreatedChangesWhen(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	first, _ := create(t, h, 1)
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 1})
	if err != nil || !res.Changed || fmt.Sprint(res.Output.(map[string]any)["vm_ids"]) == fmt.Sprint(first) {
		t.Fatalf("repeated create: %+v, %v (first made %v)", res, err, first)
	}
	h.cloud.failCreate = true
	res, err = run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 1})
	if module.Code(err) != "quota.exceeded" || !res.Changed {
		t.Fatalf("failed create: %+v, %v", res, err)
	}
	h.cloud.failCreate = false
	made := h.cloud.next
	for _, params := range []map[string]any{
		{"provider": "acme", "count": 4},
		{"provider": "ghost"},
		{"provider": "acme", "profile": "huge"},
		{"provider": "acme", "profile": map[string]any{"colour": "red"}},
	} {
		res, err := run(t, &cloud.Created{}, h, params)
		if err == nil || res.Changed {
			t.Errorf("refused create %v: %+v, %v", params, res, err)
		}
	}
	if h.cloud.next != made {
		t.Fatalf("a refused create reached the driver: %d VMs made, %d before", h.cloud.next, made)
	}
	if souls, _ := h.st.SoulsOfProvider(ctx, "acme"); len(souls) != 2 {
		t.Fatalf("souls = %d, want the 2 of the two creates", len(souls))
	}
}

// TestCreatedAddressChoice: the soul's address is the VM's public or
// private one as the profile (first) or the provider config says, public
// by default when there is one; the outputs carry both and every address;
// the setting is the keeper's (the driver never sees it) and is checked
// strictly.
func TestCreatedAddressChoice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		config       string // the provider's
		profile      map[string]any
		public       bool // the VM has a public address
		want         string
		code         string
		driverCalled bool
	}{
		{name: "default public", config: `{}`, public: true, want: "198.51.100.1"},
		{name: "default private when no public", config: `{}`, want: "10.9.0.1"},
		{name: "provider private", config: `{"address": "private"}`, public: true, want: "10.9.0.1"},
		{name: "profile wins", config: `{"address": "private"}`, profile: map[string]any{"address": "public", "size": "s"}, public: true, want: "198.51.100.1"},
		{name: "profile private", config: `{}`, profile: map[string]any{"address": "private"}, public: true, want: "10.9.0.1"},
		{name: "public asked, none there", config: `{"address": "public"}`, code: "cloud.address_missing", driverCalled: true},
		{name: "bad provider value", config: `{"address": "internal"}`, public: true, code: "cloud.address_invalid"},
		{name: "bad profile value", config: `{}`, profile: map[string]any{"address": true}, public: true, code: "cloud.address_invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, ctx := setup(t)
			h.cloud.public = tc.public
			if _, err := h.st.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "duo", Driver: "fake", FQDNSuffix: "duo.test", Config: json.RawMessage(tc.config)}, Actor: "tok_t"}); err != nil {
				t.Fatal(err)
			}
			params := map[string]any{"provider": "duo"}
			if tc.profile != nil {
				params["profile"] = tc.profile
			}
			res, err := run(t, &cloud.Created{}, h, params)
			if got := len(h.cloud.vms) > 0; tc.code != "" && got != tc.driverCalled {
				t.Fatalf("driver made VMs: %v, want %v", got, tc.driverCalled)
			}
			if tc.code != "" {
				if module.Code(err) != tc.code {
					t.Fatalf("err = %v, want code %s", err, tc.code)
				}
				if !strings.Contains(err.Error(), "address") {
					t.Fatalf("error %q does not name the setting", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(h.cloud.config), "address") {
				t.Fatalf("the driver got the keeper's address key in its config: %s", h.cloud.config)
			}
			host := res.Output.(map[string]any)["hosts"].([]any)[0].(map[string]any)
			if host["address"] != tc.want || host["private_ip"] != "10.9.0.1" {
				t.Fatalf("host = %#v, want address %s", host, tc.want)
			}
			wantPublic := ""
			if tc.public {
				wantPublic = "198.51.100.1"
			}
			addrs := host["addresses"].([]any)
			if host["public_ip"] != wantPublic || len(addrs) != 1+len(wantPublic)/len("198.51.100.1") ||
				addrs[0].(map[string]any)["ip"] != "10.9.0.1" || addrs[0].(map[string]any)["kind"] != "private" || addrs[0].(map[string]any)["network"] != "net-a" {
				t.Fatalf("host = %#v", host)
			}
			so, err := h.st.SoulGet(ctx, host["sid"].(string))
			if err != nil || so.Address != tc.want || so.PrimaryIP != host["primary_ip"] {
				t.Fatalf("soul = %+v, %v; want address %s", so, err, tc.want)
			}
		})
	}
}

// TestCreatedSeeds: each created soul gets the step's seeds, created by
// the run's creator; a seed whose scenario is invalid fails the step with
// cloud.seed_invalid naming it, before the driver is asked for anything.
func TestCreatedSeeds(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	seed := "steps:\n  - name: grow\n    on: keeper\n    module: core.cloud.resized\n    params: {provider: acme, vm_ids: [\"${ input.sid }\"], profile: small}\n"
	for name, tc := range map[string]struct {
		seeds []any
		want  string
	}{
		"unknown module": {[]any{map[string]any{"scenario": seed}, map[string]any{"scenario": "steps:\n  - name: x\n    on: keeper\n    module: core.nope.done\n"}}, "seeds[1].scenario:"},
		"empty scenario": {[]any{map[string]any{"scenario": " "}}, "seeds[0].scenario: must be"},
		"sid in input":   {[]any{map[string]any{"scenario": seed, "input": map[string]any{"sid": "x"}}}, "seeds[0].input.sid"},
		"not yaml":       {[]any{map[string]any{"scenario": "steps: [\n"}}, "seeds[0].scenario"},
	} {
		_, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 1, "seeds": tc.seeds})
		if module.Code(err) != "cloud.seed_invalid" || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v; want cloud.seed_invalid with %q", name, err, tc.want)
		}
	}
	if len(h.cloud.vms) != 0 {
		t.Fatalf("invalid seeds still made %d VMs", len(h.cloud.vms))
	}
	res, err := run(t, &cloud.Created{}, h, map[string]any{"provider": "acme", "count": 2, "seeds": []any{map[string]any{"scenario": seed, "input": map[string]any{"size": "m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range res.Output.(map[string]any)["hosts"].([]any) {
		sid := host.(map[string]any)["sid"].(string)
		seeds, err := h.st.Seeds(ctx, sid)
		if err != nil || len(seeds) != 1 || seeds[0].Scenario != seed || seeds[0].CreatedBy != "tok_creator" || seeds[0].Status != store.SeedActive || string(seeds[0].Input) != `{"size":"m"}` {
			t.Fatalf("seeds of %s = %+v, %v", sid, seeds, err)
		}
	}
}

// TestCreatedSelfOnboardAwaitsJoin: a self_onboard soul whose keeper's
// userdata joins, and whose driver reported no host key, is made to wait
// for its join's pin (no trust on first use); without self_onboard, or
// with a keeper that does not join, it is not.
func TestCreatedSelfOnboardAwaitsJoin(t *testing.T) {
	t.Parallel()
	h, ctx := setup(t)
	joining := &keeperHost{st: h.st, cloud: h.cloud, joins: func(driver string) bool { return driver == "fake" }}
	for _, tc := range []struct {
		host   *keeperHost
		params map[string]any
		want   bool
	}{
		{joining, map[string]any{"provider": "acme", "count": 1, "self_onboard": true, "name": "a"}, true},
		{joining, map[string]any{"provider": "acme", "count": 1, "generate_userdata": true}, false},
		{h, map[string]any{"provider": "acme", "count": 1, "self_onboard": true, "name": "b"}, false},
	} {
		raw, _ := json.Marshal(module.ApplyDefaults((&cloud.Created{}).Info(), tc.params))
		res, err := provision(t, &cloud.Created{}, tc.host).Run(ctx, module.RunInfo{ID: "run_test", Step: "provision", Creator: "tok_creator"}, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		sid := res.Output.(map[string]any)["hosts"].([]any)[0].(map[string]any)["sid"].(string)
		so, _ := h.st.SoulGet(ctx, sid)
		if so.Connection.AwaitJoin != tc.want {
			t.Errorf("%v: await_join = %v, want %v", tc.params, so.Connection.AwaitJoin, tc.want)
		}
	}
}
