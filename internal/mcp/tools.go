package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/module"
)

// The tools' inputs and outputs. Descriptions are for the model that
// calls them; the wire types of client/ carry their own.

type listInput struct {
	Limit int    `json:"limit,omitempty" jsonschema:"At most this many items (the keeper's default page size when absent)."`
	After string `json:"after,omitempty" jsonschema:"Cursor of the page to read: the next field of the previous answer. Absent: the first page."`
}

type sidInput struct {
	SID string `json:"sid" jsonschema:"The soul's id, a DNS name such as web-1.example.com."`
}

type nameInput struct {
	Name string `json:"name" jsonschema:"The name, a DNS label."`
}

type runIDInput struct {
	ID string `json:"id" jsonschema:"The run's id (run_…), as run_start or runs_list return it."`
}

type runDecisionInput struct {
	ID     string `json:"id" jsonschema:"The run's id (run_…)."`
	Reason string `json:"reason" jsonschema:"Why: kept with the run and in the audit log."`
}

type moduleIDInput struct {
	ID string `json:"id" jsonschema:"The module state's ID: namespace.module.state, e.g. core.pkg.installed (see modules_list)."`
}

type moduleSummary struct {
	ID         string `json:"id"`
	Side       string `json:"side" jsonschema:"keeper: the step must say on: keeper; soul: runs on the step's target souls."`
	Idempotent bool   `json:"idempotent"`
	Permission string `json:"permission,omitempty" jsonschema:"The permission a run's creator needs besides run.create for a step of this module."`
	Summary    string `json:"summary"`
}

type moduleList struct {
	Items []moduleSummary `json:"items"`
}

type modulePage struct {
	ID     string        `json:"id"`
	Page   string        `json:"page" jsonschema:"The module's catalog page as soulctl module show prints it: requirements, state, params, example, output and notes."`
	Module client.Module `json:"module" jsonschema:"The same declaration as data."`
}

type validateInput struct {
	Scenario string         `json:"scenario" jsonschema:"The scenario as YAML text."`
	File     string         `json:"file,omitempty" jsonschema:"File name used in the problems' locations (default scenario.yaml)."`
	Input    map[string]any `json:"input,omitempty" jsonschema:"The input the run would get; declared defaults apply."`
}

type validateOutput struct {
	Valid    bool                  `json:"valid"`
	Problems []client.ProblemError `json:"problems" jsonschema:"Every problem, each located as file:line:column with its stable code."`
}

type runStartInput struct {
	Scenario string         `json:"scenario" jsonschema:"The scenario as YAML text (validate it first with scenario_validate)."`
	Input    map[string]any `json:"input,omitempty" jsonschema:"The scenario's input."`
	Key      string         `json:"key,omitempty" jsonschema:"Re-run key: the same key with the same scenario and input returns the existing run instead of running again; the same key with other content is refused (run.key_conflict). Give one so that a retried call does not run twice."`
	Timeout  string         `json:"timeout,omitempty" jsonschema:"Server-side timeout as a Go duration such as 15m (the default) or 2h; at most 24h."`
	File     string         `json:"file,omitempty" jsonschema:"File name used in validation problems."`
	Mode     client.RunMode `json:"mode,omitempty" jsonschema:"apply (the default) or check: a check run changes nothing and says per soul what an apply would change (would_change, or unknown and why)."`
}

type runStarted struct {
	Created bool       `json:"created" jsonschema:"False when key named an existing run with the same content: that run is returned and nothing ran again."`
	Run     client.Run `json:"run"`
}

type runWaitInput struct {
	ID             string `json:"id" jsonschema:"The run's id."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"Give up waiting after this many seconds (default 600, at most 3600) and return the run as it is then; the run goes on."`
}

type empty struct{}

// Bounds of run_wait.
const (
	defaultWait = 10 * time.Minute
	maxWait     = time.Hour
)

func (s *Server) addTools() {
	s.addRegistryTools()
	s.addModuleTools()
	s.addRunTools()
	s.addAuditTool()
}

// listOptions is a list tool's paging.
func listOptions(in listInput) client.ListOptions {
	return client.ListOptions{Limit: in.Limit, After: in.After}
}

// addRegistryTools adds the tools that read souls, providers, profiles and
// runs.
func (s *Server) addRegistryTools() {
	list := listOptions

	add(s, toolSpec{name: "souls_list", title: "List souls",
		description: "List the managed hosts (souls): SID, status (pending, active, unreachable, destroyed), address, provider, last contact and the pinned host key. Paged: pass next as after."},
		func(ctx context.Context, c call, in listInput) (*client.SoulList, error) {
			return c.c.SoulList(ctx, list(in))
		})
	add(s, toolSpec{name: "soul_get", title: "Get a soul", description: "Get one soul by SID.", object: func(in any) string { return "soul/" + in.(sidInput).SID }},
		func(ctx context.Context, c call, in sidInput) (*client.Soul, error) { return c.c.SoulGet(ctx, in.SID) })
	add(s, toolSpec{name: "providers_list", title: "List providers",
		description: "List the cloud providers (accounts): name, driver, region, a reference to the credentials (never the credentials) and the driver's config, masked."},
		func(ctx context.Context, c call, in listInput) (*client.ProviderList, error) {
			return c.c.ProviderList(ctx, list(in))
		})
	add(s, toolSpec{name: "provider_get", title: "Get a provider", description: "Get one provider by name.", object: func(in any) string { return "provider/" + in.(nameInput).Name }},
		func(ctx context.Context, c call, in nameInput) (*client.Provider, error) {
			return c.c.ProviderGet(ctx, in.Name)
		})
	add(s, toolSpec{name: "profiles_list", title: "List profiles", description: "List the VM profiles: a provider and a VM spec (image, size, network…) that core.cloud.created uses."},
		func(ctx context.Context, c call, in listInput) (*client.ProfileList, error) {
			return c.c.ProfileList(ctx, list(in))
		})
	add(s, toolSpec{name: "profile_get", title: "Get a profile", description: "Get one profile by name.", object: func(in any) string { return "profile/" + in.(nameInput).Name }},
		func(ctx context.Context, c call, in nameInput) (*client.Profile, error) {
			return c.c.ProfileGet(ctx, in.Name)
		})
	add(s, toolSpec{name: "runs_list", title: "List runs", description: "List runs, newest first: id, name, phase (Pending, Running, Succeeded, Failed, Cancelled), times and error. Paged: pass next as after."},
		func(ctx context.Context, c call, in listInput) (*client.RunList, error) {
			return c.c.RunList(ctx, client.RunListOptions{ListOptions: list(in)})
		})
	add(s, toolSpec{name: "run_get", title: "Get a run",
		description: "Get a run with its steps and each target's status (ok, changed, failed, skipped, unreachable), error, attempts and duration, and the outputs by step (secrets masked). A step whose targets were all skipped is skipped.",
		object:      func(in any) string { return "run/" + in.(runIDInput).ID }},
		func(ctx context.Context, c call, in runIDInput) (*client.Run, error) { return c.c.RunGet(ctx, in.ID) })
}

// addModuleTools adds the module catalog and scenario validation.
func (s *Server) addModuleTools() {
	add(s, toolSpec{name: "modules_list", title: "List modules", description: "List the module states scenarios can call: ID, where it runs (keeper or soul), idempotence, the permission it needs and a summary. Read one with module_show before using it."},
		func(ctx context.Context, c call, _ empty) (*moduleList, error) {
			l, err := c.c.ModuleList(ctx)
			if err != nil {
				return nil, err
			}
			out := &moduleList{Items: make([]moduleSummary, len(l.Items))}
			for i, m := range l.Items {
				out.Items[i] = moduleSummary{ID: m.ID, Side: m.Side, Idempotent: m.Idempotent, Permission: m.Permission, Summary: m.Summary}
			}
			return out, nil
		})
	add(s, toolSpec{name: "module_show", title: "Show a module's catalog page",
		description: "Show a module state's catalog page: what it needs, when it reports a change, every param with type, default and doc, an example step and the output fields.",
		object:      func(in any) string { return "module/" + in.(moduleIDInput).ID }},
		func(ctx context.Context, c call, in moduleIDInput) (*modulePage, error) {
			m, err := c.c.ModuleGet(ctx, in.ID)
			if err != nil {
				return nil, err
			}
			page, err := renderModule(*m)
			if err != nil {
				return nil, err
			}
			return &modulePage{ID: m.ID, Page: page, Module: *m}, nil
		})
	add(s, toolSpec{name: "scenario_validate", title: "Validate a scenario", perm: auth.RunRead,
		description: "Check a scenario and its input without running anything: unknown modules, missing, unknown or mistyped params, keeper-side modules without on: keeper, bad CEL, unknown step references, duplicate names, unregistered target souls. Returns every problem with file:line:column and a stable code; valid is true when there is none."},
		s.validate)
}

// addRunTools adds the tools that start, follow, cancel and decide on runs.
func (s *Server) addRunTools() {
	add(s, toolSpec{name: "run_start", title: "Start a run", write: true, perm: auth.RunCreate,
		description: "Start a run of a scenario with an input; returns at once with the run (phase Pending or Running). Follow it with run_wait. " +
			"mode check asks what an apply would change and changes nothing. " +
			"Needs a keeper that allows writes over MCP and a token with run.create (and cloud.* for keeper-side cloud steps). Refusals: mcp.writes_disabled, auth.forbidden, scenario.invalid (with every problem located), run.key_conflict."},
		func(ctx context.Context, c call, in runStartInput) (*runStarted, error) {
			r, created, err := c.c.RunCreate(ctx, client.RunCreate{Scenario: in.Scenario, Input: in.Input, Key: in.Key, Timeout: in.Timeout, File: in.File, Mode: in.Mode})
			if err != nil {
				return nil, err
			}
			return &runStarted{Created: created, Run: *r}, nil
		})
	add(s, toolSpec{name: "run_wait", title: "Wait for a run",
		description: "Wait until a run has finished (or timeout_seconds passed) and return it as run_get does. When the call carries a progress token, each step's start and end is sent as a progress notification (\"step base failed: ok=1 unreachable=1\").",
		object:      func(in any) string { return "run/" + in.(runWaitInput).ID }},
		s.wait)
	add(s, toolSpec{name: "run_cancel", title: "Cancel a run", write: true, perm: auth.RunCancel,
		description: "Ask the keeper to cancel a run; the steps in flight are stopped and the run ends Cancelled. Needs a keeper that allows writes over MCP and a token with run.cancel. A finished run is refused with run.finished.",
		object:      func(in any) string { return "run/" + in.(runIDInput).ID }},
		func(ctx context.Context, c call, in runIDInput) (*client.Run, error) {
			return c.c.RunCancel(ctx, in.ID)
		})

	add(s, toolSpec{name: "run_approve", title: "Approve a held step", write: true, perm: auth.RunApprove,
		description: "Approve the step a run waits on (phase AwaitingApproval, held by an approval policy): the step runs and the run goes on. Needs a keeper that allows writes over MCP and a token with run.approve of another person than the run's creator (run.self_approval otherwise). The reason is kept with the run and audited.",
		object:      func(in any) string { return "run/" + in.(runDecisionInput).ID }},
		func(ctx context.Context, c call, in runDecisionInput) (*client.Run, error) {
			return c.c.RunApprove(ctx, in.ID, in.Reason)
		})
	add(s, toolSpec{name: "run_reject", title: "Reject a held step", write: true, perm: auth.RunApprove,
		description: "Reject the step a run waits on: the step does not run and the run ends Rejected. Same rules as run_approve.",
		object:      func(in any) string { return "run/" + in.(runDecisionInput).ID }},
		func(ctx context.Context, c call, in runDecisionInput) (*client.Run, error) {
			return c.c.RunReject(ctx, in.ID, in.Reason)
		})
}

// addAuditTool adds audit_verify.
func (s *Server) addAuditTool() {
	add(s, toolSpec{name: "audit_verify", title: "Verify the audit log",
		description: "Verify the hash-chained audit log against the audit key and the signed checkpoints: ok, how many rows were checked, and every problem (tampered, missing or relinked rows, truncation) with its row."},
		func(ctx context.Context, c call, _ empty) (*client.AuditReport, error) {
			l, err := c.c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1}, Verify: true})
			if err != nil {
				return nil, err
			}
			if l.Verify == nil {
				return nil, &toolError{Code: CodeInternal, Message: "the keeper returned no verification"}
			}
			return l.Verify, nil
		})
}

// renderModule draws a module's catalog page as soulctl module show does.
func renderModule(m client.Module) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	var info module.Info
	if err := json.Unmarshal(b, &info); err != nil {
		return "", fmt.Errorf("decode module %s: %w", m.ID, err)
	}
	return module.RenderText(info), nil
}

// validate is scenario_validate: the checker POST /v1/runs uses, with
// nothing accepted or run. Messages are masked as the API masks problems.
func (s *Server) validate(ctx context.Context, c call, in validateInput) (*validateOutput, error) {
	if err := c.p.Require(auth.RunRead); err != nil {
		return nil, &toolError{Code: "auth.forbidden", Message: err.Error()}
	}
	if s.cfg.Check == nil {
		return nil, &toolError{Code: CodeInternal, Message: "this keeper does not validate scenarios"}
	}
	file := in.File
	if file == "" {
		file = "scenario.yaml"
	}
	_, problems := s.cfg.Check(c.p.Project, file, in.Scenario, in.Input)
	out := &validateOutput{Valid: len(problems) == 0, Problems: make([]client.ProblemError, len(problems))}
	for i, p := range problems {
		out.Problems[i] = client.ProblemError{Location: p.Location, Code: p.Code, Message: s.cfg.Secrets.MaskString(p.Message)}
	}
	return out, nil
}

// wait is run_wait: it follows the run's event stream (the REST SSE route,
// in process) and reports steps as progress, then returns the run.
func (s *Server) wait(ctx context.Context, c call, in runWaitInput) (*client.Run, error) {
	timeout := defaultWait
	if in.TimeoutSeconds > 0 {
		timeout = min(time.Duration(in.TimeoutSeconds)*time.Second, maxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	token := c.req.Params.GetProgressToken()
	progress := 0.0
	err := c.c.RunEvents(wctx, in.ID, 0, func(ev client.RunEvent) error {
		msg := progressText(ev)
		if token == nil || msg == "" {
			return nil
		}
		progress++
		if err := c.req.Session.NotifyProgress(wctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: progress, Message: msg}); err != nil {
			s.log.Warn("progress notification not sent", "run", in.ID, "err", err)
		}
		return nil
	})
	if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		return nil, err
	}
	// Finished, or waited long enough: the run as it is now.
	return c.c.RunGet(ctx, in.ID)
}

// progressText says what one event means for a progress notification;
// empty for events that are not about a step or the run's end.
func progressText(ev client.RunEvent) string {
	data, err := ev.Decode()
	if err != nil {
		return ""
	}
	switch d := data.(type) {
	case client.StepStartedData:
		return fmt.Sprintf("step %s (%s) started on %s", ev.Step, d.Module, strings.Join(d.Targets, ", "))
	case client.StepFinishedData:
		return fmt.Sprintf("step %s %s: %s", ev.Step, d.Status, countsText(d.Counts))
	case client.StepInterruptedData:
		return fmt.Sprintf("step %s (%s) was interrupted by a keeper stop and is not repeated", ev.Step, d.Module)
	case client.CommandReattachedData:
		return fmt.Sprintf("step %s on %s: reattached to command %s over %s (%s), not started again", ev.Step, ev.SID, d.Command, d.Transport, d.Why)
	case client.RunFinishedData:
		if d.Error != nil {
			return fmt.Sprintf("run %s: %s: %s", d.Phase, d.Error.Code, d.Error.Message)
		}
		return "run " + string(d.Phase)
	}
	return ""
}

func countsText(c map[client.TargetStatus]int) string {
	var parts []string
	for _, st := range client.TargetStatuses {
		if n := c[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st, n))
		}
	}
	if len(parts) == 0 {
		return "no targets"
	}
	return strings.Join(parts, " ")
}
