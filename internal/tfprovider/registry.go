package tfprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/soulstack/soulstack/client"
)

var replace = []planmodifier.String{stringplanmodifier.RequiresReplace()}

var keepComputed = []planmodifier.String{stringplanmodifier.UseStateForUnknown()}

// requiredString is a required attribute whose change replaces the object.
func requiredString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Required: true, Description: desc, PlanModifiers: replace}
}

// optionalString is an optional attribute whose change replaces the object.
func optionalString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Description: desc, PlanModifiers: replace}
}

// jsonString is a JSON-object attribute whose change replaces the object.
func jsonString(desc string, required bool) schema.StringAttribute {
	return schema.StringAttribute{Required: required, Optional: !required, Description: desc + " A JSON object (use jsonencode).",
		PlanModifiers: replace, Validators: []validator.String{jsonObject{}}}
}

func computedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: desc, PlanModifiers: keepComputed}
}

func timeString(t time.Time) types.String {
	if t.IsZero() {
		return types.StringNull()
	}
	return types.StringValue(t.UTC().Format(time.RFC3339))
}

// base holds the configured keeper of a resource.
type base struct{ k *keeper }

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	b.k = keeperFrom(req.ProviderData, &resp.Diagnostics)
}

// update is never reached with a change for the registries (every
// attribute replaces); it keeps the plan.
func update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.Append(resp.State.Set(ctx, req.Plan.Raw)...)
}

// --- soulstack_provider ---

type providerResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*providerResource)(nil)
	_ resource.ResourceWithImportState = (*providerResource)(nil)
)

type providerResourceModel struct {
	ID             types.String `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	Driver         types.String `tfsdk:"driver"`
	Region         types.String `tfsdk:"region"`
	CredentialsRef types.String `tfsdk:"credentials_ref"`
	FQDNSuffix     types.String `tfsdk:"fqdn_suffix"`
	Config         types.String `tfsdk:"config"`
	CreatedAt      types.String `tfsdk:"created_at"`
}

func (r *providerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_provider"
}

func (r *providerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A cloud provider in the keeper's registry: a driver, a region and a reference to its credentials. Any change replaces it; import by name.",
		Attributes: map[string]schema.Attribute{
			"id":              computedString("The provider's name."),
			"name":            requiredString("DNS label: lower-case letters, digits and '-'."),
			"driver":          requiredString("The CloudDriver plugin, soul-cloud-<driver> (e.g. local)."),
			"region":          optionalString("The provider's region."),
			"credentials_ref": optionalString("Reference to the credentials (env:NAME, file:/abs/path, vault:<path>#<field>); resolved only by the keeper at use time."),
			"fqdn_suffix":     optionalString("DNS suffix of the VMs' FQDNs, e.g. local.test."),
			"config":          jsonString("Driver-specific settings.", false),
			"created_at":      computedString("When it was registered (RFC 3339)."),
		},
	}
}

func (r *providerResource) set(m *providerResourceModel, p *client.Provider) {
	m.ID, m.Name, m.Driver = types.StringValue(p.Name), types.StringValue(p.Name), types.StringValue(p.Driver)
	m.Region = optString(m.Region, p.Region)
	m.CredentialsRef = optString(m.CredentialsRef, p.CredentialsRef)
	m.FQDNSuffix = optString(m.FQDNSuffix, p.FQDNSuffix)
	m.Config = keepJSON(m.Config, p.Config)
	m.CreatedAt = timeString(p.CreatedAt)
}

func (r *providerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m providerResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	cfg, err := decodeObject(m.Config.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("config"), "Not a JSON object", err.Error())
		return
	}
	if len(cfg) == 0 {
		cfg = nil
	}
	in := client.ProviderCreate{Name: m.Name.ValueString(), Driver: m.Driver.ValueString(), Region: m.Region.ValueString(),
		CredentialsRef: m.CredentialsRef.ValueString(), FQDNSuffix: m.FQDNSuffix.ValueString(), Config: cfg}
	p, err := do(ctx, r.k, func(ctx context.Context) (*client.Provider, error) { return r.k.c.ProviderCreate(ctx, in) })
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot create provider %q", in.Name), err)
		return
	}
	r.set(&m, p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *providerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m providerResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Name.ValueString()
	if name == "" {
		name = m.ID.ValueString()
	}
	p, err := do(ctx, r.k, func(ctx context.Context) (*client.Provider, error) { return r.k.c.ProviderGet(ctx, name) })
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot read provider %q", name), err)
		return
	}
	r.set(&m, p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *providerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	update(ctx, req, resp)
}

func (r *providerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m providerResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Name.ValueString()
	_, err := do(ctx, r.k, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.k.c.ProviderDelete(ctx, name) })
	if err != nil && !isNotFound(err) {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot delete provider %q", name), err)
	}
}

func (r *providerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
}

// --- soulstack_profile ---

type profileResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*profileResource)(nil)
	_ resource.ResourceWithImportState = (*profileResource)(nil)
)

type profileModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Provider  types.String `tfsdk:"provider_name"`
	Spec      types.String `tfsdk:"spec"`
	CreatedAt types.String `tfsdk:"created_at"`
}

func (r *profileResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_profile"
}

func (r *profileResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A VM profile on top of a provider. Any change replaces it; import by name.",
		Attributes: map[string]schema.Attribute{
			"id":            computedString("The profile's name."),
			"name":          requiredString("DNS label."),
			"provider_name": requiredString("Name of a registered provider (the API's provider field: Terraform reserves the name provider; refer to soulstack_provider.x.name to order them)."),
			"spec":          jsonString("Backend-specific VM parameters, e.g. {\"cpus\":1,\"memory_mb\":512}.", true),
			"created_at":    computedString("When it was registered (RFC 3339)."),
		},
	}
}

func (r *profileResource) set(m *profileModel, p *client.Profile) {
	m.ID, m.Name, m.Provider = types.StringValue(p.Name), types.StringValue(p.Name), types.StringValue(p.Provider)
	m.Spec = keepJSON(m.Spec, p.Spec)
	if m.Spec.IsNull() {
		m.Spec = types.StringValue("{}")
	}
	m.CreatedAt = timeString(p.CreatedAt)
}

func (r *profileResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, err := decodeObject(m.Spec.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("spec"), "Not a JSON object", err.Error())
		return
	}
	in := client.ProfileCreate{Name: m.Name.ValueString(), Provider: m.Provider.ValueString(), Spec: spec}
	p, err := do(ctx, r.k, func(ctx context.Context) (*client.Profile, error) { return r.k.c.ProfileCreate(ctx, in) })
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot create profile %q", in.Name), err)
		return
	}
	r.set(&m, p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *profileResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Name.ValueString()
	p, err := do(ctx, r.k, func(ctx context.Context) (*client.Profile, error) { return r.k.c.ProfileGet(ctx, name) })
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot read profile %q", name), err)
		return
	}
	r.set(&m, p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *profileResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	update(ctx, req, resp)
}

func (r *profileResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Name.ValueString()
	_, err := do(ctx, r.k, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.k.c.ProfileDelete(ctx, name) })
	if err != nil && !isNotFound(err) {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot delete profile %q", name), err)
	}
}

func (r *profileResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
}

// --- soulstack_soul ---

type soulResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*soulResource)(nil)
	_ resource.ResourceWithImportState = (*soulResource)(nil)
)

type soulModel struct {
	ID         types.String `tfsdk:"id"`
	SID        types.String `tfsdk:"sid"`
	Address    types.String `tfsdk:"address"`
	User       types.String `tfsdk:"user"`
	Port       types.Int64  `tfsdk:"port"`
	KeyRef     types.String `tfsdk:"key_ref"`
	Attributes types.String `tfsdk:"attributes"`
	Status     types.String `tfsdk:"status"`
	Provider   types.String `tfsdk:"provider_name"`
}

func (r *soulResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_soul"
}

func (r *soulResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An existing host registered as a soul (e.g. a VM made by another Terraform provider), reached over SSH. Any change replaces it; import by SID.",
		Attributes: map[string]schema.Attribute{
			"id":      computedString("The SID."),
			"sid":     requiredString("The soul's id: a DNS name."),
			"address": requiredString("IP address or host name the keeper connects to."),
			"user": schema.StringAttribute{Optional: true, Computed: true, Description: "SSH user (default root); sudo -n is used when it is not root.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()}},
			"port": schema.Int64Attribute{Optional: true, Computed: true, Description: "SSH port (default 22).",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown(), int64planmodifier.RequiresReplace()}},
			"key_ref":       optionalString("Reference to the SSH private key: env:NAME, file:/abs/path or vault:<path>#<field>; the key itself never leaves the keeper's side."),
			"attributes":    jsonString("Free attributes of the soul.", false),
			"status":        computedString("pending, active, unreachable or destroyed."),
			"provider_name": computedString("The provider that made it, if any (the API's provider field)."),
		},
	}
}

func (r *soulResource) set(m *soulModel, s *client.Soul) {
	m.ID, m.SID = types.StringValue(s.SID), types.StringValue(s.SID)
	m.Address = types.StringValue(s.Address)
	user := s.Connection.User
	if user == "" {
		user = "root"
	}
	port := s.Connection.Port
	if port == 0 {
		port = 22
	}
	m.User, m.Port = types.StringValue(user), types.Int64Value(int64(port))
	m.KeyRef = optString(m.KeyRef, s.Connection.KeyRef)
	m.Attributes = keepJSON(m.Attributes, s.Attributes)
	m.Status = types.StringValue(s.Status)
	m.Provider = types.StringValue(s.Provider)
}

func (r *soulResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m soulModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	attrs, err := decodeObject(m.Attributes.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("attributes"), "Not a JSON object", err.Error())
		return
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	in := client.SoulCreate{SID: m.SID.ValueString(), Address: m.Address.ValueString(), Attributes: attrs,
		Connection: client.Connection{Transport: "ssh", User: m.User.ValueString(), Port: int(m.Port.ValueInt64()), KeyRef: m.KeyRef.ValueString()}}
	s, err := do(ctx, r.k, func(ctx context.Context) (*client.Soul, error) { return r.k.c.SoulCreate(ctx, in) })
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot register soul %q", in.SID), err)
		return
	}
	r.set(&m, s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *soulResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m soulModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	sid := m.SID.ValueString()
	s, err := do(ctx, r.k, func(ctx context.Context) (*client.Soul, error) { return r.k.c.SoulGet(ctx, sid) })
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot read soul %q", sid), err)
		return
	}
	r.set(&m, s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *soulResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	update(ctx, req, resp)
}

func (r *soulResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m soulModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	sid := m.SID.ValueString()
	_, err := do(ctx, r.k, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.k.c.SoulDelete(ctx, sid) })
	if err != nil && !isNotFound(err) {
		addError(&resp.Diagnostics, nil, fmt.Sprintf("Cannot delete soul %q", sid), err)
	}
}

func (r *soulResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("sid"), req.ID)...)
}
