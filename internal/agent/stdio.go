package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/tracing"
)

// StdioConfig configures ServeStdio.
type StdioConfig struct {
	// Spool is where durable commands are spooled; empty runs them as
	// plain ones.
	Spool string
	// Logger receives what goes wrong (never on out); nil discards it.
	Logger *slog.Logger
	// Exec runs one command; nil means Run.
	Exec func(ctx context.Context, req wire.ExecRequest) Outcome
	// ShellSpool is the spool of the SSH transport's shell supervisor for
	// this user: a durable command found there was sent through a shell
	// by an earlier execution and is not started here; Forget removes its
	// entries there too.
	ShellSpool string
	// Metrics counts the commands; nil: none.
	Metrics *Metrics
}

// ServeStdio is the executor the keeper starts over an SSH session
// (`soul exec --stdio`): it writes wire.StdioHello and its PID as a line,
// then reads the keeper's commands and cancels from in as frames (wire's
// stdio form) and writes each command's output parts and end to out, with
// the semantics of the bus's agent. Commands run concurrently. When in
// ends (the session is gone) or ctx does, the plain commands still running
// are killed and it returns; durable ones go on under their supervisors,
// their outcomes spooled for the next executor to attach to.
func ServeStdio(ctx context.Context, in io.Reader, out io.Writer, cfg StdioConfig) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	e, err := newExecutor(runCtx, cfg.Logger, cfg.Exec, cfg.Spool)
	if err != nil {
		return err
	}
	e.shellSpool = cfg.ShellSpool
	e.metrics = cfg.Metrics
	w := &frameWriter{w: out}
	if _, err := fmt.Fprintf(out, "%s %d\n", wire.StdioHello, os.Getpid()); err != nil {
		return err
	}
	frames := make(chan error, 1)
	go func() { frames <- e.readFrames(runCtx, bufio.NewReaderSize(in, 64<<10), w) }()
	select {
	case err = <-frames:
	case <-ctx.Done():
	}
	e.cancelPlain()
	if e.supervisor != nil {
		// Durable commands run under supervisors of their own: they go
		// on, and the next executor attaches to them.
		stop()
	}
	e.wg.Wait()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// readFrames runs the commands of the frames read from r until r ends
// (io.EOF) or breaks the framing.
func (e *executor) readFrames(ctx context.Context, r io.Reader, w *frameWriter) error {
	for {
		kind, id, body, err := wire.ReadFrame(r, wire.MaxFrame)
		if err != nil {
			return err
		}
		switch kind {
		case wire.FrameExec:
			var req wire.ExecRequest
			if err := json.Unmarshal(body, &req); err != nil || !wire.ValidID(req.ID) || req.ID != id {
				e.log.Warn("ignored an undecodable command", "err", err)
				continue
			}
			_, span := tracing.Tracer().Start(ctx, "agent.command", trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.Bool("soulstack.command.durable", req.Durable != nil)))
			e.exec(req, func(o Outcome) { w.outcome(e.log, req.ID, o) }, span)
		case wire.FrameCancel:
			var req wire.CancelRequest
			if json.Unmarshal(body, &req) == nil {
				e.cancel(req)
			}
		default:
			return fmt.Errorf("%w: kind %q", wire.ErrFrame, kind)
		}
	}
}

// cancelPlain kills the plain commands still running: nobody waits for
// their output any more. Durable ones go on.
func (e *executor) cancelPlain() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.running {
		if c.run == "" {
			c.cancel()
		}
	}
}

// frameWriter writes whole frames, one at a time.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// outcome writes a command's output parts (each at most wire.ChunkSize
// bytes) and its end.
func (f *frameWriter) outcome(log *slog.Logger, id string, o Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range []struct {
		kind byte
		data []byte
	}{{wire.FrameStdout, o.Stdout}, {wire.FrameStderr, o.Stderr}} {
		for d := s.data; len(d) > 0; {
			n := min(len(d), wire.ChunkSize)
			if err := wire.WriteFrame(f.w, s.kind, id, d[:n]); err != nil {
				log.Warn("send command output", "err", err)
				return
			}
			d = d[n:]
		}
	}
	b, _ := json.Marshal(o.ExecEnd)
	if err := wire.WriteFrame(f.w, wire.FrameEnd, id, b); err != nil {
		log.Warn("send command end", "err", err)
	}
}
