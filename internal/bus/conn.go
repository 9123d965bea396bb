package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/soulstack/soulstack/internal/agent/wire"
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

// cancelGrace bounds how long Exec waits, after asking the agent to kill a
// cancelled command, for its output.
const cancelGrace = 5 * time.Second

// Conn runs commands on one soul through its agent.
type Conn struct {
	s    *Server
	sid  string
	gone <-chan struct{}
}

var _ transport.Conn = (*Conn)(nil)

// Exec sends cmd to the soul's agent and collects its output parts and
// end. When ctx ends first it sends a cancel, which kills the command's
// process group on the soul, and returns the output captured so far with
// the context's error. Errors wrap ErrUnreachable (no agent took the
// command), ErrDisconnected (the agent went away meanwhile),
// ErrInvalidCommand or ErrBus.
func (c *Conn) Exec(ctx context.Context, cmd transport.Command) (transport.Result, error) {
	id := nuid.Next()
	req := wire.ExecRequest{ID: id, Argv: cmd.Argv, Script: cmd.Script, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: cmd.Sudo, MaxOutput: c.s.cfg.MaxOutput}
	if d, ok := ctx.Deadline(); ok {
		// The agent's own limit, a little after the keeper's, for a
		// cancel that never arrives.
		req.TimeoutMS = time.Until(d).Milliseconds() + cancelGrace.Milliseconds()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrInvalidCommand, err)
	}
	if max := c.s.nc.MaxPayload(); int64(len(data)) > max {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: the command and its input are %d bytes, over the bus's %d-byte max_payload", c.sid, ErrInvalidCommand, len(data), max)
	}
	if err := ctx.Err(); err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
	}
	inbox := wire.ReplySubject(c.sid, id)
	parts := make(chan *nats.Msg, wire.MaxReplies+1)
	sub, err := c.s.nc.ChanSubscribe(inbox, parts)
	if err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrBus, err)
	}
	defer sub.Unsubscribe()
	dropped := c.s.currentEpoch()
	msg := &nats.Msg{Subject: wire.ExecSubject(c.sid), Reply: inbox, Data: data}
	if err := c.s.nc.PublishMsg(msg); err != nil {
		return transport.Result{}, fmt.Errorf("agent exec on %s: %w: %v", c.sid, ErrBus, err)
	}
	var res transport.Result
	collect := func(m *nats.Msg) (bool, error) {
		if m.Header.Get("Status") == "503" {
			return true, fmt.Errorf("agent exec on %s: %w", c.sid, ErrUnreachable)
		}
		switch m.Header.Get(wire.PartHeader) {
		case wire.PartStdout:
			res.Stdout = append(res.Stdout, m.Data...)
		case wire.PartStderr:
			res.Stderr = append(res.Stderr, m.Data...)
		case wire.PartEnd:
			var end wire.ExecEnd
			if err := json.Unmarshal(m.Data, &end); err != nil {
				return true, fmt.Errorf("agent exec on %s: %w: undecodable end: %v", c.sid, ErrDisconnected, err)
			}
			res.ExitCode, res.Signal = end.ExitCode, end.Signal
			res.StdoutTruncated, res.StderrTruncated = end.StdoutTruncated, end.StderrTruncated
			if end.Code != "" {
				return true, fmt.Errorf("agent exec on %s: %w: %s", c.sid, ErrInvalidCommand, end.Error)
			}
			return true, nil
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
			b, _ := json.Marshal(wire.CancelRequest{ID: id})
			_ = c.s.nc.Publish(wire.CancelSubject(c.sid), b)
			timer := time.NewTimer(cancelGrace)
			defer timer.Stop()
			for {
				select {
				case m := <-parts:
					if done, _ := collect(m); done {
						return res, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
					}
				case <-c.gone:
					return res, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
				case <-timer.C:
					return res, fmt.Errorf("agent exec on %s: %w", c.sid, context.Cause(ctx))
				}
			}
		}
	}
}
