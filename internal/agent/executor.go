package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/internal/agent/wire"
)

// executor runs the keeper's commands on this host, whichever way they
// came in (the bus, Serve; an SSH session, ServeStdio): plain commands
// under its context, durable ones through the spool, each command's
// outcome handed to the reply of the request that sent it.
type executor struct {
	log *slog.Logger
	run func(ctx context.Context, req wire.ExecRequest) Outcome
	ctx context.Context // commands run under it

	spool *spool // nil: durable commands run as plain ones
	// supervisor is the binary (and arguments) that supervises durable
	// commands (superviseArgs follow): this one. Nil when the executor runs
	// a test's own Exec: durable commands then run in this process.
	supervisor []string
	// shellSpool is the SSH supervisor's spool of this user (ServeStdio):
	// an id found there is not started here (wire.CodeElsewhere).
	shellSpool string

	supMu sync.Mutex
	sup   *supervisorProc // the durable commands' supervisor, once one ran

	metrics *Metrics // nil: none

	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]runningCmd // by request id
}

// replyFunc sends a command's outcome back the way its request came.
type replyFunc func(Outcome)

// runningCmd is a request's command that a cancel may kill: for a durable
// one, only with an epoch of its run no older than one seen.
type runningCmd struct {
	cancel context.CancelFunc
	run    string
}

// newExecutor makes an executor whose commands run under ctx; spoolDir
// empty runs durable commands as plain ones. run nil means Run.
func newExecutor(ctx context.Context, log *slog.Logger, run func(context.Context, wire.ExecRequest) Outcome, spoolDir string) (*executor, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &executor{log: log, run: run, ctx: ctx, running: map[string]runningCmd{}}
	if run == nil {
		e.run = Run
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("agent: the supervisor binary: %w", err)
		}
		e.supervisor = []string{exe}
		context.AfterFunc(ctx, e.releaseSupervisor)
	}
	if spoolDir != "" {
		sp, err := newSpool(spoolDir)
		if err != nil {
			return nil, err
		}
		sp.sweep(time.Now())
		e.spool = sp
	}
	return e, nil
}

// exec runs req, or attaches to it when it is a durable command the spool
// knows, and replies with its outcome; span ends with it.
func (e *executor) exec(req wire.ExecRequest, reply replyFunc, span trace.Span) {
	if e.metrics != nil {
		start, answer := time.Now(), reply
		reply = func(o Outcome) {
			e.metrics.command(req, o, time.Since(start))
			answer(o)
		}
	}
	if req.Durable != nil && e.spool != nil {
		e.execDurable(req, reply, span)
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.mu.Lock()
	e.running[req.ID] = runningCmd{cancel: cancel}
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.running, req.ID)
			e.mu.Unlock()
			cancel()
		}()
		out := e.run(ctx, req)
		span.SetAttributes(attribute.Int("process.exit.code", out.ExitCode))
		span.End()
		reply(out)
	}()
}

// execDurable runs or attaches to a durable command (spool.durable); its
// replies come from there.
func (e *executor) execDurable(req wire.ExecRequest, reply replyFunc, span trace.Span) {
	out, cancel, done := e.durable(req, reply)
	if out != nil {
		span.SetAttributes(attribute.Bool("soulstack.command.attached", true), attribute.Int("process.exit.code", out.ExitCode))
		span.End()
		reply(*out)
		return
	}
	e.mu.Lock()
	e.running[req.ID] = runningCmd{cancel: cancel, run: req.Durable.Run}
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		select {
		case <-done:
		case <-e.ctx.Done():
		}
		span.End()
		e.mu.Lock()
		delete(e.running, req.ID)
		e.mu.Unlock()
	}()
}

// cancel kills the command of req.ID, unless it is durable and req is of
// an older execution of its run than one seen.
func (e *executor) cancel(req wire.CancelRequest) {
	e.mu.Lock()
	c, ok := e.running[req.ID]
	e.mu.Unlock()
	if !ok {
		return
	}
	if c.run != "" {
		if seen, ok := e.spool.fence(c.run, req.Epoch); !ok || req.Run != c.run {
			e.log.Warn("refused a cancel of an older execution of the run", "run", c.run, "epoch", req.Epoch, "seen", seen)
			return
		}
	}
	c.cancel()
}
