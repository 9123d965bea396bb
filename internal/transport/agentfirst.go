package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
)

// agentPoll is how often AgentFirst looks for an agent it waits for.
const agentPoll = 100 * time.Millisecond

// agentWaitForAttach bounds the wait for an agent to come back, when the
// dial has no deadline of its own.
const agentWaitForAttach = 5 * time.Minute

// ErrAgentGone means a durable command was sent through a soul's agent and
// the agent did not connect again to reattach it.
var ErrAgentGone error = NewSentinel("agent gone", "agent.unreachable", ErrUnreachable)

// AgentFirst is the Dialer of a keeper with an agent bus: a soul whose
// agent is connected, or connects by Peer.AgentUntil, is reached through
// it; any other through fallback (SSH). An agent that runs means the
// soul's userdata has run: Peer.AwaitReady asks nothing of it.
func AgentFirst(agents Agents, fallback Dialer, clock clockwork.Clock) Dialer {
	return &agentFirst{agents: agents, fallback: fallback, clock: clock}
}

type agentFirst struct {
	agents   Agents
	fallback Dialer
	clock    clockwork.Clock
}

func (d *agentFirst) Dial(ctx context.Context, p Peer) (Conn, error) {
	switch p.Via {
	case "ssh":
		return d.fallback.Dial(ctx, p)
	case "agent":
		// The command's spool is the agent's: only the agent can attach.
		if dl, ok := ctx.Deadline(); ok {
			p.AgentUntil = dl
		} else {
			p.AgentUntil = d.clock.Now().Add(agentWaitForAttach)
		}
		if c, ok := d.agent(ctx, p); ok {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%w: the agent of %s did not connect again to reattach its command", ErrAgentGone, p.SID)
	}
	if c, ok := d.agent(ctx, p); ok {
		return c, nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return d.fallback.Dial(ctx, p)
}

// agent returns the soul's agent connection, waiting for it until
// p.AgentUntil, or for a soul with an agent identity until the end of the
// bus's start-up grace.
func (d *agentFirst) agent(ctx context.Context, p Peer) (Conn, bool) {
	if w, ok := d.agents.(interface{ WarmUntil() time.Time }); ok && p.HasAgent && w.WarmUntil().After(p.AgentUntil) {
		p.AgentUntil = w.WarmUntil()
	}
	if c, ok := d.agents.Agent(p.SID); ok || !d.clock.Now().Before(p.AgentUntil) {
		return c, ok
	}
	tick := d.clock.NewTicker(agentPoll)
	defer tick.Stop()
	for d.clock.Now().Before(p.AgentUntil) {
		select {
		case <-ctx.Done():
			return nil, false
		case <-tick.Chan():
		}
		if c, ok := d.agents.Agent(p.SID); ok {
			return c, true
		}
	}
	return nil, false
}
