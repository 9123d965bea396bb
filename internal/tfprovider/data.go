package tfprovider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/soulstack/soulstack/client"
)

type dataBase struct{ k *keeper }

func (b *dataBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	b.k = keeperFrom(req.ProviderData, &resp.Diagnostics)
}

// --- data "soulstack_souls" ---

type soulsDataSource struct{ dataBase }

var _ datasource.DataSourceWithConfigure = (*soulsDataSource)(nil)

type soulsModel struct {
	Status   types.String `tfsdk:"status"`
	Provider types.String `tfsdk:"provider_name"`
	Souls    []soulItem   `tfsdk:"souls"`
}

type soulItem struct {
	SID       types.String `tfsdk:"sid"`
	Status    types.String `tfsdk:"status"`
	Address   types.String `tfsdk:"address"`
	Provider  types.String `tfsdk:"provider"`
	VMID      types.String `tfsdk:"vm_id"`
	PrimaryIP types.String `tfsdk:"primary_ip"`
	User      types.String `tfsdk:"user"`
	Port      types.Int64  `tfsdk:"port"`
	KeyRef    types.String `tfsdk:"key_ref"`
}

func (d *soulsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_souls"
}

func (d *soulsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The keeper's souls, optionally only those with a status or of a provider.",
		Attributes: map[string]schema.Attribute{
			"status":        schema.StringAttribute{Optional: true, Description: "Only souls with this status (pending, active, unreachable, destroyed)."},
			"provider_name": schema.StringAttribute{Optional: true, Description: "Only souls made by this provider (Terraform reserves the name provider)."},
			"souls": schema.ListNestedAttribute{Computed: true, Description: "The souls, in the keeper's order.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"sid":        schema.StringAttribute{Computed: true},
					"status":     schema.StringAttribute{Computed: true},
					"address":    schema.StringAttribute{Computed: true},
					"provider":   schema.StringAttribute{Computed: true},
					"vm_id":      schema.StringAttribute{Computed: true},
					"primary_ip": schema.StringAttribute{Computed: true},
					"user":       schema.StringAttribute{Computed: true},
					"port":       schema.Int64Attribute{Computed: true},
					"key_ref":    schema.StringAttribute{Computed: true},
				}}},
		},
	}
}

func (d *soulsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m soulsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.Souls = []soulItem{}
	after := ""
	for {
		page, err := do(ctx, d.k, func(c context.Context) (*client.SoulList, error) {
			return d.k.c.SoulList(c, client.ListOptions{Limit: 500, After: after})
		})
		if err != nil {
			addError(&resp.Diagnostics, nil, "Cannot list souls", err)
			return
		}
		for _, s := range page.Items {
			if v := m.Status.ValueString(); v != "" && !strings.EqualFold(v, s.Status) {
				continue
			}
			if v := m.Provider.ValueString(); v != "" && v != s.Provider {
				continue
			}
			m.Souls = append(m.Souls, soulItem{
				SID: types.StringValue(s.SID), Status: types.StringValue(s.Status), Address: types.StringValue(s.Address),
				Provider: types.StringValue(s.Provider), VMID: types.StringValue(s.VMID), PrimaryIP: types.StringValue(s.PrimaryIP),
				User: types.StringValue(s.Connection.User), Port: types.Int64Value(int64(s.Connection.Port)), KeyRef: types.StringValue(s.Connection.KeyRef),
			})
		}
		if page.Next == "" || page.Next == after {
			break
		}
		after = page.Next
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// --- data "soulstack_run" ---

type runDataSource struct{ dataBase }

var _ datasource.DataSourceWithConfigure = (*runDataSource)(nil)

type runDataModel struct {
	ID           types.String `tfsdk:"id"`
	Name         types.String `tfsdk:"name"`
	Key          types.String `tfsdk:"key"`
	Phase        types.String `tfsdk:"phase"`
	Message      types.String `tfsdk:"message"`
	Outputs      types.String `tfsdk:"outputs"`
	Steps        types.Map    `tfsdk:"steps"`
	ErrorCode    types.String `tfsdk:"error_code"`
	ErrorMessage types.String `tfsdk:"error_message"`
}

func (d *runDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_run"
}

func (d *runDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "One run of the keeper, by id: its phase, outputs and each step's status.",
		Attributes: map[string]schema.Attribute{
			"id":            schema.StringAttribute{Required: true, Description: "The run's id."},
			"name":          schema.StringAttribute{Computed: true, Description: "The scenario's name."},
			"key":           schema.StringAttribute{Computed: true, Description: "The run's re-run key."},
			"phase":         schema.StringAttribute{Computed: true, Description: "Pending, Running, Succeeded, Failed or Cancelled."},
			"message":       schema.StringAttribute{Computed: true, Description: "The JSON text of the outputs when the run Succeeded, the error otherwise (`<step> on <sid>: <code>: <message>`, several joined with `; `); masked."},
			"outputs":       schema.StringAttribute{Computed: true, Description: "Each step's output by step name, as JSON (masked)."},
			"steps":         schema.MapAttribute{Computed: true, ElementType: types.StringType, Description: "Each step's status by step name."},
			"error_code":    schema.StringAttribute{Computed: true, Description: "Why the run failed, as a dotted code; empty otherwise."},
			"error_message": schema.StringAttribute{Computed: true, Description: "Why the run failed; empty otherwise."},
		},
	}
}

func (d *runDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m runDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := m.ID.ValueString()
	run, err := do(ctx, d.k, func(c context.Context) (*client.Run, error) { return d.k.c.RunGet(c, id) })
	if err != nil {
		addError(&resp.Diagnostics, nil, "Cannot read run "+id, err)
		return
	}
	var rm runModel
	resp.Diagnostics.Append(setRun(ctx, &rm, run, nil)...)
	m.Name, m.Key, m.Phase = types.StringValue(run.Name), types.StringValue(run.Key), rm.Phase
	m.Message, m.Outputs, m.Steps = rm.Message, rm.Outputs, rm.Steps
	m.ErrorCode, m.ErrorMessage = types.StringValue(""), types.StringValue("")
	if run.Error != nil {
		m.ErrorCode, m.ErrorMessage = types.StringValue(run.Error.Code), types.StringValue(run.Error.Message)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
