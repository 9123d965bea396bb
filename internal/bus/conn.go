package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/transport"
)

// The agent transport's sentinels: their codes are what runs report.
var (
	// ErrUnreachable means the soul's agent is not connected (no
	// subscriber took the command).
	ErrUnreachable error = transport.NewSentinel("agent not connected", "agent.unreachable", transport.ErrUnreachable)
	// ErrDisconnected means the agent went away while a command ran (its
	// heartbeats stopped or its identity was revoked): the outcome is
	// unknown.
	ErrDisconnected error = transport.NewSentinel("agent connection lost", "agent.disconnected", transport.ErrDisconnected)
	// ErrInvalidCommand means the agent refused the command as given, or
	// it is too large for the bus.
	ErrInvalidCommand error = transport.NewSentinel("invalid command", "agent.invalid_command", transport.ErrInvalidCommand)
	// ErrBus means the keeper's own bus connection failed.
	ErrBus error = transport.NewSentinel("bus unavailable", "agent.bus_unavailable", transport.ErrUnreachable)
)

// outputBound is what a keeper keeps of one command's replies, whatever
// the soul sends: the per-stream limit the request asked the agent for
// (plus the truncation marker) and as many reply parts as an agent that
// keeps to it sends, with room to spare.
type outputBound struct {
	perStream int
	maxParts  int
	parts     int
}

func (s *Server) outputBound() *outputBound {
	limit := s.cfg.MaxOutput
	if limit <= 0 {
		limit = wire.DefaultMaxOutput
	}
	return &outputBound{perStream: limit + wire.MarkerSlack, maxParts: max(wire.MaxReplies, 2*(limit/wire.ChunkSize+2)+1)}
}

// pending is how many reply messages and bytes may wait for Exec: what an
// agent that keeps to the bound sends at most (both streams, every part),
// plus one message as big as the server allows. Past it the client drops
// replies, and Exec fails the command (dropped).
func (b *outputBound) pending(maxPayload int64) (int, int) {
	return b.maxParts + 2, 2*b.perStream + 2*wire.MaxPartSize + int(maxPayload)
}

// take adds reply part m to res, or reports why it is over the bound
// (res then holds the output up to the limit, marked truncated).
func (b *outputBound) take(res *transport.Result, m *nats.Msg) error {
	b.parts++
	if b.parts > b.maxParts {
		return fmt.Errorf("more than %d reply parts", b.maxParts)
	}
	if len(m.Data) > wire.MaxPartSize {
		return fmt.Errorf("a %d-byte reply part (at most %d)", len(m.Data), wire.MaxPartSize)
	}
	var buf *[]byte
	var cut *bool
	switch m.Header.Get(wire.PartHeader) {
	case wire.PartStdout:
		buf, cut = &res.Stdout, &res.StdoutTruncated
	case wire.PartStderr:
		buf, cut = &res.Stderr, &res.StderrTruncated
	default:
		return nil
	}
	room := b.perStream - len(*buf)
	if len(m.Data) <= room {
		*buf = append(*buf, m.Data...)
		return nil
	}
	*buf = append(*buf, m.Data[:max(room, 0)]...)
	*cut = true
	return fmt.Errorf("more than %d bytes of %s", b.perStream, m.Header.Get(wire.PartHeader))
}

// cancelGrace bounds how long Exec waits, after asking the agent to kill a
// cancelled command, for its output.
const cancelGrace = 5 * time.Second

// Conn runs commands on one soul through its agent.
type Conn struct {
	s    *Server
	sid  string
	gone <-chan struct{}
}

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Forgetter = (*Conn)(nil)
	_ transport.Via       = (*Conn)(nil)
)

// Via says the connection is the agent transport.
func (c *Conn) Via() string { return "agent" }

// Forget queues the removal of the spool entries of ids on the soul, sent
// with its next durable command.
func (c *Conn) Forget(ids []string) { c.s.forgets.Add(c.sid, ids) }

// Exec sends cmd to the soul's agent and collects its output parts and
// end. When ctx ends first it sends a cancel, which kills the command's
// process group on the soul, and returns the output captured so far with
// the context's error. Errors wrap ErrUnreachable (no agent took the
// command), ErrDisconnected (the agent went away meanwhile),
// ErrInvalidCommand or ErrBus.
// Executor says that commands run through the soul's agent
// (transport.ExecutorReporter).
func (c *Conn) Executor() string { return "agent" }

func (c *Conn) Exec(ctx context.Context, cmd transport.Command) (transport.Result, error) {
	// A span per command, whose trace context travels to the agent in the
	// message header: where and how it ended, never its text.
	ctx, span := tracing.Tracer().Start(ctx, "agent.exec", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(tracing.SID.String(c.sid)))
	res, err := c.exec(ctx, cmd)
	span.SetAttributes(attribute.Int("process.exit.code", res.ExitCode))
	if err != nil {
		span.SetStatus(codes.Error, "agent exec failed")
	}
	span.End()
	return res, err
}

func (c *Conn) exec(ctx context.Context, cmd transport.Command) (transport.Result, error) {
	id := nuid.Next()
	data, cancelReq, err := c.request(ctx, id, cmd)
	if err != nil {
		return transport.Result{}, err
	}
	inbox := wire.ReplySubject(c.sid, id)
	out := c.s.outputBound()
	// The client queues replies for the handler up to pending; the
	// handler hands them to this Exec until it returns.
	parts, ended := make(chan *nats.Msg), make(chan struct{})
	defer close(ended)
	sub, err := c.s.nc.Subscribe(inbox, func(m *nats.Msg) {
		select {
		case parts <- m:
		case <-ended:
		}
	})
	if err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrBus, err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(out.pending(c.s.nc.MaxPayload())); err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrBus, err)
	}
	dropped := c.s.currentEpoch()
	if err := c.publish(ctx, inbox, data); err != nil {
		return transport.Result{}, err
	}
	var res transport.Result
	collect := func(m *nats.Msg) (bool, error) {
		if m.Header.Get("Status") == "503" {
			return true, fmt.Errorf("agent exec on %s: %w", c.sid, ErrUnreachable)
		}
		err := out.take(&res, m)
		if n, _ := sub.Dropped(); err == nil && n > 0 {
			err = fmt.Errorf("replies faster than the keeper takes them (%d dropped)", n)
		}
		if err != nil {
			// Whatever the soul sends, the keeper keeps no more: the
			// command is cancelled there and fails here.
			c.cancelRemote(cancelReq)
			return true, fmt.Errorf("agent exec on %s: %w: %v", c.sid, transport.ErrOutputLimit, err)
		}
		switch m.Header.Get(wire.PartHeader) {
		case wire.PartStdout, wire.PartStderr:
		case wire.PartEnd:
			var end wire.ExecEnd
			if err := json.Unmarshal(m.Data, &end); err != nil {
				return true, fmt.Errorf("agent exec on %s: %w: undecodable end: %v", c.sid, ErrDisconnected, err)
			}
			res.ExitCode, res.Signal = end.ExitCode, end.Signal
			res.StdoutTruncated, res.StderrTruncated, res.Reattached = end.StdoutTruncated, end.StderrTruncated, end.Reattached
			return true, c.endError(end)
		}
		return false, nil
	}
	for {
		select {
		case m := <-parts:
			if done, err := collect(m); done {
				return res, err
			}
		case <-c.gone:
			return res, fmt.Errorf("agent exec on %s: %w", c.sid, ErrDisconnected)
		case <-dropped:
			return res, fmt.Errorf("agent exec on %s: %w: the keeper's own bus connection dropped", c.sid, ErrDisconnected)
		case <-ctx.Done():
			if cmd.Durable != nil && transport.Detached(ctx) {
				// The keeper lets go: the command goes on on the soul,
				// for the next execution to reattach.
				return res, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
			}
			c.cancelRemote(cancelReq)
			c.drainCancelled(parts, collect)
			return res, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
		}
	}
}

// request is the exec request of cmd under id, encoded, and the cancel
// request that stops it; a command the bus cannot carry, or a context
// already done, is an error.
func (c *Conn) request(ctx context.Context, id string, cmd transport.Command) ([]byte, wire.CancelRequest, error) {
	req := wire.ExecRequest{ID: id, Argv: cmd.Argv, Script: cmd.Script, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: cmd.Sudo, MaxOutput: c.s.cfg.MaxOutput, Probe: cmd.Probe}
	cancelReq := wire.CancelRequest{ID: id}
	if d := cmd.Durable; d != nil {
		req.Durable = &wire.Durable{ID: d.ID, Run: d.Run, Epoch: d.Epoch, Digest: d.Digest, Forget: c.s.forgets.Take(c.sid)}
		cancelReq.Run, cancelReq.Epoch = d.Run, d.Epoch
	}
	if d, ok := ctx.Deadline(); ok {
		// The agent's own limit, a little after the keeper's, for a
		// cancel that never arrives.
		req.TimeoutMS = time.Until(d).Milliseconds() + cancelGrace.Milliseconds()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, cancelReq, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrInvalidCommand, err)
	}
	if max := c.s.nc.MaxPayload(); int64(len(data)) > max {
		return nil, cancelReq, fmt.Errorf("agent exec on %s: %w: the command and its input are %d bytes, over the bus's %d-byte max_payload", c.sid, ErrInvalidCommand, len(data), max)
	}
	if err := ctx.Err(); err != nil {
		return nil, cancelReq, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
	}
	return data, cancelReq, nil
}

// publish sends the exec request, replies to inbox, with the trace
// context in its header.
func (c *Conn) publish(ctx context.Context, inbox string, data []byte) error {
	msg := &nats.Msg{Subject: wire.ExecSubject(c.sid), Reply: inbox, Data: data}
	if tp := tracing.Inject(ctx); tp != "" {
		msg.Header = nats.Header{wire.TraceHeader: []string{tp}}
	}
	if err := c.s.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrBus, err)
	}
	return nil
}

// endError is how a command's end says it did not run as asked: fenced by
// a newer execution, lost by the agent, diverged from its record, or
// refused; nil when it ran.
func (c *Conn) endError(end wire.ExecEnd) error {
	switch end.Code {
	case "":
		return nil
	case wire.CodeFenced:
		return fmt.Errorf("agent exec on %s: %w: %s", c.sid, transport.ErrFenced, end.Error)
	case wire.CodeLost:
		return fmt.Errorf("agent exec on %s: %w: %s", c.sid, transport.ErrCommandLost, end.Error)
	case wire.CodeDiverged:
		return fmt.Errorf("agent exec on %s: %w", c.sid, transport.ErrDiverged)
	}
	return fmt.Errorf("agent exec on %s: %w: %s", c.sid, ErrInvalidCommand, end.Error)
}

// cancelRemote asks the agent to stop the command.
func (c *Conn) cancelRemote(req wire.CancelRequest) {
	b, _ := json.Marshal(req)
	_ = c.s.nc.Publish(wire.CancelSubject(c.sid), b)
}

// drainCancelled takes a cancelled command's replies until it ends, the
// agent goes away, or cancelGrace passes.
func (c *Conn) drainCancelled(parts <-chan *nats.Msg, collect func(*nats.Msg) (bool, error)) {
	timer := time.NewTimer(cancelGrace)
	defer timer.Stop()
	for {
		select {
		case m := <-parts:
			if done, _ := collect(m); done {
				return
			}
		case <-c.gone:
			return
		case <-timer.C:
			return
		}
	}
}
