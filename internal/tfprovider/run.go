package tfprovider

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/secret"
)

// DefaultWaitTimeout is how long a soulstack_run waits for its run unless
// wait_timeout_sec says otherwise.
const DefaultWaitTimeout = 900

// pollInterval is the pause between two looks at a running run.
var pollInterval = 300 * time.Millisecond

// inlineFile names an inline scenario in the keeper's file:line messages.
const inlineFile = "inline.yaml"

type runResource struct{ base }

var (
	_ resource.ResourceWithConfigure  = (*runResource)(nil)
	_ resource.ResourceWithModifyPlan = (*runResource)(nil)
)

type runModel struct {
	ID                types.String `tfsdk:"id"`
	Scenario          types.String `tfsdk:"scenario"`
	Input             types.String `tfsdk:"input"`
	SensitiveInput    types.String `tfsdk:"sensitive_input"`
	Key               types.String `tfsdk:"key"`
	RunID             types.String `tfsdk:"run_id"`
	WaitTimeoutSec    types.Int64  `tfsdk:"wait_timeout_sec"`
	OnDestroyScenario types.String `tfsdk:"on_destroy_scenario"`
	ScenarioDigest    types.String `tfsdk:"scenario_digest"`
	Phase             types.String `tfsdk:"phase"`
	Message           types.String `tfsdk:"message"`
	Outputs           types.String `tfsdk:"outputs"`
	Steps             types.Map    `tfsdk:"steps"`
	DetectDrift       types.Bool   `tfsdk:"detect_drift"`
	Drift             types.String `tfsdk:"drift"`
	DriftRunID        types.String `tfsdk:"drift_run_id"`
}

func (r *runResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_run"
}

func (r *runResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replaceOnly := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A one-shot run of a scenario on the keeper. Create starts the run and waits for it to finish; " +
			"a changed scenario (text or file content), input, sensitive_input, key or run_id plans a new run; nothing else re-runs. " +
			"Destroy runs on_destroy_scenario, when set, with the create run's outputs as input; runs themselves stay in the keeper's history.",
		Attributes: map[string]schema.Attribute{
			"id": computedString("The run's id (run_…)."),
			"scenario": schema.StringAttribute{Required: true, PlanModifiers: replaceOnly,
				Description: "The scenario: a path to a YAML file (relative to the working directory) or the YAML text itself (anything with a newline)."},
			"input": schema.StringAttribute{Optional: true, PlanModifiers: replaceOnly, Validators: []validator.String{jsonObject{}},
				Description: "The scenario's input as a JSON object (jsonencode({...}))."},
			"sensitive_input": schema.StringAttribute{Optional: true, Sensitive: true, PlanModifiers: replaceOnly, Validators: []validator.String{jsonObject{}},
				Description: "More input as a JSON object, merged into input, hidden in plans and logs. Each key must be declared `secret: true` in the scenario's inputs " +
					"or have a secret-looking name (password, token, secret, private_key, credentials), so that the keeper seals it at rest and masks it in every answer. " +
					"Terraform keeps it in its state, marked sensitive: protect the state."},
			"key": schema.StringAttribute{Optional: true, PlanModifiers: replaceOnly,
				Description: "The keeper's re-run key, used as given: the same key with the same content from the same API token returns the existing run; change it to run again."},
			"run_id": schema.StringAttribute{Optional: true, PlanModifiers: replaceOnly,
				Description: "Bump to run again (the seed's run_id). The keeper key becomes tf-<run_id>-<digest of scenario and input>, so an interrupted apply finds its run instead of starting a second one."},
			"wait_timeout_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(DefaultWaitTimeout),
				Description: "Seconds to wait for the run to finish (default 900). When it passes, apply fails and the run goes on in the keeper. Longer than 900 also raises the keeper-side timeout."},
			"on_destroy_scenario": schema.StringAttribute{Optional: true,
				Description: "A scenario (file path or YAML) run on destroy, after a Succeeded create run, with that run's outputs (one key per step) as input, e.g. core.cloud.destroyed."},
			"scenario_digest": computedString("SHA-256 of the scenario text, so that an edited scenario file plans a new run."),
			"phase":           computedString("Pending, Running, Succeeded, Failed or Cancelled."),
			"message": computedString("The run's message, masked by the keeper: the JSON text of its outputs when it Succeeded, the error when it did not " +
				"(each failed target as `<step> on <sid>: <code>: <message>`, joined with `; `; or `<code>: <message>`). The outputs stay in `outputs`."),
			"outputs": computedString("The run's outputs as JSON: each step's output by step name (masked)."),
			"steps": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				PlanModifiers: []planmodifier.Map{mapplanmodifier.UseStateForUnknown()},
				Description:   "Each step's status by step name: ok, changed, failed, skipped or unreachable."},
			"detect_drift": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "On refresh, check the scenario (a check run: nothing changes) and, when the souls no longer carry what the run made " +
					"(a target would change), plan the run again: software drift shows in terraform plan as a replacement."},
			"drift": schema.StringAttribute{Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				Description: "With detect_drift, what the last refresh's check found: in_sync, drifted (plans a new run) or unknown (a step cannot be checked)."},
			"drift_run_id": schema.StringAttribute{Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				Description: "The last refresh's check run (soulctl runs get ID shows what would change)."},
		},
	}
}

// resolveScenario returns a scenario's text and the file name the keeper
// uses in its messages: a single line naming a file reads the file.
func resolveScenario(s string) (text, file string, err error) {
	if strings.ContainsAny(s, "\n") {
		return s, inlineFile, nil
	}
	p := strings.TrimSpace(s)
	data, err := os.ReadFile(p)
	if err == nil {
		return string(data), p, nil
	}
	if ext := filepath.Ext(p); ext == ".yaml" || ext == ".yml" || strings.Contains(p, "/") {
		return "", "", fmt.Errorf("read scenario file: %w", err)
	}
	return s, inlineFile, nil
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkSensitive refuses sensitive_input keys the keeper would not treat
// as secret, and keys given in both inputs.
func checkSensitive(text, file string, input, sensitive map[string]any) error {
	declared := map[string]bool{}
	if sc, _ := scenario.Parse(file, []byte(text)); sc != nil {
		for _, d := range sc.Inputs {
			declared[d.Name] = d.Secret
		}
	}
	var bad []string
	for k := range sensitive {
		if _, dup := input[k]; dup {
			return fmt.Errorf("key %q is in both input and sensitive_input", k)
		}
		if !declared[k] && !secret.IsSensitiveKey(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("key(s) %s would be shown by the keeper: declare them `secret: true` in the scenario's inputs, or use a secret-looking name (password, token, secret, private_key, credentials)",
			strings.Join(bad, ", "))
	}
	return nil
}

func (r *runResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan runModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Scenario.IsUnknown() {
		return
	}
	text, file, err := resolveScenario(plan.Scenario.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("scenario"), "Cannot read the scenario", err.Error())
		return
	}
	if !plan.OnDestroyScenario.IsNull() && !plan.OnDestroyScenario.IsUnknown() {
		if _, _, err := resolveScenario(plan.OnDestroyScenario.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("on_destroy_scenario"), "Cannot read the scenario", err.Error())
			return
		}
	}
	if !plan.Input.IsUnknown() && !plan.SensitiveInput.IsUnknown() {
		in, err1 := decodeObject(plan.Input.ValueString())
		sens, err2 := decodeObject(plan.SensitiveInput.ValueString())
		if err1 == nil && err2 == nil {
			if err := checkSensitive(text, file, in, sens); err != nil {
				resp.Diagnostics.AddAttributeError(path.Root("sensitive_input"), "sensitive_input would not stay secret", err.Error())
				return
			}
		}
	}
	d := types.StringValue(digest(text))
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("scenario_digest"), d)...)
	if req.State.Raw.IsNull() {
		return
	}
	var state runModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	drifted := plan.DetectDrift.ValueBool() && state.Drift.ValueString() == "drifted"
	if drifted {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("drift"))
		resp.Diagnostics.AddAttributeWarning(path.Root("drift"), "The souls no longer carry what this run made",
			"The refresh's check run "+state.DriftRunID.ValueString()+" says a target would change: apply runs the scenario again (soulctl runs get "+state.DriftRunID.ValueString()+" shows what changed).")
		for _, a := range []string{"drift", "drift_run_id"} {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(a), types.StringUnknown())...)
		}
	}
	if drifted || !state.ScenarioDigest.IsNull() && state.ScenarioDigest.ValueString() != d.ValueString() {
		if !drifted {
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("scenario_digest"))
		}
		for _, a := range []string{"id", "phase", "message", "outputs"} {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(a), types.StringUnknown())...)
		}
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("steps"), types.MapUnknown(types.StringType))...)
	}
}

// runRequest builds the keeper request of a plan, and the set of sensitive
// strings to mask out of what comes back.
func runRequest(m *runModel) (client.RunCreate, *secret.Set, *path.Path, error) {
	text, file, err := resolveScenario(m.Scenario.ValueString())
	if err != nil {
		p := path.Root("scenario")
		return client.RunCreate{}, nil, &p, err
	}
	in, err := decodeObject(m.Input.ValueString())
	if err != nil {
		p := path.Root("input")
		return client.RunCreate{}, nil, &p, err
	}
	sens, err := decodeObject(m.SensitiveInput.ValueString())
	if err != nil {
		p := path.Root("sensitive_input")
		return client.RunCreate{}, nil, &p, errors.New("not a JSON object") // never the value
	}
	if err := checkSensitive(text, file, in, sens); err != nil {
		p := path.Root("sensitive_input")
		return client.RunCreate{}, nil, &p, err
	}
	merged := make(map[string]any, len(in)+len(sens))
	for k, v := range in {
		merged[k] = v
	}
	secrets := secret.NewSet()
	for k, v := range sens {
		merged[k] = v
		addStrings(secrets, v)
	}
	key := m.Key.ValueString()
	switch {
	case key != "":
	case m.RunID.ValueString() != "":
		key = "tf-" + m.RunID.ValueString() + "-" + digest(text, m.Input.ValueString())[:16]
	default:
		key = "tf-" + randomHex(12)
	}
	req := client.RunCreate{Scenario: text, File: file, Input: merged, Key: key}
	if w := m.WaitTimeoutSec.ValueInt64(); w > DefaultWaitTimeout {
		req.Timeout = fmt.Sprintf("%ds", w)
	}
	return req, secrets, nil, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// addStrings adds every string (and number) of a sensitive input value to
// secrets.
func addStrings(secrets *secret.Set, v any) {
	switch v := v.(type) {
	case string:
		secrets.Add(v)
	case json.Number:
		secrets.Add(v.String())
	case []any:
		for _, e := range v {
			addStrings(secrets, e)
		}
	case map[string]any:
		for _, e := range v {
			addStrings(secrets, e)
		}
	}
}

// scrubJSON masks a JSON document from the keeper with the keeper's one
// masking function and the sensitive inputs, should the keeper's masking
// have missed one; text that is not JSON is masked as text.
func scrubJSON(doc string, secrets *secret.Set) string {
	b, err := secrets.MarshalMasked(json.RawMessage(doc))
	if err != nil {
		return secrets.MaskString(doc)
	}
	return string(b)
}

// wait polls a run until it is terminal or ctx ends; it returns the last
// run seen.
func (k *keeper) wait(ctx context.Context, id string) (*client.Run, error) {
	var last *client.Run
	for {
		r, err := do(ctx, k, func(c context.Context) (*client.Run, error) { return k.c.RunGet(c, id) })
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, ctx.Err()
			}
			return last, err
		}
		last = r
		if r.Phase.Terminal() {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// setRun copies a run into the model, masking sensitive text.
func setRun(ctx context.Context, m *runModel, r *client.Run, secrets *secret.Set) diag.Diagnostics {
	// A new run has not been checked for drift: it is what it made.
	if m.Drift.IsUnknown() {
		m.Drift = types.StringNull()
	}
	if m.DriftRunID.IsUnknown() {
		m.DriftRunID = types.StringNull()
	}
	if m.DetectDrift.IsNull() || m.DetectDrift.IsUnknown() {
		m.DetectDrift = types.BoolValue(false)
	}
	m.ID = types.StringValue(r.ID)
	m.Phase = types.StringValue(string(r.Phase))
	m.Message = types.StringValue(secrets.MaskString(r.Message))
	out := strings.TrimSpace(string(r.Outputs))
	if out == "" || out == "null" {
		out = "{}"
	}
	m.Outputs = types.StringValue(scrubJSON(out, secrets))
	steps := map[string]string{}
	for _, s := range r.Steps {
		steps[s.Name] = string(s.Status)
	}
	v, diags := types.MapValueFrom(ctx, types.StringType, steps)
	m.Steps = v
	return diags
}

// failure describes a finished run that did not succeed: each failed
// step with its host and error code.
func failure(r *client.Run, secrets *secret.Set) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s (%s) ended %s", r.ID, r.Name, r.Phase)
	if r.Error != nil {
		fmt.Fprintf(&b, ": %s: %s", r.Error.Code, r.Error.Message)
	}
	b.WriteString(".")
	for _, s := range r.Steps {
		for _, t := range s.Targets {
			if !t.Status.Bad() {
				continue
			}
			fmt.Fprintf(&b, "\nstep %q (%s) on %s: %s", s.Name, s.Module, t.SID, t.Status)
			if t.Error != nil {
				fmt.Fprintf(&b, ": %s: %s", t.Error.Code, t.Error.Message)
			}
		}
	}
	fmt.Fprintf(&b, "\nDetails: soulctl runs get %s. Bump run_id (or key) to run again.", r.ID)
	return secrets.MaskString(b.String())
}

func (r *runResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m runModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, secrets, at, err := runRequest(&m)
	if err != nil {
		if at != nil {
			resp.Diagnostics.AddAttributeError(*at, "Invalid run", err.Error())
		} else {
			resp.Diagnostics.AddError("Invalid run", err.Error())
		}
		return
	}
	tflog.Info(ctx, "starting run", map[string]any{"file": in.File, "key": in.Key})
	create := func(c context.Context) (*client.Run, error) {
		run, _, err := r.k.c.RunCreate(c, in)
		return run, err
	}
	run, err := do(ctx, r.k, create)
	if problemCode(err) == "run.key_conflict" && m.Key.ValueString() == "" && m.RunID.ValueString() != "" {
		// The derived key leaves sensitive_input out (a digest of a secret
		// would leak it); a changed secret under the same run_id gets a
		// key of its own.
		in.Key += "-" + randomHex(6)
		run, err = do(ctx, r.k, create)
	}
	if err != nil {
		var at *path.Path
		if problemCode(err) == "scenario.invalid" {
			p := path.Root("scenario")
			at = &p
		}
		addError(&resp.Diagnostics, at, "Cannot start the run", err)
		return
	}
	r.finish(ctx, &m, run, secrets, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// finish waits for a run within the model's wait timeout and records it:
// a run that failed or did not finish in time is an error, and stays in
// the state (tainted) so that it remains visible.
func (r *runResource) finish(ctx context.Context, m *runModel, run *client.Run, secrets *secret.Set, diags *diag.Diagnostics) {
	wait := time.Duration(m.WaitTimeoutSec.ValueInt64()) * time.Second
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tflog.Info(ctx, "waiting for run", map[string]any{"run_id": run.ID})
	last, err := r.k.wait(wctx, run.ID)
	if last == nil {
		last = run
	}
	diags.Append(setRun(ctx, m, last, secrets)...)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		diags.AddError("Run did not finish in time",
			fmt.Sprintf("Run %s is still %s after wait_timeout_sec=%d; it goes on in the keeper (soulctl runs get %s). "+
				"Apply again to look at it again, or raise wait_timeout_sec.", last.ID, last.Phase, m.WaitTimeoutSec.ValueInt64(), last.ID))
	case err != nil:
		addError(diags, nil, "Cannot follow run "+run.ID, err)
	case last.Phase != client.PhaseSucceeded:
		diags.AddError(fmt.Sprintf("Run %s %s", last.ID, strings.ToLower(string(last.Phase))), failure(last, secrets))
	}
}

func (r *runResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m runModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := m.ID.ValueString()
	run, err := do(ctx, r.k, func(c context.Context) (*client.Run, error) { return r.k.c.RunGet(c, id) })
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, nil, "Cannot read run "+id, err)
		return
	}
	sens, _ := decodeObject(m.SensitiveInput.ValueString())
	secrets := secret.NewSet()
	for _, v := range sens {
		addStrings(secrets, v)
	}
	resp.Diagnostics.Append(setRun(ctx, &m, run, secrets)...)
	if m.DetectDrift.ValueBool() && run.Phase == client.PhaseSucceeded {
		r.checkDrift(ctx, &m, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// checkDrift runs the run's scenario with its input as a check run and
// records what it found in m.Drift: drifted when a target would change,
// unknown when one cannot be checked (or the check failed), in_sync
// otherwise. A check that cannot be started or waited for is a warning;
// the run's state stays as it was.
func (r *runResource) checkDrift(ctx context.Context, m *runModel, diags *diag.Diagnostics) {
	in, _, at, err := runRequest(m)
	if err != nil {
		diags.AddAttributeWarning(*at, "Cannot check for drift", err.Error())
		return
	}
	in.Mode = client.RunCheck
	wait := time.Duration(m.WaitTimeoutSec.ValueInt64()) * time.Second
	if wait <= 0 {
		wait = DefaultWaitTimeout * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	check, err := do(wctx, r.k, func(c context.Context) (*client.Run, error) {
		run, _, err := r.k.c.RunCreate(c, in)
		return run, err
	})
	if err == nil {
		check, err = r.k.c.RunWait(wctx, check.ID)
	}
	if err != nil {
		diags.AddWarning("Cannot check for drift", "The check run of "+m.ID.ValueString()+" did not finish: "+err.Error())
		return
	}
	state := "in_sync"
	switch {
	case check.Check != nil && check.Check.WouldChange > 0:
		state = "drifted"
	case check.Phase != client.PhaseSucceeded || check.Check == nil || check.Check.Unknown > 0:
		state = "unknown"
	}
	m.Drift, m.DriftRunID = types.StringValue(state), types.StringValue(check.ID)
}

// Update changes only what needs no run: wait_timeout_sec and
// on_destroy_scenario.
func (r *runResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state runModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.WaitTimeoutSec, state.OnDestroyScenario = plan.WaitTimeoutSec, plan.OnDestroyScenario
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *runResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m runModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.OnDestroyScenario.IsNull() || m.OnDestroyScenario.ValueString() == "" {
		return
	}
	if client.Phase(m.Phase.ValueString()) != client.PhaseSucceeded {
		resp.Diagnostics.AddWarning("on_destroy_scenario skipped",
			fmt.Sprintf("Run %s ended %s, so there are no outputs to undo; on_destroy_scenario did not run.", m.ID.ValueString(), m.Phase.ValueString()))
		return
	}
	text, file, err := resolveScenario(m.OnDestroyScenario.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("on_destroy_scenario"), "Cannot read the scenario", err.Error())
		return
	}
	id := m.ID.ValueString()
	// The outputs as the keeper has them: masked values would be useless.
	created, err := do(ctx, r.k, func(c context.Context) (*client.Run, error) { return r.k.c.RunGet(c, id) })
	if err != nil && !isNotFound(err) {
		addError(&resp.Diagnostics, nil, "Cannot read run "+id, err)
		return
	}
	outputs := m.Outputs.ValueString()
	if created != nil && len(created.Outputs) > 0 {
		outputs = string(created.Outputs)
	}
	input, err := decodeObject(outputs)
	if err != nil {
		resp.Diagnostics.AddError("Cannot use the run's outputs as input", err.Error())
		return
	}
	in := client.RunCreate{Scenario: text, File: file, Input: input, Key: "tf-destroy-" + id}
	tflog.Info(ctx, "starting on_destroy run", map[string]any{"file": file, "for": id})
	run, err := do(ctx, r.k, func(c context.Context) (*client.Run, error) {
		run, _, err := r.k.c.RunCreate(c, in)
		return run, err
	})
	if err != nil {
		var at *path.Path
		if problemCode(err) == "scenario.invalid" {
			p := path.Root("on_destroy_scenario")
			at = &p
		}
		addError(&resp.Diagnostics, at, "Cannot start the on_destroy run", err)
		return
	}
	dm := m
	r.finish(ctx, &dm, run, nil, &resp.Diagnostics)
}
