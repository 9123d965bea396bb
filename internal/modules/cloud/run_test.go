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
	resizable   bool
	creds       []byte
	userdata    []string
}

func (f *fakeCloud) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: f.resizable, Listable: true}, nil
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
	f.creds, f.userdata = req.Provider.Credentials, req.Userdata
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
		f.vms[id] = vm
		out = append(out, vm)
	}
	return out, nil
}

func (f *fakeCloud) Destroy(_ context.Context, req driversdk.DestroyRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDestroy {
		return driversdk.Errorf("quota.api_down", "the provider's API is down")
	}
	for _, id := range req.VMIDs {
		delete(f.vms, id)
	}
	return nil
}

func (f *fakeCloud) Resize(_ context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	var out []driversdk.ResizeResult
	for _, id := range req.VMIDs {
		out = append(out, driversdk.ResizeResult{VMID: id, CausedDowntime: true})
	}
	return out, nil
}

func (f *fakeCloud) List(context.Context, driversdk.ListRequest) ([]driversdk.VM, error) {
	return nil, nil
}

// keeperHost is the keeper side the states see, over a real store.
type keeperHost struct {
	st    *sqlstore.Store
	cloud *fakeCloud
}

func (h *keeperHost) SID() string { return module.Keeper }
func (h *keeperHost) Exec(context.Context, module.Command) (module.ExecResult, error) {
	return module.ExecResult{}, module.ErrNoExec
}
func (h *keeperHost) Registry() cloud.Registry { return h.st }
func (h *keeperHost) Driver(_ context.Context, name string) (driversdk.Driver, error) {
	if name != "fake" {
		return nil, driversdk.Errorf("driver.not_found", "no plugin soul-cloud-%s", name)
	}
	return h.cloud, nil
}
func (h *keeperHost) Credentials(_ context.Context, ref string) ([]byte, error) {
	return []byte("resolved:" + ref), nil
}
func (h *keeperHost) AuthorizedKey() string { return "ssh-ed25519 AAAAkeeper soulstack-keeper" }
func (h *keeperHost) Userdata(u cloud.UserdataVars) (string, error) {
	return fmt.Sprintf("#cloud-config\n# sid=%s index=%d token=%s\n", u.SID, u.Index, u.Token), nil
}
func (h *keeperHost) BootstrapTTL() time.Duration { return time.Hour }

func setup(t *testing.T) (*keeperHost, context.Context) {
	t.Helper()
	st := testdb.SQLite.Open(t)
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
	return m.Run(context.Background(), module.RunInfo{ID: "run_test", Step: "provision", Creator: "tok_creator"}, raw, h)
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
	res, err := run(t, &cloud.Resized{}, h, map[string]any{"provider": "acme", "vm_ids": []any{"vm-1"}, "profile": "small"})
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
	n := 0
	for _, e := range events {
		if e.Action == "cloud.provisioned" {
			n++
			if e.ActorAID != "tok_creator" {
				t.Errorf("cloud.provisioned by %q, want the run's creator: %s", e.ActorAID, e.Payload)
			}
		}
	}
	if n != 3 {
		t.Fatalf("cloud.provisioned events = %d, want 3 (created, resized, destroyed)", n)
	}
}
