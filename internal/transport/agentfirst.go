package transport

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// agentPoll is how often AgentFirst looks for an agent it waits for.
const agentPoll = 100 * time.Millisecond

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
	if c, ok := d.agent(ctx, p); ok {
		return c, nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return d.fallback.Dial(ctx, p)
}

// agent returns the soul's agent connection, waiting for it until
// p.AgentUntil.
func (d *agentFirst) agent(ctx context.Context, p Peer) (Conn, bool) {
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
