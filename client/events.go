package client

import (
	"encoding/json"
	"fmt"
)

// This file is the one vocabulary of runs: the phases of a run, the
// statuses of its steps and targets, the kinds of the events a run's
// stream carries and the data of each kind. The keeper's engine and runner
// emit these types, the API serves them (GET /v1/runs/{id}/events, in the
// OpenAPI document as RunEvent and the *Data schemas), and soulctl, the
// Terraform provider, MCP and the web UI read them. Nothing else defines a
// status string.

// Phase is where a run is: Pending -> Running -> Succeeded | Failed |
// Cancelled.
type Phase string

// The phases of a run.
const (
	// PhasePending: accepted and queued, not started yet.
	PhasePending Phase = "Pending"
	// PhaseRunning: a keeper is executing it.
	PhaseRunning Phase = "Running"
	// PhaseSucceeded: every step ran and no target failed fatally.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed: a keeper-side step failed, a step with any_errors_fatal
	// failed on a target, or the run hit its timeout or was interrupted.
	PhaseFailed Phase = "Failed"
	// PhaseCancelled: cancelled by request (POST /v1/runs/{id}/cancel).
	PhaseCancelled Phase = "Cancelled"
	// PhaseAwaitingApproval: a step an approval policy holds waits for a
	// person other than the run's creator to approve it (POST
	// /v1/runs/{id}/approve); the run goes on Running when approved.
	PhaseAwaitingApproval Phase = "AwaitingApproval"
	// PhaseRejected: the step's approval was rejected, or it expired;
	// the step did not run.
	PhaseRejected Phase = "Rejected"
)

// Phases lists every phase in order.
var Phases = []Phase{PhasePending, PhaseRunning, PhaseAwaitingApproval, PhaseSucceeded, PhaseFailed, PhaseCancelled, PhaseRejected}

// Terminal reports whether the phase is final: Succeeded, Failed,
// Cancelled or Rejected.
func (p Phase) Terminal() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseCancelled || p == PhaseRejected
}

// Terminal reports whether a phase is final.
func Terminal(phase Phase) bool { return phase.Terminal() }

// TargetStatus is one target's result in one step.
type TargetStatus string

// The statuses of a target.
const (
	// TargetRunning: the step is running on this target (stored results
	// only; a target.result event never carries it).
	TargetRunning TargetStatus = "running"
	// TargetOK: the module ran and changed nothing.
	TargetOK TargetStatus = "ok"
	// TargetChanged: the module ran and changed the host (or changed_when
	// said so).
	TargetChanged TargetStatus = "changed"
	// TargetFailed: the module failed, failed_when was true, or the run
	// stopped before this target finished.
	TargetFailed TargetStatus = "failed"
	// TargetSkipped: the step's when was false for this target, or the
	// target failed in an earlier step (error target.failed_earlier).
	TargetSkipped TargetStatus = "skipped"
	// TargetUnreachable: the keeper could not reach the soul.
	TargetUnreachable TargetStatus = "unreachable"
	// TargetWouldChange: in a check run, the module would change the
	// target (its changes say what); nothing was changed.
	TargetWouldChange TargetStatus = "would_change"
	// TargetUnknown: in a check run, whether the module would change the
	// target cannot be known without running it (the target's unknown
	// says why).
	TargetUnknown TargetStatus = "unknown"
)

// TargetStatuses lists the statuses a finished target can have, in the
// order people read them (recaps, counts).
var TargetStatuses = []TargetStatus{TargetOK, TargetChanged, TargetWouldChange, TargetUnknown, TargetFailed, TargetSkipped, TargetUnreachable}

// Done reports whether the target has finished (every status but running
// and the empty one).
func (s TargetStatus) Done() bool { return s != "" && s != TargetRunning }

// Bad reports whether the target failed or was unreachable: what makes a
// step fail and later steps skip the target.
func (s TargetStatus) Bad() bool { return s == TargetFailed || s == TargetUnreachable }

// StepStatus is the summary of one step over its targets.
type StepStatus string

// The statuses of a step.
const (
	// StepRunning: the step has started and not finished.
	StepRunning StepStatus = "running"
	// StepOK: at least one target ran, none changed, none failed.
	StepOK StepStatus = "ok"
	// StepChanged: at least one target changed and none failed.
	StepChanged StepStatus = "changed"
	// StepFailed: at least one target failed or was unreachable, or the
	// keeper stopped while this non-idempotent step was running
	// (step.interrupted).
	StepFailed StepStatus = "failed"
	// StepSkipped: every target was skipped (or the step had none).
	StepSkipped StepStatus = "skipped"
	// StepWouldChange: in a check run, at least one target would change
	// and none failed.
	StepWouldChange StepStatus = "would_change"
	// StepUnknown: in a check run, no target would change for certain,
	// none failed, and at least one is unknown.
	StepUnknown StepStatus = "unknown"
)

// SummarizeStep is the one rule that turns targets' statuses into their
// step's status: failed if any target failed or was unreachable, else
// changed if any changed (would_change in a check run), else unknown if
// any is unknown, else ok if any ran, else skipped — a step whose targets
// were all skipped (or that had none) is skipped, never ok. changed
// reports whether any target changed (or would), failed or not.
func SummarizeStep(statuses []TargetStatus) (status StepStatus, changed bool) {
	failed, ran, would, unknown := false, false, false, false
	for _, s := range statuses {
		switch s {
		case TargetFailed, TargetUnreachable:
			failed = true
		case TargetChanged:
			changed = true
		case TargetWouldChange:
			would = true
		case TargetUnknown:
			unknown = true
		}
		if s != TargetSkipped {
			ran = true
		}
	}
	switch {
	case failed:
		return StepFailed, changed || would
	case !ran:
		return StepSkipped, false
	case changed:
		return StepChanged, true
	case would:
		return StepWouldChange, true
	case unknown:
		return StepUnknown, false
	}
	return StepOK, false
}

// RunMode says what a run does: apply (make the souls and clouds right)
// or check (say what apply would change, and change nothing).
type RunMode string

// The modes of a run.
const (
	RunApply RunMode = "apply"
	RunCheck RunMode = "check"
)

// Change is one thing a check run says a module would change on a target
// (or an apply changed): a package to install, a file to rewrite, a VM to
// create. Kind and Action are short stable words; Name what is changed;
// Before and After the values where they are short and not secret; Diff a
// unified diff of a file's text.
type Change struct {
	// Kind is what is changed: package, file, service, user, group,
	// setting, role, database, image, command, script, vm.
	Kind string `json:"kind" doc:"What is changed: package, file, service, user, group, setting, role, database, image, command, script, vm."`
	// Action is what happens to it: create, update, delete, install,
	// remove, add, start, restart, pull, run, resize.
	Action string `json:"action" doc:"What happens to it: create, update, delete, install, remove, add, start, restart, pull, run, resize."`
	Name   string `json:"name" doc:"What is changed: a package, a path, a setting, a VM's SID or count."`
	Before string `json:"before,omitempty" required:"false" doc:"The value now, when short and not secret."`
	After  string `json:"after,omitempty" required:"false" doc:"The value after, when short and not secret."`
	// Diff is a unified diff of a file's content; empty for content that
	// comes from a secret, which Note then says.
	Diff string `json:"diff,omitempty" required:"false" doc:"A unified diff of a file's content (absent for secret content, which note then says)."`
	Note string `json:"note,omitempty" required:"false" doc:"Anything else worth saying (why there is no diff)."`
}

// EventKind names what a run event reports; it is the SSE event name and
// RunEvent.Kind.
type EventKind string

// The kinds of run events, in the order a run emits them.
const (
	// EventRunPhase: the run entered a phase (Running, also when resumed).
	// Data: RunPhaseData.
	EventRunPhase EventKind = "run.phase"
	// EventStepStarted: a step started on its targets. Data:
	// StepStartedData. Step is set.
	EventStepStarted EventKind = "step.started"
	// EventTargetResult: one target finished the step. Data:
	// TargetResultData. Step and SID are set (SID "keeper" for keeper-side
	// steps).
	EventTargetResult EventKind = "target.result"
	// EventLog: a line about the run for people (retries, waits). Data:
	// LogData. Step and SID are set when the line is about them.
	EventLog EventKind = "log"
	// EventStepFinished: every target of a step finished. Data:
	// StepFinishedData. Step is set.
	EventStepFinished EventKind = "step.finished"
	// EventStepInterrupted: a resumed run found that the keeper had
	// stopped while this non-idempotent step was running; it is not
	// repeated and the run fails with run.interrupted. Data:
	// StepInterruptedData. Step is set.
	EventStepInterrupted EventKind = "step.interrupted"
	// EventCommandReattached: a command a target sent before (in an
	// execution its keeper lost, or before its connection was cut) was
	// already running or finished on the soul, and this execution attached
	// to it instead of starting it again. Data: CommandReattachedData.
	// Step and SID are set.
	EventCommandReattached EventKind = "command.reattached"
	// EventRunFinished: the run reached a terminal phase; the last event
	// the run stores. Data: RunFinishedData.
	EventRunFinished EventKind = "run.finished"
	// EventStreamEnd: the stream's own end, sent (not stored) once the run
	// finished and every event was delivered. Data is empty.
	EventStreamEnd EventKind = "stream.end"
	// EventStreamDenied: the stream's own end when the keeper refused the
	// token while streaming (revoked, expired, or no longer allowed
	// run.read); not stored. Data: the Problem.
	EventStreamDenied EventKind = "stream.denied"
)

// EventKinds lists the kinds a run stores, in the order a run emits them.
var EventKinds = []EventKind{EventRunPhase, EventStepStarted, EventTargetResult, EventLog, EventStepFinished, EventStepInterrupted, EventRunFinished}

// EventData is the data of one kind of stored run event: RunPhaseData,
// StepStartedData, TargetResultData, LogData, StepFinishedData,
// StepInterruptedData, CommandReattachedData or RunFinishedData.
type EventData interface {
	// EventKind is the kind of event this data belongs to.
	EventKind() EventKind
}

// RunPhaseData is the data of a run.phase event.
type RunPhaseData struct {
	Phase Phase `json:"phase" enum:"Pending,Running,AwaitingApproval,Succeeded,Failed,Cancelled,Rejected" doc:"The phase the run entered (AwaitingApproval while a step waits for a second person, Running again once approved)."`
	// Resumed is true when a keeper took the run over from a checkpoint
	// (its keeper stopped or died mid-run).
	Resumed bool `json:"resumed" doc:"True when the run resumes from a checkpoint after its keeper stopped."`
}

// StepStartedData is the data of a step.started event.
type StepStartedData struct {
	Index   int      `json:"index" doc:"The step's position in the scenario, from 0."`
	Module  string   `json:"module" doc:"The step's module ID, e.g. core.pkg.installed."`
	Targets []string `json:"targets" doc:"The SIDs the step runs on, in order; [\"keeper\"] for a keeper-side step."`
}

// TargetResultData is the data of a target.result event.
type TargetResultData struct {
	Status     TargetStatus `json:"status" enum:"ok,changed,would_change,unknown,failed,skipped,unreachable" doc:"The target's result (would_change and unknown in check runs)."`
	Changed    bool         `json:"changed" doc:"The target changed; in a check run, it would change."`
	Unknown    string       `json:"unknown,omitempty" required:"false" doc:"In a check run, why the keeper cannot tell whether the target would change."`
	Changes    []Change     `json:"changes,omitempty" required:"false" doc:"What changed or, in a check run, would change."`
	Attempts   int          `json:"attempts" doc:"How many times the module ran (retries + 1); 0 when it never ran."`
	DurationMS int64        `json:"duration_ms"`
	Error      *RunError    `json:"error,omitempty" required:"false" doc:"Why it failed, was unreachable or was skipped for an earlier failure."`
}

// LogData is the data of a log event.
type LogData struct {
	Message string `json:"message" doc:"The line, masked."`
}

// StepFinishedData is the data of a step.finished event.
type StepFinishedData struct {
	Index   int        `json:"index"`
	Status  StepStatus `json:"status" enum:"ok,changed,would_change,unknown,failed,skipped" doc:"The step's summary (SummarizeStep): skipped when every target was skipped."`
	Changed bool       `json:"changed"`
	// Counts is the number of targets by status; statuses no target had
	// are absent.
	Counts map[TargetStatus]int `json:"counts" doc:"Targets by status; absent statuses had none."`
}

// StepInterruptedData is the data of a step.interrupted event.
type StepInterruptedData struct {
	Index  int    `json:"index"`
	Module string `json:"module"`
}

// CommandReattachedData is the data of a command.reattached event.
type CommandReattachedData struct {
	// Command is the command's id: <run>.<step>.<attempt>.<n>.<soul>.
	Command   string `json:"command" doc:"The command's id on the soul."`
	Transport string `json:"transport" enum:"ssh,agent" doc:"The transport that reattached it."`
	// Epoch is the execution of the run that reattached it.
	Epoch int64 `json:"epoch" doc:"The run's execution (lease epoch) that reattached the command."`
	// Why: "resumed" (a new execution of the run) or "redialled" (the
	// connection was cut and made again).
	Why string `json:"why" enum:"resumed,redialled" doc:"resumed: a new execution of the run took it over; redialled: the connection was cut and made again."`
}

// RunFinishedData is the data of a run.finished event.
type RunFinishedData struct {
	Phase Phase     `json:"phase" enum:"Succeeded,Failed,Cancelled,Rejected"`
	Error *RunError `json:"error,omitempty" required:"false" doc:"Why the run did not succeed."`
}

// EventKind implements EventData.
func (RunPhaseData) EventKind() EventKind { return EventRunPhase }

// EventKind implements EventData.
func (StepStartedData) EventKind() EventKind { return EventStepStarted }

// EventKind implements EventData.
func (TargetResultData) EventKind() EventKind { return EventTargetResult }

// EventKind implements EventData.
func (LogData) EventKind() EventKind { return EventLog }

// EventKind implements EventData.
func (StepFinishedData) EventKind() EventKind { return EventStepFinished }

// EventKind implements EventData.
func (StepInterruptedData) EventKind() EventKind { return EventStepInterrupted }

// EventKind implements EventData.
func (CommandReattachedData) EventKind() EventKind { return EventCommandReattached }

// EventKind implements EventData.
func (RunFinishedData) EventKind() EventKind { return EventRunFinished }

var (
	_ EventData = RunPhaseData{}
	_ EventData = StepStartedData{}
	_ EventData = TargetResultData{}
	_ EventData = LogData{}
	_ EventData = StepFinishedData{}
	_ EventData = StepInterruptedData{}
	_ EventData = CommandReattachedData{}
	_ EventData = RunFinishedData{}
)

// ErrUnknownEventKind is returned by RunEvent.Decode for a kind this
// client does not know (a newer keeper); callers show or skip such events.
var ErrUnknownEventKind = fmt.Errorf("unknown run event kind")

// Decode returns the event's data as the type of its kind. An unknown kind
// returns ErrUnknownEventKind (wrapped); data that does not fit its kind
// returns the JSON error.
func (e RunEvent) Decode() (EventData, error) {
	var d EventData
	switch e.Kind {
	case EventRunPhase:
		d = decodeAs[RunPhaseData](e.Data)
	case EventStepStarted:
		d = decodeAs[StepStartedData](e.Data)
	case EventTargetResult:
		d = decodeAs[TargetResultData](e.Data)
	case EventLog:
		d = decodeAs[LogData](e.Data)
	case EventStepFinished:
		d = decodeAs[StepFinishedData](e.Data)
	case EventStepInterrupted:
		d = decodeAs[StepInterruptedData](e.Data)
	case EventCommandReattached:
		d = decodeAs[CommandReattachedData](e.Data)
	case EventRunFinished:
		d = decodeAs[RunFinishedData](e.Data)
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownEventKind, e.Kind)
	}
	if p, ok := d.(decodeFailure); ok {
		return nil, fmt.Errorf("decode %s event %d: %w", e.Kind, e.Seq, p.err)
	}
	return d, nil
}

type decodeFailure struct{ err error }

func (decodeFailure) EventKind() EventKind { return "" }

func decodeAs[T EventData](raw json.RawMessage) EventData {
	var v T
	if len(raw) == 0 || string(raw) == "null" {
		return v
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return decodeFailure{err}
	}
	return v
}
