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
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// Lease timing: a running run's heartbeat is renewed every HeartbeatEvery;
// a run whose heartbeat is older than StaleAfter is taken over.
const (
	HeartbeatEvery = 2 * time.Second
	StaleAfter     = 15 * time.Second
	// DefaultTimeout is a run's server-side timeout unless it asks for
	// another.
	DefaultTimeout = 15 * time.Minute
	// MaxTimeout bounds what a run may ask for.
	MaxTimeout = 24 * time.Hour
)

// Outcome is how an execution ended.
type Outcome struct {
	Phase     string // Succeeded, Failed or Cancelled
	ErrorCode string
	ErrorMsg  string
	// Outputs are the steps' outputs by step name, unmasked; the runner
	// masks them before they are stored.
	Outputs map[string]any
}

// Recorder persists what an execution does as it goes.
type Recorder interface {
	// Event appends an event; data is masked before it is stored.
	Event(kind, step, sid string, data any)
	// Step saves a step's state.
	Step(s store.RunStep)
	// Target saves one target's result; its output is masked.
	Target(t store.RunTarget, output any)
	// Checkpoint seals and saves the state a resumed execution needs.
	Checkpoint(state []byte) error
}

// Execution is what an Executor gets for one run.
type Execution struct {
	Run   store.Run
	Input map[string]any // unsealed
	// Resume is the last checkpoint when the run is being resumed after
	// its keeper died; nil on the first execution.
	Resume []byte
	// Steps and Targets are what the store recorded before.
	Steps   []store.RunStep
	Targets []store.RunTarget
}

// Executor executes a run. It must honour ctx (timeout and cancellation)
// and report through rec.
type Executor interface {
	Execute(ctx context.Context, x Execution, rec Recorder) Outcome
}

// Config wires a Runner.
type Config struct {
	Store   store.Store
	DB      *sql.DB
	Queue   riverdriver.Driver[*sql.Tx]
	Sealer  *secret.Sealer
	Exec    Executor
	Owner   string // this keeper's stable id
	Logger  *slog.Logger
	Workers int // concurrent runs; default 20
}

// Runner accepts runs and executes them from the queue.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	river *river.Client[*sql.Tx]
	hub   *Hub
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// RunArgs is the queue job of one run.
type RunArgs struct {
	RunID string `json:"run_id"`
}

// Kind is the job's stable kind name.
func (RunArgs) Kind() string { return "soulstack.run" }

// New migrates the queue's schema and builds the runner.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := Migrate(ctx, cfg.Queue); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, hub: NewHub()}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{r: r})
	var err error
	r.river, err = river.NewClient(cfg.Queue, &river.Config{
		ID:                cfg.Owner,
		Logger:            cfg.Logger.With("component", "queue"),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers:           workers,
		JobTimeout:        -1, // the runner enforces each run's own timeout
		FetchPollInterval: 200 * time.Millisecond,
		MaxAttempts:       5,
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

// Hub returns the notifier of new run events.
func (r *Runner) Hub() *Hub { return r.hub }

// Start works the queue and recovers this keeper's orphaned runs, until
// Stop.
func (r *Runner) Start(ctx context.Context) error {
	if err := r.river.Start(ctx); err != nil {
		return fmt.Errorf("start queue: %w", err)
	}
	// Runs this keeper owned when it died cannot be live: recover them now.
	r.recover(ctx, r.cfg.Owner)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(StaleAfter / 2)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
				r.recover(loopCtx, "")
			}
		}
	}()
	return nil
}

// Stop stops taking jobs and waits for running ones to stop (their runs are
// resumed by the next keeper to start).
func (r *Runner) Stop(ctx context.Context) error {
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
	return r.river.StopAndCancel(ctx)
}

// recover re-enqueues runs that lost their executor.
func (r *Runner) recover(ctx context.Context, owner string) {
	ids, err := r.cfg.Store.RunsOrphaned(ctx, owner, time.Now().Add(-StaleAfter))
	if err != nil {
		r.log.Error("look for orphaned runs", "err", err)
		return
	}
	for _, id := range ids {
		if _, err := r.river.Insert(ctx, RunArgs{RunID: id}, nil); err != nil {
			r.log.Error("re-enqueue orphaned run", "run", id, "err", err)
			continue
		}
		r.log.Warn("recovering a run whose keeper stopped", "run", id)
	}
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
	digest := r.cfg.Sealer.Digest(append([]byte(fmt.Sprintf("%d:%s;", len(p.Scenario), p.Scenario)), canonical(p.Input)...))
	for name := range p.Secret {
		if v, ok := p.Input[name].(string); ok {
			secret.Register(v)
		}
	}
	masked := maskInput(p.Input, p.Secret)
	maskedJSON, _ := json.Marshal(masked)
	id, err := auth.NewID("run_")
	if err != nil {
		return store.Run{}, false, err
	}
	return r.cfg.Store.RunCreate(ctx, store.RunCreateParams{
		Run: store.Run{
			ID: id, Key: p.Key, Digest: digest, Name: p.Name, Scenario: p.Scenario,
			InputSealed: r.cfg.Sealer.Seal(input), InputMasked: maskedJSON, Timeout: p.Timeout,
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

// maskInput masks secret-looking keys and the declared secret inputs.
func maskInput(in map[string]any, secretKeys map[string]bool) any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if secretKeys[k] {
			out[k] = secret.Masked
			continue
		}
		out[k] = v
	}
	return secret.Mask(out)
}

var errLeaseLost = errors.New("lease lost")
