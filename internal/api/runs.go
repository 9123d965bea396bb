package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// RunService accepts runs; *runner.Runner implements it.
type RunService interface {
	Submit(ctx context.Context, p runner.SubmitParams) (store.Run, bool, error)
	Hub() *runner.Hub
}

// requireStepPermissions refuses a run whose creator lacks a permission
// one of its steps needs; the engine checks again when the step runs.
func requireStepPermissions(p auth.Principal, needs []runner.StepPermission) error {
	for _, n := range needs {
		err := p.Require(n.Permission)
		var fe *auth.ForbiddenError
		if errors.As(err, &fe) {
			fe.Reason += fmt.Sprintf(", which step %q (%s) needs; nothing ran", n.Step, n.Module)
			return fe
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type runOutput struct {
	Body client.Run
}

func (s *Server) runWire(ctx context.Context, r store.Run, withSteps bool) (client.Run, error) {
	out := client.Run{
		ID: r.ID, Key: r.Key, Name: r.Name, Mode: runMode(r.Mode), Phase: client.Phase(r.Phase), CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Timeout: r.Timeout.String(), Input: r.InputMasked, Project: r.Project,
		Outputs: r.Outputs, Message: r.Message, Steps: []client.RunStep{},
	}
	if r.ErrorCode != "" {
		out.Error = &client.RunError{Code: r.ErrorCode, Message: r.ErrorMsg}
	}
	out.Phase = store.ShownPhase(r.Phase, r.ErrorCode, r.AwaitingApproval)
	if !withSteps {
		boundRun(&out, listOutputs)
		return out, nil
	}
	boundRun(&out, answerOutputs)
	approvals, err := s.runStore.Approvals(ctx, r.ID)
	if err != nil {
		return out, err
	}
	for _, a := range approvals {
		out.Approvals = append(out.Approvals, approvalWire(a))
	}
	steps, targets, err := s.runStore.RunSteps(ctx, r.ID)
	if err != nil {
		return out, err
	}
	limit := targetAnswerLimit(len(targets))
	var check client.CheckSummary
	for _, st := range steps {
		if out.Mode == client.RunCheck && client.StepStatus(st.Status) == client.StepUnknown {
			n := 0
			for _, t := range targets {
				if t.StepIndex == st.Index {
					n++
				}
			}
			if n == 0 {
				check.Unknown++ // the step's targets themselves are unknown
			}
		}
		ws := client.RunStep{Name: st.Name, Module: st.Module, Status: client.StepStatus(st.Status), Targets: []client.RunTarget{}}
		for _, t := range targets {
			if t.StepIndex != st.Index {
				continue
			}
			wt := client.RunTarget{SID: t.SID, Status: client.TargetStatus(t.Status), Changed: t.Changed, Output: t.Output, Attempts: t.Attempts, DurationMS: t.DurationMS,
				Unknown: t.Unknown}
			if len(t.Changes) > 0 {
				_ = json.Unmarshal(t.Changes, &wt.Changes)
			}
			if t.ErrorCode != "" {
				wt.Error = &client.RunError{Code: t.ErrorCode, Message: t.ErrorMsg}
			}
			switch wt.Status {
			case client.TargetWouldChange:
				check.WouldChange++
			case client.TargetUnknown:
				check.Unknown++
			case client.TargetOK:
				check.Unchanged++
			case client.TargetFailed, client.TargetUnreachable:
				check.Failed++
			}
			boundTarget(&wt, limit)
			ws.Targets = append(ws.Targets, wt)
		}
		out.Steps = append(out.Steps, ws)
	}
	if out.Mode == client.RunCheck {
		out.Check = &check
	}
	return out, nil
}

// runMode is a stored run's mode; rows from before modes are apply runs.
func runMode(m string) client.RunMode {
	if m == "" {
		return client.RunApply
	}
	return client.RunMode(m)
}

func (s *Server) registerRuns() {
	if s.runs == nil {
		return
	}
	s.registerRunCreate()
	s.registerRunList()
	s.registerRunGet()
	s.registerRunCancel()
	s.registerApprovals()
	s.registerRunEvents()
	s.registerRunOutputs()
	if s.check != nil {
		s.registerScenarioValidate()
	}
}

// registerScenarioValidate registers POST /v1/scenarios/validate.
func (s *Server) registerScenarioValidate() {
	register(s, huma.Operation{
		OperationID: "scenario-validate", Method: http.MethodPost, Path: "/v1/scenarios/validate", Tags: runTags,
		Summary: "Check a scenario and its input without running it",
		Description: "The checks POST /v1/runs applies before it accepts a run — modules, params, expressions, step and input " +
			"references (an undeclared ${ input.x } too), the input against the declared inputs, literal targets that are not " +
			"registered souls — with every problem located as file:line:column and its stable code. Nothing is stored or run; " +
			"200 with valid false when there are problems.",
		Errors: []int{http.StatusRequestEntityTooLarge},
	}, auth.RunRead, false, func(ctx context.Context, in *struct{ Body client.ScenarioValidate }) (*struct{ Body client.ScenarioValidation }, error) {
		file := in.Body.File
		if file == "" {
			file = "scenario.yaml"
		}
		project, err := createIn(ctx, in.Body.Project)
		if err != nil {
			return nil, err
		}
		_, problems := s.check(project, file, in.Body.Scenario, in.Body.Input)
		if in.Body.PartialInput {
			problems = slices.DeleteFunc(problems, func(p client.ProblemError) bool { return p.Code == scenario.CodeInputMissing })
		}
		out := client.ScenarioValidation{Valid: len(problems) == 0, Problems: problems}
		if out.Problems == nil {
			out.Problems = []client.ProblemError{}
		}
		return &struct{ Body client.ScenarioValidation }{Body: out}, nil
	})
}

// runTags are the OpenAPI tags of the run routes.
var runTags = []string{"runs"}

// runIDInput is a route's run id.
type runIDInput struct {
	ID string `path:"id" doc:"The run's id (run_…)."`
}

// registerRunCreate registers POST /v1/runs.
func (s *Server) registerRunCreate() {
	register(s, huma.Operation{
		OperationID: "run-create", Method: http.MethodPost, Path: "/v1/runs", Tags: runTags,
		Summary: "Start a run of a scenario",
		Description: "Validates the scenario and input (422 scenario.invalid lists every problem with file:line:column) " +
			"and checks that the token holds the permission each keeper-side step's module declares (403 auth.forbidden names it, " +
			"e.g. cloud.create for core.cloud.created), " +
			"and queues the run: 201 with the new run, or 200 with the existing run when this token used key with the same content; " +
			"409 run.key_conflict when this token used key for a run with different content. A key belongs to the token that used it: " +
			"another token's key names no run, so it starts a new one. Conflicts are audited (run.key_conflict) and limited per token: " +
			"after a burst, keyed requests get 429 run.key_conflict_rate_limited with Retry-After.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, auth.RunCreate, false, func(ctx context.Context, in *struct{ Body client.RunCreate }) (*struct {
		Status int
		Body   client.Run
	}, error) {
		b := in.Body
		caller := principal(ctx)
		if ns := reservedKeyPrefix(b.Key); ns != "" {
			return nil, invalid("run.key_reserved", "body.key", "keys starting %q are the keeper's own (its drift checks, seeding and remediation); choose another key", ns)
		}
		if b.Key != "" {
			if err := s.limitKeyConflicts(ctx, caller, b.Key); err != nil {
				return nil, err
			}
		}
		timeout := runner.DefaultTimeout
		if b.Timeout != "" {
			d, err := time.ParseDuration(b.Timeout)
			if err != nil || d <= 0 || d > runner.MaxTimeout {
				return nil, invalid("run.timeout_invalid", "body.timeout", "%q is not a duration between 1s and %s (e.g. 15m)", b.Timeout, runner.MaxTimeout)
			}
			timeout = d
		}
		file := b.File
		if file == "" {
			file = "scenario.yaml"
		}
		project, err := createIn(ctx, b.Project)
		if err != nil {
			return nil, err
		}
		checked, problems := s.check(project, file, b.Scenario, b.Input)
		if len(problems) > 0 {
			detail := fmt.Sprintf("the scenario has %d problem(s); nothing ran", len(problems))
			if len(problems) == 1 {
				detail = problems[0].Location + ": " + problems[0].Message
			}
			return nil, problem(http.StatusUnprocessableEntity, "scenario.invalid", detail, problems...)
		}
		if err := requireStepPermissions(principal(ctx), checked.Needs); err != nil {
			return nil, err
		}
		run, created, err := s.runs.Submit(ctx, runner.SubmitParams{
			Name: checked.Name, Scenario: b.Scenario, Input: checked.Input, Secret: checked.Secret,
			Key: b.Key, Timeout: timeout, Actor: caller.Actor(), Mode: b.Mode, Project: project,
		})
		if errors.Is(err, store.ErrKeyConflict) {
			return nil, s.keyConflict(ctx, caller, b.Key, err)
		}
		if err != nil {
			return nil, err
		}
		wire, err := s.runWire(ctx, run, true)
		if err != nil {
			return nil, err
		}
		status := http.StatusCreated
		if !created {
			status = http.StatusOK
		}
		return &struct {
			Status int
			Body   client.Run
		}{Status: status, Body: wire}, nil
	})
}

// registerRunList registers GET /v1/runs.
func (s *Server) registerRunList() {
	register(s, huma.Operation{
		OperationID: "run-list", Method: http.MethodGet, Path: "/v1/runs", Tags: runTags, Summary: "List runs, newest first",
	}, auth.RunRead, false, func(ctx context.Context, in *struct {
		ListInput
		Phase string    `query:"phase" enum:"Pending,Running,AwaitingApproval,Succeeded,Failed,Cancelled,Rejected" doc:"Only runs in this phase."`
		Name  string    `query:"name" maxLength:"200" doc:"Only runs whose scenario name contains this text (ignoring ASCII case)."`
		Since time.Time `query:"since" doc:"Only runs created at or after this time (RFC 3339)."`
	}) (*struct{ Body client.RunList }, error) {
		rs, err := s.runStore.RunList(ctx, store.RunListParams{ListParams: listScope(ctx, &in.ListInput), Phase: in.Phase, NameContains: in.Name, CreatedSince: in.Since})
		if err != nil {
			return nil, err
		}
		rs, next := page(rs, in.Limit, func(r store.Run) string { return r.ID })
		out := &struct{ Body client.RunList }{Body: client.RunList{Items: make([]client.Run, 0, len(rs)), Next: next}}
		for _, r := range rs {
			w, _ := s.runWire(ctx, r, false)
			out.Body.Items = append(out.Body.Items, w)
		}
		return out, nil
	})
}

// runOf reads run id for the caller: another project's run is a 404.
func (s *Server) runOf(ctx context.Context, id string) (store.Run, error) {
	r, err := s.runStore.RunGet(ctx, id)
	if err != nil {
		return store.Run{}, err
	}
	if !sees(ctx, r.Project, nil) {
		return store.Run{}, hidden("run", id)
	}
	return r, nil
}

// registerRunGet registers GET /v1/runs/{id}.
func (s *Server) registerRunGet() {
	register(s, huma.Operation{
		OperationID: "run-get", Method: http.MethodGet, Path: "/v1/runs/{id}", Tags: runTags,
		Summary: "Get a run with its steps, targets and outputs", Errors: []int{http.StatusNotFound},
	}, auth.RunRead, false, func(ctx context.Context, in *runIDInput) (*runOutput, error) {
		r, err := s.runOf(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		w, err := s.runWire(ctx, r, true)
		if err != nil {
			return nil, err
		}
		return &runOutput{Body: w}, nil
	})
}

// registerRunCancel registers POST /v1/runs/{id}/cancel.
func (s *Server) registerRunCancel() {
	register(s, huma.Operation{
		OperationID: "run-cancel", Method: http.MethodPost, Path: "/v1/runs/{id}/cancel", Tags: runTags,
		Summary: "Cancel a run", Description: "A Pending run is cancelled at once; a Running one stops at its next check (within seconds). 409 run.finished when it already ended.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, auth.RunCancel, false, func(ctx context.Context, in *runIDInput) (*runOutput, error) {
		if _, err := s.runOf(ctx, in.ID); err != nil {
			return nil, err
		}
		r, err := s.runStore.RunCancel(ctx, store.DeleteParams{Key: in.ID, Actor: principal(ctx).Actor()})
		if err != nil {
			return nil, err
		}
		s.runs.Hub().Notify(r.ID)
		w, err := s.runWire(ctx, r, true)
		if err != nil {
			return nil, err
		}
		return &runOutput{Body: w}, nil
	})
}

// registerRunEvents registers GET /v1/runs/{id}/events.
func (s *Server) registerRunEvents() {
	register(s, huma.Operation{
		OperationID: "run-events", Method: http.MethodGet, Path: "/v1/runs/{id}/events", Tags: runTags,
		Summary: "Stream a run's events (Server-Sent Events)",
		Description: "Each event is `id: <seq>`, `event: <kind>`, `data: <RunEvent JSON>`. Resume with the Last-Event-ID header (or ?after=). " +
			"The stream ends with an event of kind stream.end once the run has finished and every event was sent. " +
			"The token is checked again every few seconds while the stream lasts: once it is revoked, expired or no longer holds run.read, " +
			"the stream ends with an event of kind stream.denied whose data is the problem (code auth.invalid_token or auth.forbidden).",
		Errors:    []int{http.StatusNotFound},
		Responses: map[string]*huma.Response{"200": {Description: "An SSE stream of RunEvent; each kind's data is the schema of the same name (see components)", Content: map[string]*huma.MediaType{"text/event-stream": {Schema: s.eventSchemas()}}}},
	}, auth.RunRead, false, func(ctx context.Context, in *struct {
		ID          string `path:"id"`
		LastEventID string `header:"Last-Event-ID" doc:"Resume after this event."`
		After       int64  `query:"after" doc:"Resume after this event (for clients that cannot set headers)."`
	}) (*huma.StreamResponse, error) {
		head, err := s.runStore.RunHead(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if !sees(ctx, head.Project, nil) {
			return nil, hidden("run", in.ID)
		}
		after := in.After
		if in.LastEventID != "" {
			n, err := strconv.ParseInt(in.LastEventID, 10, 64)
			if err != nil {
				return nil, invalid("request.invalid", "header.Last-Event-ID", "must be an event sequence number")
			}
			after = n
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) { s.streamEvents(hctx, in.ID, after) }}, nil
	})
}

// eventSchemas puts the run vocabulary in the OpenAPI document: RunEvent
// and the data schema of each kind (RunPhaseData, StepStartedData…),
// described with the kind that carries it. It returns RunEvent's schema.
func (s *Server) eventSchemas() *huma.Schema {
	reg := s.api.OpenAPI().Components.Schemas
	var kinds []string
	for _, d := range []client.EventData{client.RunPhaseData{}, client.StepStartedData{}, client.TargetResultData{}, client.LogData{},
		client.StepFinishedData{}, client.StepInterruptedData{}, client.CommandReattachedData{}, client.RunFinishedData{}} {
		t := reflect.TypeOf(d)
		reg.Schema(t, true, t.Name())
		if sc := reg.Map()[t.Name()]; sc != nil {
			sc.Description = fmt.Sprintf("The data of a run event of kind %s.", d.EventKind())
		}
		kinds = append(kinds, t.Name())
	}
	ref := reg.Schema(reflect.TypeOf(client.RunEvent{}), true, "RunEvent")
	// RunEvent's data is one of them (or, for stream.denied, a problem).
	if ev := reg.Map()["RunEvent"]; ev != nil && ev.Properties["data"] != nil && ev.Properties["data"].AnyOf == nil {
		data := ev.Properties["data"]
		for _, name := range append(kinds, "Problem") {
			data.AnyOf = append(data.AnyOf, &huma.Schema{Ref: "#/components/schemas/" + name})
		}
	}
	return ref
}

// StreamRecheck is how often an event stream checks its token again. A
// token revoked on this keeper fails the next check; on another keeper
// sharing the database, within auth.CacheTTL more.
const StreamRecheck = 2 * time.Second

// streamEvents writes a run's events as SSE until the run has finished, or
// until the request's token no longer may read runs.
func (s *Server) streamEvents(hctx huma.Context, id string, after int64) {
	r, w := humago.Unwrap(hctx)
	ctx := r.Context()
	flusher, _ := w.(http.Flusher)
	// The stream lasts as long as the run: lift the server's ReadTimeout,
	// which would otherwise end it (the request itself was read).
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	header, key := r.Header.Get("Authorization"), r.Header.Get(CSRFHeader)
	checked := s.now()
	finished, graceLeft := false, 5
	for {
		if now := s.now(); now.Sub(checked) >= StreamRecheck {
			if _, _, prob := s.permitRequest(ctx, hostOf(r.RemoteAddr), header, r.Cookie, key, auth.RunRead); prob != nil {
				s.endDenied(w, flusher, after, prob)
				return
			}
			checked = now
		}
		wake := s.runs.Hub().Wait(id)
		run, err := s.runStore.RunHead(ctx, id) // not RunGet: no scenario, sealed input or state per tick
		if err != nil {
			return
		}
		evs, err := s.runStore.RunEvents(ctx, id, after, 500)
		if err != nil {
			s.log.Warn("read run events", "run", id, "err", err)
			return
		}
		for _, e := range evs {
			b, _ := json.Marshal(client.RunEvent{Seq: e.Seq, At: e.At, Kind: client.EventKind(e.Kind), Step: e.Step, SID: e.SID, Data: e.Data})
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, b)
			after = e.Seq
			finished = finished || e.Kind == "run.finished"
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(evs) == 500 {
			continue
		}
		if store.Terminal(run.Phase) && !finished && graceLeft > 0 && run.FinishedAt != nil && s.now().Sub(*run.FinishedAt) < 5*time.Second {
			// The executing keeper, maybe another one, appends run.finished
			// just after it commits the phase: give it that moment.
			graceLeft--
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if store.Terminal(run.Phase) {
			fmt.Fprintf(w, "event: %[1]s\ndata: {\"kind\":\"%[1]s\",\"seq\":%[2]d}\n\n", client.EventStreamEnd, after)
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(time.Second): // another keeper may be executing the run
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		}
	}
}

// endDenied ends an event stream whose token was refused with a last event
// of kind stream.denied carrying the problem.
func (s *Server) endDenied(w http.ResponseWriter, flusher http.Flusher, after int64, prob *client.Problem) {
	data, _ := json.Marshal(s.maskProblem(prob))
	b, _ := json.Marshal(client.RunEvent{Seq: after, At: s.now().UTC(), Kind: client.EventStreamDenied, Data: data})
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", client.EventStreamDenied, b)
	if flusher != nil {
		flusher.Flush()
	}
}
