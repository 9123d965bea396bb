package tfprovider_test

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-log/tfsdklog"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/testlog"
	"github.com/soulstack/soulstack/internal/tfprovider"
)

// testKeeper is a real keeper on SQLite, served in-process on loopback.
type testKeeper struct {
	URL   string
	Token string
	Dir   string
	Logs  *testlog.Buffer
	C     *client.Client
}

// startKeeper runs a keeper with its own data directory until the test
// ends.
func startKeeper(t *testing.T) *testKeeper {
	t.Helper()
	return startKeeperOn(t, "127.0.0.1:0")
}

// startKeeperOn is startKeeper listening on listen; a keeper on 0.0.0.0
// (HTTPS with its own CA) is reached through 127.0.0.1, and its client
// trusts that CA.
func startKeeperOn(t *testing.T, listen string) *testKeeper {
	t.Helper()
	dir := t.TempDir()
	k := keepertest.Start(t, func(c *config.Config) {
		c.Listen, c.DataDir, c.Log.Level = listen, filepath.Join(dir, ".keeper"), "debug"
	})
	return &testKeeper{URL: k.URL, Token: k.Token, Dir: dir, Logs: k.Logs, C: k.Client}
}

// runCount counts the keeper's runs.
func (k *testKeeper) runCount(t *testing.T) int {
	t.Helper()
	n, after := 0, ""
	for {
		page, err := k.C.RunList(context.Background(), client.RunListOptions{ListOptions: client.ListOptions{Limit: 100, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
		if page.Next == "" {
			return n
		}
		after = page.Next
	}
}

// unknown marks an unknown value in a config or plan built by obj.
type unknown struct{}

// tf drives the provider through its protocol server, the way terraform
// does: validate, plan, apply, read, import, with tftypes values.
type tf struct {
	t      *testing.T
	ctx    context.Context
	srv    tfprotov6.ProviderServer
	schema *tfprotov6.GetProviderSchemaResponse
}

// newTF starts the provider's protocol server with trace logs captured.
func newTF(t *testing.T) *tf {
	t.Helper()
	// TestMain points TF_LOG_PATH_MASK at logDir: the sink writes this
	// test's trace log to its own file.
	ctx := tfsdklog.RegisterTestSink(context.Background(), t)
	ctx = tfsdklog.NewRootSDKLogger(ctx, tfsdklog.WithLevel(hclog.Trace))
	ctx = tfsdklog.NewRootProviderLogger(ctx, tfsdklog.WithLevel(hclog.Trace))
	srv := providerserver.NewProtocol6(tfprovider.New("test")())()
	s, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d := errs(s.Diagnostics); d != "" {
		t.Fatal(d)
	}
	return &tf{t: t, ctx: ctx, srv: srv, schema: s}
}

// logDir holds each test's provider log (TF_LOG=TRACE).
var logDir string

func TestMain(m *testing.M) {
	// Local VMs (TestExamplePostgresOnVM) are started by re-executing the
	// test binary.
	localcloud.RunIfChild()
	dir, err := os.MkdirTemp("", "tfprovider-logs-")
	if err != nil {
		panic(err)
	}
	logDir = dir
	os.Setenv("TF_LOG", "TRACE")
	os.Setenv("TF_LOG_PATH_MASK", filepath.Join(dir, "%s.log"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// providerLog returns what the provider logged in this test so far.
func (h *tf) providerLog() string {
	b, err := os.ReadFile(filepath.Join(logDir, strings.ReplaceAll(h.t.Name(), "/", "__")+".log"))
	if err != nil {
		h.t.Fatalf("provider log: %v", err)
	}
	return string(b)
}

// configure configures the provider and returns its error diagnostics.
func (h *tf) configure(cfg map[string]any) string {
	h.t.Helper()
	typ := h.schema.Provider.ValueType()
	v := h.dyn(typ, obj(typ, cfg))
	vr, err := h.srv.ValidateProviderConfig(h.ctx, &tfprotov6.ValidateProviderConfigRequest{Config: v})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(vr.Diagnostics); d != "" {
		return d
	}
	resp, err := h.srv.ConfigureProvider(h.ctx, &tfprotov6.ConfigureProviderRequest{TerraformVersion: "1.11.0", Config: v})
	if err != nil {
		h.t.Fatal(err)
	}
	return errs(resp.Diagnostics)
}

// connect starts a provider configured for k.
func connect(t *testing.T, k *testKeeper) *tf {
	t.Helper()
	h := newTF(t)
	if d := h.configure(map[string]any{"endpoint": k.URL, "token": k.Token}); d != "" {
		t.Fatal(d)
	}
	return h
}

func (h *tf) dyn(typ tftypes.Type, v tftypes.Value) *tfprotov6.DynamicValue {
	h.t.Helper()
	d, err := tfprotov6.NewDynamicValue(typ, v)
	if err != nil {
		h.t.Fatal(err)
	}
	return &d
}

func (h *tf) resType(name string) tftypes.Type {
	s, ok := h.schema.ResourceSchemas[name]
	if !ok {
		h.t.Fatalf("no resource %s", name)
	}
	return s.ValueType()
}

// diag renders diagnostics as terraform would, one per paragraph.
func diags(ds []*tfprotov6.Diagnostic, sev tfprotov6.DiagnosticSeverity) string {
	var b strings.Builder
	for _, d := range ds {
		if d.Severity != sev {
			continue
		}
		at := ""
		if d.Attribute != nil {
			at = " [at " + d.Attribute.String() + "]"
		}
		fmt.Fprintf(&b, "%s%s: %s\n", d.Summary, at, d.Detail)
	}
	return b.String()
}

func errs(ds []*tfprotov6.Diagnostic) string { return diags(ds, tfprotov6.DiagnosticSeverityError) }

// obj builds a value of typ from Go values: nil is null, unknown{} is
// unknown, maps fill objects (absent attributes are null) and maps.
func obj(typ tftypes.Type, v any) tftypes.Value {
	if v == nil {
		return tftypes.NewValue(typ, nil)
	}
	if _, ok := v.(unknown); ok {
		return tftypes.NewValue(typ, tftypes.UnknownValue)
	}
	switch {
	case typ.Is(tftypes.Object{}):
		ot := typ.(tftypes.Object)
		m := v.(map[string]any)
		vals := map[string]tftypes.Value{}
		for name, at := range ot.AttributeTypes {
			vals[name] = obj(at, m[name])
		}
		return tftypes.NewValue(typ, vals)
	case typ.Is(tftypes.Map{}):
		et := typ.(tftypes.Map).ElementType
		vals := map[string]tftypes.Value{}
		for k, e := range v.(map[string]any) {
			vals[k] = obj(et, e)
		}
		return tftypes.NewValue(typ, vals)
	case typ.Is(tftypes.Number):
		switch n := v.(type) {
		case int:
			return tftypes.NewValue(typ, big.NewFloat(float64(n)))
		case int64:
			return tftypes.NewValue(typ, big.NewFloat(float64(n)))
		}
	}
	return tftypes.NewValue(typ, v)
}

// goValue turns a value back into Go: objects and maps into
// map[string]any, numbers into int64, unknown into unknown{}.
func goValue(v tftypes.Value) any {
	if v.IsNull() {
		return nil
	}
	if !v.IsKnown() {
		return unknown{}
	}
	switch {
	case v.Type().Is(tftypes.Object{}), v.Type().Is(tftypes.Map{}):
		var m map[string]tftypes.Value
		_ = v.As(&m)
		out := map[string]any{}
		for k, e := range m {
			out[k] = goValue(e)
		}
		return out
	case v.Type().Is(tftypes.List{}), v.Type().Is(tftypes.Set{}):
		var l []tftypes.Value
		_ = v.As(&l)
		out := []any{}
		for _, e := range l {
			out = append(out, goValue(e))
		}
		return out
	case v.Type().Is(tftypes.Number):
		var f big.Float
		_ = v.As(&f)
		i, _ := f.Int64()
		return i
	case v.Type().Is(tftypes.Bool):
		var b bool
		_ = v.As(&b)
		return b
	}
	var s string
	_ = v.As(&s)
	return s
}

// state is a resource's state as terraform keeps it.
type state struct {
	name string
	v    tftypes.Value
}

// attrs returns the state as Go values.
func (s *state) attrs() map[string]any {
	if s == nil || s.v.IsNull() {
		return nil
	}
	return goValue(s.v).(map[string]any)
}

func (s *state) str(name string) string {
	v, _ := s.attrs()[name].(string)
	return v
}

// planned is the outcome of PlanResourceChange.
type planned struct {
	v       tftypes.Value
	replace []string
	errs    string
}

// validate runs ValidateResourceConfig.
func (h *tf) validate(name string, cfg map[string]any) string {
	h.t.Helper()
	typ := h.resType(name)
	resp, err := h.srv.ValidateResourceConfig(h.ctx, &tfprotov6.ValidateResourceConfigRequest{TypeName: name, Config: h.dyn(typ, obj(typ, cfg))})
	if err != nil {
		h.t.Fatal(err)
	}
	return errs(resp.Diagnostics)
}

// proposed merges config over the prior state the way terraform does:
// a computed attribute left out of the config keeps its prior value.
func (h *tf) proposed(name string, prior *state, cfg map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range cfg {
		out[k] = v
	}
	if prior == nil {
		return out
	}
	pa := prior.attrs()
	for _, a := range h.schema.ResourceSchemas[name].Block.Attributes {
		if _, set := cfg[a.Name]; !set && a.Computed {
			out[a.Name] = pa[a.Name]
		}
	}
	return out
}

// plan validates and plans cfg over prior (nil: create).
func (h *tf) plan(name string, prior *state, cfg map[string]any) planned {
	h.t.Helper()
	if d := h.validate(name, cfg); d != "" {
		return planned{errs: d}
	}
	typ := h.resType(name)
	priorV := tftypes.NewValue(typ, nil)
	if prior != nil {
		priorV = prior.v
	}
	resp, err := h.srv.PlanResourceChange(h.ctx, &tfprotov6.PlanResourceChangeRequest{
		TypeName: name, PriorState: h.dyn(typ, priorV), ProposedNewState: h.dyn(typ, obj(typ, h.proposed(name, prior, cfg))),
		Config: h.dyn(typ, obj(typ, cfg)),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	p := planned{errs: errs(resp.Diagnostics)}
	if p.errs != "" {
		return p
	}
	p.v, err = resp.PlannedState.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, a := range resp.RequiresReplace {
		p.replace = append(p.replace, a.String())
	}
	return p
}

// applyPlan applies a plan and returns the new state (nil when the
// provider returned none) and the error diagnostics.
func (h *tf) applyPlan(name string, prior *state, p tftypes.Value, cfg map[string]any) (*state, string) {
	h.t.Helper()
	typ := h.resType(name)
	priorV := tftypes.NewValue(typ, nil)
	if prior != nil {
		priorV = prior.v
	}
	cfgV := tftypes.NewValue(typ, nil)
	if cfg != nil {
		cfgV = obj(typ, cfg)
	}
	resp, err := h.srv.ApplyResourceChange(h.ctx, &tfprotov6.ApplyResourceChangeRequest{
		TypeName: name, PriorState: h.dyn(typ, priorV), PlannedState: h.dyn(typ, p), Config: h.dyn(typ, cfgV),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	d := errs(resp.Diagnostics)
	if resp.NewState == nil {
		return nil, d
	}
	v, err := resp.NewState.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	if v.IsNull() {
		return nil, d
	}
	return &state{name: name, v: v}, d
}

// apply plans and applies cfg over prior as terraform apply does: a plan
// that requires replacement destroys prior first, then creates.
func (h *tf) apply(name string, prior *state, cfg map[string]any) (*state, string) {
	h.t.Helper()
	p := h.plan(name, prior, cfg)
	if p.errs != "" {
		return prior, p.errs
	}
	if prior != nil && len(p.replace) > 0 {
		if d := h.destroy(prior); d != "" {
			return prior, d
		}
		prior = nil
		if p = h.plan(name, nil, cfg); p.errs != "" {
			return nil, p.errs
		}
	}
	return h.applyPlan(name, prior, p.v, cfg)
}

// destroy plans and applies the deletion of s.
func (h *tf) destroy(s *state) string {
	h.t.Helper()
	typ := h.resType(s.name)
	null := tftypes.NewValue(typ, nil)
	resp, err := h.srv.PlanResourceChange(h.ctx, &tfprotov6.PlanResourceChangeRequest{
		TypeName: s.name, PriorState: h.dyn(typ, s.v), ProposedNewState: h.dyn(typ, null), Config: h.dyn(typ, null),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(resp.Diagnostics); d != "" {
		return d
	}
	_, d := h.applyPlan(s.name, s, null, nil)
	return d
}

// read refreshes s.
func (h *tf) read(s *state) (*state, string) {
	h.t.Helper()
	typ := h.resType(s.name)
	resp, err := h.srv.ReadResource(h.ctx, &tfprotov6.ReadResourceRequest{TypeName: s.name, CurrentState: h.dyn(typ, s.v)})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(resp.Diagnostics); d != "" {
		return s, d
	}
	v, err := resp.NewState.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	if v.IsNull() {
		return nil, ""
	}
	return &state{name: s.name, v: v}, ""
}

// importState imports by id and reads, as terraform import does.
func (h *tf) importState(name, id string) (*state, string) {
	h.t.Helper()
	typ := h.resType(name)
	resp, err := h.srv.ImportResourceState(h.ctx, &tfprotov6.ImportResourceStateRequest{TypeName: name, ID: id})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(resp.Diagnostics); d != "" {
		return nil, d
	}
	if len(resp.ImportedResources) != 1 {
		h.t.Fatalf("imported %d resources", len(resp.ImportedResources))
	}
	v, err := resp.ImportedResources[0].State.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.read(&state{name: name, v: v})
}

// data reads a data source.
func (h *tf) data(name string, cfg map[string]any) (map[string]any, string) {
	h.t.Helper()
	typ := h.schema.DataSourceSchemas[name].ValueType()
	v := h.dyn(typ, obj(typ, cfg))
	vr, err := h.srv.ValidateDataResourceConfig(h.ctx, &tfprotov6.ValidateDataResourceConfigRequest{TypeName: name, Config: v})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(vr.Diagnostics); d != "" {
		return nil, d
	}
	resp, err := h.srv.ReadDataSource(h.ctx, &tfprotov6.ReadDataSourceRequest{TypeName: name, Config: v})
	if err != nil {
		h.t.Fatal(err)
	}
	if d := errs(resp.Diagnostics); d != "" {
		return nil, d
	}
	out, err := resp.State.Unmarshal(typ)
	if err != nil {
		h.t.Fatal(err)
	}
	return goValue(out).(map[string]any), ""
}
