package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/soulstack/soulstack/client"
)

// Run phases, as stored: the text of client's Phase constants, which
// define and document them.
const (
	PhasePending   = string(client.PhasePending)
	PhaseRunning   = string(client.PhaseRunning)
	PhaseSucceeded = string(client.PhaseSucceeded)
	PhaseFailed    = string(client.PhaseFailed)
	PhaseCancelled = string(client.PhaseCancelled)
	// PhaseAwaitingApproval and PhaseRejected are never stored: a run
	// waiting for approval is Running (its keeper holds it) with a pending
	// approval, a rejected one Failed with a RejectedCode; they are shown
	// in these phases (ShownPhase).
	PhaseAwaitingApproval = string(client.PhaseAwaitingApproval)
	PhaseRejected         = string(client.PhaseRejected)
)

// Error codes of a run whose step's approval was rejected or expired.
const (
	CodeRejected        = "run.rejected"
	CodeApprovalExpired = "run.approval_expired"
)

// RejectedCode reports whether a Failed run with error code ended
// Rejected.
func RejectedCode(code string) bool { return code == CodeRejected || code == CodeApprovalExpired }

// ShownPhase is the phase a run is shown in: its stored phase, but
// AwaitingApproval for a Running run a step of which waits for approval,
// and Rejected for a Failed run whose step's approval was rejected or
// expired.
func ShownPhase(phase, code string, awaiting bool) client.Phase {
	switch {
	case phase == PhaseRunning && awaiting:
		return client.PhaseAwaitingApproval
	case phase == PhaseFailed && RejectedCode(code):
		return client.PhaseRejected
	}
	return client.Phase(phase)
}

// Terminal reports whether phase is final.
func Terminal(phase string) bool { return client.Phase(phase).Terminal() }

// Run errors.
var (
	// ErrKeyConflict: the same actor already used the key for a run with a
	// different scenario or input.
	ErrKeyConflict = errors.New("re-run key is taken by a different run")
	// ErrLeaseLost: another keeper owns the run now.
	ErrLeaseLost = errors.New("run lease lost")
	// ErrFinished: the run already ended.
	ErrFinished = errors.New("run already finished")
)

// Run is one execution of a scenario with an input.
type Run struct {
	ID     string
	Key    string // re-run key, unique per CreatedBy; empty when none was given
	Digest string // hash of scenario, input and mode, compared for the key
	Name   string
	// Mode is apply or check (client.RunMode); empty reads as apply.
	Mode     string
	Scenario string
	// InputSealed is the whole input, encrypted under the data key.
	InputSealed string
	// InputMasked is the input as it may be shown.
	InputMasked json.RawMessage
	Phase       string
	ErrorCode   string
	ErrorMsg    string
	Timeout     time.Duration
	CreatedBy   string
	CreatedAt   time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
	// Outputs is the masked JSON of each step's output, by step name.
	Outputs json.RawMessage
	// Message is the job's message, masked: the JSON text of the outputs
	// when the run Succeeded, the error text otherwise.
	Message string
	// StateSealed holds the unmasked outputs of finished steps, encrypted,
	// so that a resumed run sees what the crashed one computed.
	StateSealed string
	Owner       string
	// HeartbeatAt is when the owner claimed the run (the owner's liveness
	// is its keeper row, KeeperBeat).
	HeartbeatAt     *time.Time
	CancelRequested bool
	// Epoch counts the run's executions: each claim is one more. The souls
	// refuse a command of an older epoch than one they have seen for the
	// run, which fences a keeper cut off from the database.
	Epoch int64
	// TraceParent is the W3C trace context of the request that made the
	// run (empty without tracing): every execution continues that trace.
	TraceParent string
	// Project is the project the run acts in: it reaches that project's
	// souls, providers and profiles (and those shared with it) alone.
	Project string
	// AwaitingApproval: the run is Running and a step of it waits for a
	// person's approval (read, never written).
	AwaitingApproval bool
}

// RunCommand is the write-ahead record of one soul-side command: stored
// before the command is sent, so that a resumed run knows which commands
// may already be running and through which transport it sent them.
type RunCommand struct {
	RunID string
	// ID is the command id, "<run>.<step>.<attempt>.<n>.<sid hash>" (the
	// first 8 bytes of the SID's SHA-256, in hex: unique in a step): the
	// same command of a resumed run has the same id.
	ID        string
	StepIndex int
	SID       string
	Attempt   int
	N         int // the command's place among its target's commands, from 1
	Epoch     int64
	// Digest is a hash of what the command runs, so that a resumed run
	// that would send something else under the same id is caught.
	Digest    string
	Transport string // "ssh" or "agent"
	SentAt    time.Time
}

// RunStep is the state of one step of a run.
type RunStep struct {
	RunID      string
	Index      int
	Name       string
	Module     string
	Status     string // pending, running, ok, changed, failed, skipped
	StartedAt  *time.Time
	FinishedAt *time.Time
}

// RunTarget is one target's result in one step.
type RunTarget struct {
	RunID      string
	StepIndex  int
	SID        string
	Status     string // ok, changed, failed, skipped, unreachable
	Changed    bool
	Output     json.RawMessage // masked
	ErrorCode  string
	ErrorMsg   string
	Attempts   int
	DurationMS int64
	// Unknown says, in a check run, why the target's change cannot be
	// known; Changes is the JSON list of client.Change it would make.
	Unknown string
	Changes json.RawMessage
}

// RunEvent is one entry of a run's event stream.
type RunEvent struct {
	RunID string
	Seq   int64
	At    time.Time
	Kind  string // run.phase, step.started, step.finished, target.result, log
	Step  string
	SID   string
	Data  json.RawMessage // masked
}

// RunCreateParams accepts a run. Enqueue, when set, is called inside the
// transaction that inserts the run, so that the run and its queue job
// commit together.
type RunCreateParams struct {
	Run     Run
	Actor   Actor
	Enqueue func(ctx context.Context, tx *sql.Tx) error
}

// RunFinishParams ends a run. Enqueue, when set, is called inside the
// transaction that ends it: what must follow a run's end (its drift
// record, its notification) is queued with it, and is done after a crash
// between the two (the queue is the outbox).
type RunFinishParams struct {
	ID        string
	Owner     string
	Phase     string
	ErrorCode string
	ErrorMsg  string
	Outputs   json.RawMessage
	Message   string
	Enqueue   func(ctx context.Context, tx *sql.Tx) error
}

// RunHead is the little of a run a poller needs.
type RunHead struct {
	Phase      string
	FinishedAt *time.Time
	Project    string
}

// RunListParams pages through runs, optionally filtered.
type RunListParams struct {
	ListParams
	// Phase, when set, keeps the runs in that phase.
	Phase string
	// NameContains, when set, keeps the runs whose scenario name contains
	// it (ignoring ASCII case, literally: % and _ are not wildcards).
	NameContains string
	// CreatedSince, when set, keeps the runs created at or after it.
	CreatedSince time.Time
}

// RunStore persists runs, their steps, targets and events.
type RunStore interface {
	// RunCreate inserts a run. A key is scoped to the actor: with a key the
	// same actor already used for a run with the same digest it returns
	// that run and created=false; with a different digest, ErrKeyConflict.
	// A key only other actors used names no run: a new one is created.
	RunCreate(ctx context.Context, p RunCreateParams) (run Run, created bool, err error)
	RunGet(ctx context.Context, id string) (Run, error)
	// RunByKey returns the run createdBy started with key (ErrNotFound
	// when none).
	RunByKey(ctx context.Context, createdBy, key string) (Run, error)
	// RunHead returns only a run's phase and finish time, by primary key,
	// for pollers (the event stream) that must not read the whole run
	// (scenario, sealed input and state).
	RunHead(ctx context.Context, id string) (RunHead, error)
	// RunList lists runs newest first, those that match p's filters;
	// After is the id of the last run of the previous page.
	RunList(ctx context.Context, p RunListParams) ([]Run, error)
	RunSteps(ctx context.Context, id string) ([]RunStep, []RunTarget, error)
	// RunClaim makes owner the run's executor if the run is not finished
	// and has no live owner (none, owner itself, or an owner whose keeper
	// heartbeat is older than staleBefore). It sets phase Running and
	// started_at, and starts a new execution: Epoch is one more.
	RunClaim(ctx context.Context, id, owner string, staleBefore time.Time) (Run, bool, error)
	// KeeperBeat renews keeper owner's heartbeat row, which holds every
	// run it owns: one write per keeper, however many runs it executes.
	KeeperBeat(ctx context.Context, owner string) error
	// RunsHeld lists the Running runs owner holds, each with whether a
	// cancel was requested.
	RunsHeld(ctx context.Context, owner string) (map[string]bool, error)
	// RunRelease hands owner's lease back (a draining keeper): the run
	// stays Running and any keeper may claim and resume it at once.
	// ErrLeaseLost if owner does not hold it.
	RunRelease(ctx context.Context, id, owner string) error
	// RunCommandRecord stores a command's write-ahead record (again, for a
	// command a resumed execution sends anew) if owner holds the run in
	// the record's epoch; ErrLeaseLost otherwise.
	RunCommandRecord(ctx context.Context, owner string, c RunCommand) error
	// RunCommands lists a run's command records by id.
	RunCommands(ctx context.Context, runID string) ([]RunCommand, error)
	RunStepSave(ctx context.Context, s RunStep) error
	RunTargetSave(ctx context.Context, t RunTarget) error
	// RunTargetsSave saves several targets' results (as RunTargetSave
	// each) in one transaction: all of them or none.
	RunTargetsSave(ctx context.Context, ts []RunTarget) error
	RunStateSave(ctx context.Context, id, owner, sealed string) error
	// RunFinish ends the run and writes audit run.finished in one
	// transaction.
	RunFinish(ctx context.Context, p RunFinishParams) error
	// RunCancel requests cancellation (audit run.cancelled); a Pending run
	// is cancelled at once. ErrFinished for a finished run.
	RunCancel(ctx context.Context, p DeleteParams) (Run, error)
	RunEventAppend(ctx context.Context, e RunEvent) error
	// RunEventsAppend stores several events, in the order given, in one
	// transaction: all of them or none (a seq already stored fails the
	// whole batch).
	RunEventsAppend(ctx context.Context, es []RunEvent) error
	RunEvents(ctx context.Context, id string, afterSeq int64, limit int) ([]RunEvent, error)
	// RunsOrphaned lists Running runs with no owner, whose owner is owner
	// (pass the keeper's own id only at start, when none of its runs can
	// be live) or whose owner's keeper heartbeat is older than
	// staleBefore.
	RunsOrphaned(ctx context.Context, owner string, staleBefore time.Time) ([]string, error)
}
