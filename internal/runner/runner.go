// Package runner makes runs durable: it accepts a run and its queue job in
// one transaction, works jobs from the River queue in the keeper's own
// database, holds a lease on each run while it executes (so that one run
// executes on one keeper at a time), records every step, target and event,
// and recovers runs whose keeper died.
package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/jonboulle/clockwork"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/transport"
)

// Default lease timing (Lease). A keeper's liveness is one heartbeat row
// (store.KeeperBeat), renewed every HeartbeatEvery, which holds every run
// it executes; a run whose keeper's row is older than StaleAfter is taken
// over, its commands reattached on the souls, so that a keeper killed
// with -9 costs its runs about StaleAfter and nothing else.
const (
	HeartbeatEvery = time.Second
	StaleAfter     = 3 * time.Second
	// DefaultTimeout is a run's server-side timeout unless it asks for
	// another.
	DefaultTimeout = 15 * time.Minute
	// MaxTimeout bounds what a run may ask for.
	MaxTimeout = 24 * time.Hour
	// RecoverEvery is how often a keeper looks for runs whose keeper died
	// and re-enqueues them: a run is taken over between StaleAfter and
	// StaleAfter+RecoverEvery after its keeper's last heartbeat.
	RecoverEvery = HeartbeatEvery / 2
	// LeaseGiveUp is how long a keeper goes on without renewing its
	// heartbeat (its database unreachable from here) before it stops its
	// executions and leaves their runs to be resumed: one heartbeat before
	// its row goes stale and another keeper may claim them, so that two
	// keepers never execute a run at once. The commands those executions
	// sent keep running on the souls; the next execution reattaches them.
	LeaseGiveUp = StaleAfter - HeartbeatEvery
)

// Lease is how a keeper holds the runs it executes: it renews its
// heartbeat row every Heartbeat, and takes over a run whose keeper's row
// is older than StaleAfter; every keeper on one database must use the
// same. The zero value is the defaults (HeartbeatEvery, StaleAfter).
type Lease struct {
	Heartbeat  time.Duration
	StaleAfter time.Duration
}

func (l Lease) withDefaults() Lease {
	if l.Heartbeat <= 0 {
		l.Heartbeat = HeartbeatEvery
	}
	if l.StaleAfter <= 0 {
		l.StaleAfter = StaleAfter
	}
	return l
}

// validate refuses timings under which a run could be executed twice: a
// lease must outlast a few heartbeats.
func (l Lease) validate() error {
	if l.StaleAfter < 3*l.Heartbeat {
		return fmt.Errorf("runner lease: stale_after %s must be at least three heartbeats (%s)", l.StaleAfter, 3*l.Heartbeat)
	}
	return nil
}

// giveUp is how long a keeper goes on without renewing its heartbeat
// before it stops its executions: one heartbeat before its row goes stale
// and another keeper may claim their runs.
func (l Lease) giveUp() time.Duration { return l.StaleAfter - l.Heartbeat }

// recoverEvery is how often the runner looks for runs whose keeper died:
// a run is taken over between StaleAfter and StaleAfter plus half a
// heartbeat after its keeper's last heartbeat.
func (l Lease) recoverEvery() time.Duration { return l.Heartbeat / 2 }

// Outcome is how an execution ended.
type Outcome struct {
	Phase     string // Succeeded, Failed or Cancelled
	ErrorCode string
	ErrorMsg  string
	// Message is the run's message when it did not succeed, the error as
	// the second seed's job raises it into its message: for failed targets
	// "<step> on <sid>: <code>: <message>", several joined with "; ".
	// Empty means "<ErrorCode>: <ErrorMsg>". A Succeeded run's message is
	// the JSON of its outputs, whatever this holds.
	Message string
	// HandBack: the executor stopped between two steps because the keeper
	// is draining; the run is checkpointed and is resumed later, its phase
	// unchanged.
	HandBack bool
	// Outputs are the steps' outputs by step name, unmasked; the runner
	// masks them before they are stored.
	Outputs map[string]any
}

// Recorder persists what an execution does as it goes. Events and target
// results may be buffered and written in batches; Step and Checkpoint
// store everything recorded before them first.
type Recorder interface {
	// Event appends the event of data's kind about step and sid (either
	// may be empty); data is masked before it is stored.
	Event(step, sid string, data client.EventData)
	// Step saves a step's state.
	Step(s store.RunStep)
	// Target saves one target's result; its output is masked.
	Target(t store.RunTarget, output any)
	// Checkpoint seals and saves the state a resumed execution needs.
	Checkpoint(state []byte) error
	// Command stores a soul-side command's write-ahead record, before the
	// command is sent; ErrLeaseLost (wrapped) when this execution no
	// longer holds the run.
	Command(ctx context.Context, c store.RunCommand) error
}

// Execution is what an Executor gets for one run.
type Execution struct {
	Run   store.Run
	Input map[string]any // unsealed
	// Resume is the last checkpoint when the run is being resumed after
	// its keeper died; nil on the first execution.
	Resume []byte
	// Steps and Targets are what the store recorded before; Commands the
	// soul-side commands earlier executions sent (write-ahead records).
	Steps    []store.RunStep
	Targets  []store.RunTarget
	Commands []store.RunCommand
	// Drain is closed when the keeper stops: the executor then hands the
	// run back (Outcome.HandBack) before its next step.
	Drain <-chan struct{}
	// Secrets is the run's own set of secret values: what the executor
	// adds to it (secret inputs, resolved keys, minted tokens) is masked in
	// everything the Recorder stores for this run, and nowhere else. It is
	// dropped when the execution ends; a resumed execution starts with an
	// empty one and adds the run's secrets again.
	Secrets *secret.Set
}

// Executor executes a run. It must honour ctx (timeout and cancellation)
// and report through rec.
type Executor interface {
	Execute(ctx context.Context, x Execution, rec Recorder) Outcome
}

// Store is the part of the keeper's store the runner keeps runs in:
// their creation, leases, checkpoints and end.
type Store interface {
	RunCreate(ctx context.Context, p store.RunCreateParams) (store.Run, bool, error)
	RunGet(ctx context.Context, id string) (store.Run, error)
	RunClaim(ctx context.Context, id, owner string, staleBefore time.Time) (store.Run, bool, error)
	KeeperBeat(ctx context.Context, owner string) error
	RunsHeld(ctx context.Context, owner string) (map[string]bool, error)
	RunRelease(ctx context.Context, id, owner string) error
	RunStateSave(ctx context.Context, id, owner, sealed string) error
	RunFinish(ctx context.Context, p store.RunFinishParams) error
	RunsOrphaned(ctx context.Context, owner string, staleBefore time.Time) ([]string, error)
}

// Records is the part of the keeper's store an execution's recorder
// writes: the commands' write-ahead records, steps, targets and events.
type Records interface {
	RunCommandRecord(ctx context.Context, owner string, c store.RunCommand) error
	RunCommands(ctx context.Context, runID string) ([]store.RunCommand, error)
	RunSteps(ctx context.Context, id string) ([]store.RunStep, []store.RunTarget, error)
	RunStepSave(ctx context.Context, st store.RunStep) error
	RunTargetSave(ctx context.Context, t store.RunTarget) error
	RunTargetsSave(ctx context.Context, ts []store.RunTarget) error
	RunEventAppend(ctx context.Context, e store.RunEvent) error
	RunEventsAppend(ctx context.Context, es []store.RunEvent) error
	RunEvents(ctx context.Context, id string, afterSeq int64, limit int) ([]store.RunEvent, error)
}

// Config wires a Runner.
type Config struct {
	Store Store
	// Records is where executions record their progress; nil: Store,
	// which must then implement it.
	Records Records
	DB      *sql.DB
	Queue   riverdriver.Driver[*sql.Tx]
	Sealer  *secret.Sealer
	// Secrets are the keeper's, masked in every run's data besides the
	// run's own; nil: a run masks its own alone.
	Secrets *secret.Keeper
	Exec    Executor
	Owner   string // this keeper's stable id
	Workers int    // concurrent runs; default 20
	// Base is the runner's logger and clock: Clock times leases,
	// heartbeats, run timeouts and the recovery of stale runs (tests
	// drive a fake one).
	base.Base
	// Lease is the lease timing; zero fields are the defaults.
	Lease Lease
	// Finished, when set, is called with each run the keepers finished
	// that Follows says something follows, as stored, at least once: a
	// queue job committed with the run's end calls it (again, with
	// backoff, while it returns an error), on whichever keeper is up,
	// after a crash too.
	Finished func(ctx context.Context, run store.Run) error
	// Follows reports whether anything follows run's end in phase (nil:
	// always); a run nothing follows queues no job.
	Follows func(run store.Run, phase string) bool
	// Periodic are the tasks run on a schedule (see Periodic).
	Periodic []Periodic
	// Register adds the workers of other jobs the keepers queue
	// (webhook deliveries) to the queue's workers; Enqueue inserts them.
	Register func(*river.Workers)
	// Metrics counts the targets' results; nil: none.
	Metrics *Metrics
}

// Runner accepts runs and executes them from the queue.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	clock clockwork.Clock
	river *river.Client[*sql.Tx]
	hub   *Hub
	wg    sync.WaitGroup
	stop  context.CancelFunc
	// alive is closed when the heartbeat loop (keepAlive) has returned;
	// stopAlive ends it.
	alive     chan struct{}
	stopAlive context.CancelFunc

	// drain is closed when the keeper starts to stop: executions hand
	// their run back between two steps.
	drain     chan struct{}
	drainOnce sync.Once
	stopOnce  sync.Once
	stopErr   error

	flightMu sync.Mutex
	inFlight map[string]string // run id -> the step it executes
	// execs are the executions here that the keeper's heartbeat holds,
	// by run id: stopped when the lease is lost or a cancel requested.
	execs map[string]*held

	secretsMu sync.Mutex
	secrets   map[string]*liveSecrets // by run id, while the run executes here

	// requeued holds the stuck queue jobs this keeper re-enqueued a run
	// for (see stuckJobs), and recovered when it last re-enqueued each
	// stale run; only the recovery loop uses them.
	requeued  map[int64]bool
	recovered map[string]time.Time
}

// liveSecrets is the secret set of a run executing in this process; users
// counts the executions holding it.
type liveSecrets struct {
	set   *secret.Set
	users int
}

// RunArgs is the queue job of one run.
type RunArgs struct {
	RunID string `json:"run_id"`
	// TraceParent is the W3C trace context of the request that made the
	// run, in jobs a keeper before schema 25 enqueued; the run row holds it
	// now (store.Run.TraceParent), for every execution of the run.
	TraceParent string `json:"traceparent,omitempty"`
}

// Kind is the job's stable kind name.
func (RunArgs) Kind() string { return "soulstack.run" }

// New migrates the queue's schema and builds the runner.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 20
	}
	cfg.Init()
	if cfg.Records == nil {
		r, ok := cfg.Store.(Records)
		if !ok {
			return nil, errors.New("runner: no Records, and the Store does not implement them")
		}
		cfg.Records = r
	}
	cfg.Lease = cfg.Lease.withDefaults()
	if err := cfg.Lease.validate(); err != nil {
		return nil, err
	}
	if err := Migrate(ctx, cfg.Queue); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: cfg.Log, clock: cfg.Clock, hub: NewHub(), secrets: map[string]*liveSecrets{}, drain: make(chan struct{}), inFlight: map[string]string{}, execs: map[string]*held{}, requeued: map[int64]bool{}, recovered: map[string]time.Time{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{r: r})
	tasks := map[string]Periodic{}
	for _, t := range cfg.Periodic {
		if t.Every <= 0 || t.Run == nil || t.Name == "" {
			return nil, fmt.Errorf("periodic task %q: needs a name, an interval and a function", t.Name)
		}
		tasks[t.Name] = t
	}
	river.AddWorker(workers, &periodicWorker{tasks: tasks})
	river.AddWorker(workers, &finishedWorker{r: r})
	if cfg.Register != nil {
		cfg.Register(workers)
	}
	var err error
	r.river, err = river.NewClient(cfg.Queue, &river.Config{
		ID:     cfg.Owner,
		Logger: cfg.Log.With("component", "queue"),
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers},
			// What follows a change (FollowUp) waits for no run's slot.
			FollowQueue: {MaxWorkers: followWorkers}},
		Workers:           workers,
		JobTimeout:        -1, // the runner enforces each run's own timeout
		FetchPollInterval: 200 * time.Millisecond,
		MaxAttempts:       5,
		PeriodicJobs:      periodicJobs(cfg.Periodic),
	})
	if err != nil {
		return nil, fmt.Errorf("queue client: %w", err)
	}
	return r, nil
}

// Migrate applies the run queue's own migrations (River's tables).
func Migrate(ctx context.Context, queue riverdriver.Driver[*sql.Tx]) error {
	m, err := rivermigrate.New(queue, nil)
	if err != nil {
		return fmt.Errorf("queue migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("apply queue migrations: %w", err)
	}
	return nil
}

// openSecrets returns the secret set of run id, made on first use; every
// call must be paired with closeSecrets.
func (r *Runner) openSecrets(id string) *secret.Set {
	r.secretsMu.Lock()
	defer r.secretsMu.Unlock()
	l := r.secrets[id]
	if l == nil {
		l = &liveSecrets{set: r.cfg.Secrets.NewSet()}
		r.secrets[id] = l
	}
	l.users++
	return l.set
}

// closeSecrets drops run id's secret set once no execution holds it.
func (r *Runner) closeSecrets(id string) {
	r.secretsMu.Lock()
	defer r.secretsMu.Unlock()
	if l := r.secrets[id]; l != nil {
		if l.users--; l.users <= 0 {
			delete(r.secrets, id)
		}
	}
}

// LiveSecrets is how many runs' secret sets this runner holds in memory:
// one per run executing here, none once they have ended.
func (r *Runner) LiveSecrets() int {
	r.secretsMu.Lock()
	defer r.secretsMu.Unlock()
	return len(r.secrets)
}

// Hub returns the notifier of new run events.
func (r *Runner) Hub() *Hub { return r.hub }

// Enqueue inserts a job of a kind Config.Register added into the queue.
func (r *Runner) Enqueue(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error {
	_, err := r.river.Insert(ctx, args, opts)
	return err
}

// EnqueueTx inserts a job in tx: it commits, and is worked, with tx (the
// outbox of what must follow a change), on the follow-up queue unless
// opts names another.
func (r *Runner) EnqueueTx(ctx context.Context, tx *sql.Tx, args river.JobArgs, opts *river.InsertOpts) error {
	if opts == nil {
		opts = &river.InsertOpts{}
	}
	if opts.Queue == "" {
		opts.Queue = FollowQueue
	}
	_, err := r.river.InsertTx(ctx, tx, args, opts)
	return err
}

// FollowQueue is the queue of what follows a change (a run's end, a drift
// change, an audited event): its own workers, so that it never waits for
// a run's slot, nor a run for it.
const FollowQueue = "follow"

// followWorkers is how many follow-up jobs a keeper works at once.
const followWorkers = 100

// Start works the queue and recovers this keeper's orphaned runs, until
// Stop.
func (r *Runner) Start(ctx context.Context) error {
	// The queue outlives ctx: Stop drains it, so that a signal cancelling
	// ctx does not cut the steps in flight.
	if err := r.river.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start queue: %w", err)
	}
	// The keeper's row first: the runs it claims are held by it.
	if err := r.cfg.Store.KeeperBeat(ctx, r.cfg.Owner); err != nil {
		r.log.Warn("keeper heartbeat", "err", err)
	}
	// Runs this keeper owned when it died cannot be live: recover them now.
	r.recover(ctx, r.cfg.Owner)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = cancel
	// The heartbeat outlives the other loops: it holds the runs a drain
	// lets finish, and stops only once they have (stopNow).
	aliveCtx, stopAlive := context.WithCancel(context.WithoutCancel(ctx))
	r.alive = make(chan struct{})
	r.stopAlive = stopAlive
	go func() {
		defer close(r.alive)
		r.keepAlive(aliveCtx)
	}()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := r.clock.NewTicker(r.cfg.Lease.recoverEvery())
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.Chan():
				r.recover(loopCtx, r.cfg.Owner)
			}
		}
	}()
	return nil
}

// Stop drains the runner: it stops taking jobs, lets every execution
// finish the step it is in and hand its run back (checkpointed, lease
// released, resumed by the next keeper to start or by another keeper), and
// waits for them. When ctx ends first, the steps still in flight are
// cancelled: their runs are left to be resumed as after a crash. Stop may
// be called again; later calls wait for the first.
func (r *Runner) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { r.stopErr = r.stopNow(ctx) })
	return r.stopErr
}

func (r *Runner) stopNow(ctx context.Context) error {
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
	defer func() {
		if r.stopAlive != nil {
			r.stopAlive()
			<-r.alive
		}
	}()
	r.drainOnce.Do(func() { close(r.drain) })
	done := make(chan struct{})
	go r.logDrain(done)
	defer close(done)
	if err := r.river.Stop(ctx); err == nil {
		return nil
	}
	r.log.Warn("drain timeout reached: cancelling the steps still in flight; their runs resume on the next start", "runs", r.flying())
	hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.river.StopAndCancel(hctx)
}

// DrainLogEvery is how often a draining runner says what it waits for.
const DrainLogEvery = 2 * time.Second

// logDrain logs the runs in flight until done.
func (r *Runner) logDrain(done <-chan struct{}) {
	t := time.NewTicker(DrainLogEvery)
	defer t.Stop()
	for {
		if f := r.flying(); len(f) > 0 {
			r.log.Info(fmt.Sprintf("draining: %d runs in flight", len(f)), "runs", f)
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// flying lists the runs executing here as "run_… step x", sorted.
func (r *Runner) flying() []string {
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	out := make([]string, 0, len(r.inFlight))
	for id, step := range r.inFlight {
		if step == "" {
			out = append(out, id)
			continue
		}
		out = append(out, id+" step "+step)
	}
	sort.Strings(out)
	return out
}

// takeOff marks run id as executing here unless it already is: a second
// queue job for a run this keeper executes (several keepers re-enqueue a
// stale run, each once per RecoverEvery) must not claim it again, which the
// lease alone would allow since the owner is this keeper.
func (r *Runner) takeOff(id string) bool {
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	if _, ok := r.inFlight[id]; ok {
		return false
	}
	r.inFlight[id] = ""
	return true
}

// isFlying reports whether run id executes here.
func (r *Runner) isFlying(id string) bool {
	r.flightMu.Lock()
	defer r.flightMu.Unlock()
	_, ok := r.inFlight[id]
	return ok
}

func (r *Runner) setFlying(id, step string) {
	r.flightMu.Lock()
	r.inFlight[id] = step
	r.flightMu.Unlock()
}

func (r *Runner) landed(id string) {
	r.flightMu.Lock()
	delete(r.inFlight, id)
	r.flightMu.Unlock()
}

// recover re-enqueues runs that lost their executor: Running runs whose
// keeper's lease is stale, or that owner (this keeper) holds and does not
// execute — at start every run it held, later one whose execution stopped
// to be resumed while the keeper stayed up (its heartbeat given up while
// the database was down), which no other keeper takes over since this
// keeper's row is fresh — and Pending runs whose queue job is stuck with a
// dead keeper (stuckJobs).
func (r *Runner) recover(ctx context.Context, owner string) {
	ids, err := r.cfg.Store.RunsOrphaned(ctx, owner, r.clock.Now().Add(-r.cfg.Lease.StaleAfter))
	if err != nil {
		r.log.Error("look for orphaned runs", "err", err)
		return
	}
	now := r.clock.Now()
	for id, at := range r.recovered {
		if now.Sub(at) >= r.cfg.Lease.StaleAfter {
			delete(r.recovered, id)
		}
	}
	for _, id := range ids {
		// One job per stale run per StaleAfter from each keeper: while
		// every worker is busy the job waits in the queue, and a new one
		// every RecoverEvery would only pile up. A run of owner's that
		// executes here is live.
		if _, ok := r.recovered[id]; ok || r.isFlying(id) {
			continue
		}
		if _, err := r.river.Insert(ctx, RunArgs{RunID: id}, nil); err != nil {
			r.log.Error("re-enqueue orphaned run", "run", id, "err", err)
			continue
		}
		r.recovered[id] = now
		r.log.Warn("recovering a run whose keeper stopped", "run", id)
	}
	r.stuckJobs(ctx)
}

// SubmitParams asks for a run.
type SubmitParams struct {
	Name     string
	Scenario string
	Input    map[string]any
	// Secret names the input keys that are secret beyond the name rule.
	Secret  map[string]bool
	Key     string
	Timeout time.Duration
	Actor   store.Actor
	// Mode is client.RunApply (empty) or client.RunCheck.
	Mode client.RunMode
	// Project is the project the run acts in; empty is the default one.
	Project string
}

// Submit accepts a run: it stores the run with its input sealed and its
// queue job in one transaction. A key already used with the same scenario
// and input returns that run (created=false).
func (r *Runner) Submit(ctx context.Context, p SubmitParams) (store.Run, bool, error) {
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	input, err := json.Marshal(p.Input)
	if err != nil {
		return store.Run{}, false, fmt.Errorf("encode input: %w", err)
	}
	if p.Mode == "" {
		p.Mode = client.RunApply
	}
	content := fmt.Sprintf("%d:%s;", len(p.Scenario), p.Scenario)
	if p.Mode != client.RunApply {
		content = string(p.Mode) + ";" + content // a check and an apply of the same content are different runs
	}
	if p.Project != "" && p.Project != store.DefaultProject {
		content = "project " + p.Project + ";" + content // so are the same content's runs in two projects
	}
	digest := r.cfg.Sealer.Digest(append([]byte(content), canonical(p.Input)...))
	// The input is stored masked with the run's own secrets: a secret input
	// masks the copy of its text under another input of the same run, and
	// nothing of any other run.
	secrets := r.cfg.Secrets.NewSet()
	secrets.AddInput(p.Input, p.Secret)
	masked := maskInput(secrets, p.Input, p.Secret)
	maskedJSON, _ := json.Marshal(masked)
	id, err := auth.NewID("run_")
	if err != nil {
		return store.Run{}, false, err
	}
	traceParent := tracing.Inject(ctx)
	return r.cfg.Store.RunCreate(ctx, store.RunCreateParams{
		Run: store.Run{
			ID: id, Key: p.Key, Digest: digest, Name: p.Name, Scenario: p.Scenario, Mode: string(p.Mode),
			InputSealed: r.cfg.Sealer.Seal(input), InputMasked: maskedJSON, Timeout: p.Timeout, TraceParent: traceParent,
			Project: p.Project,
		},
		Actor: p.Actor,
		Enqueue: func(ctx context.Context, tx *sql.Tx) error {
			_, err := r.river.InsertTx(ctx, tx, RunArgs{RunID: id}, nil)
			return err
		},
	})
}

// canonical is the input's JSON with sorted keys (encoding/json sorts map
// keys), so that equal inputs hash equal.
func canonical(v map[string]any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// maskInput masks secret-looking keys, the declared secret inputs and the
// text of the run's secrets.
func maskInput(secrets *secret.Set, in map[string]any, secretKeys map[string]bool) any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if secretKeys[k] {
			out[k] = secret.Masked
			continue
		}
		out[k] = v
	}
	return secrets.Mask(out)
}

var (
	// errLeaseLost and ErrStopping are transport.ErrDetach: the commands
	// in flight go on on the souls, for the next execution to reattach.
	errLeaseLost = fmt.Errorf("lease lost: %w", transport.ErrDetach)
	// ErrStopping is the cause of a run's context when the keeper's drain
	// timeout cuts its step: the run is left to be resumed.
	ErrStopping = fmt.Errorf("keeper stopping: %w", transport.ErrDetach)
)

// LeftToResume reports whether cause (of a run's context) means the
// execution was cut to be resumed later, rather than the run failing: the
// keeper stopping or the lease lost. What a cut step did is not recorded.
func LeftToResume(cause error) bool {
	return errors.Is(cause, errLeaseLost) || errors.Is(cause, ErrStopping)
}
