package bus_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/bus/bustest"
)

// gatedRegistry holds every identity lookup until release is closed.
type gatedRegistry struct {
	*bustest.Registry
	release chan struct{}
	entered atomic.Int64
}

func (g *gatedRegistry) SoulCert(ctx context.Context, sid string) (string, bool, error) {
	g.entered.Add(1)
	<-g.release // not ctx: the worker stays busy, as under a real storm
	return g.Registry.SoulCert(ctx, sid)
}

// TestSaturatedCalloutTurnsAwayAtOnce: with its one callout worker busy
// and its one queue slot taken, the keeper answers the next connection
// at once with a busy refusal — without consulting the registry, while
// the worker is still blocked — instead of letting it wait for the
// server's auth timeout; a real agent turned away that way keeps retrying
// (more than the two refusals after which nats.go would give up) and is
// admitted once admission has room again.
func TestSaturatedCalloutTurnsAwayAtOnce(t *testing.T) {
	t.Parallel()
	gate := &gatedRegistry{Registry: bustest.NewRegistry(), release: make(chan struct{})}
	var released atomic.Bool
	release := func() {
		if released.CompareAndSwap(false, true) {
			close(gate.release)
		}
	}
	e := startBus(t, func(c *bus.Config) { c.Identities = gate; c.CalloutWorkers = 1; c.CalloutQueue = 1 })
	t.Cleanup(release) // before the bus closes: its worker waits on the gate
	e.reg = gate.Registry
	first, second, third, fleet := e.soul(t, "first.storm.test"), e.soul(t, "second.storm.test"), e.soul(t, "third.storm.test"), e.soul(t, "fleet.storm.test")
	background := func(id bustest.Identity) {
		tc, err := id.TLS()
		if err != nil {
			t.Error(err)
			return
		}
		go func() {
			if nc, err := nats.Connect(strings.Join(e.bus.AgentURLs(), ","), nats.Secure(tc), nats.NoReconnect(), nats.Timeout(30*time.Second)); err == nil {
				nc.Close()
			}
		}()
	}
	background(first)
	bustest.WaitFor(t, 20*time.Second, "the worker busy on the first soul", func() bool { return gate.entered.Load() == 1 })
	background(second)
	bustest.WaitFor(t, 20*time.Second, "the second soul queued", func() bool { return e.bus.CalloutBacklog() == 1 })

	tc, err := third.TLS()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(strings.Join(e.bus.AgentURLs(), ","), nats.Secure(tc), nats.NoReconnect(), nats.Timeout(30*time.Second))
	if err == nil {
		nc.Close()
		t.Fatal("a connection was admitted while admission was saturated")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("the saturated keeper answered %v; want an authorization refusal", err)
	}
	if e.bus.Busy() != 1 || gate.entered.Load() != 1 || e.bus.CalloutBacklog() != 1 {
		t.Fatalf("busy %d, registry lookups %d, backlog %d; want the third soul turned away without a lookup while the worker is still blocked",
			e.bus.Busy(), gate.entered.Load(), e.bus.CalloutBacklog())
	}
	if e.bus.Refused() != 0 {
		t.Fatalf("%d registry refusals; a busy refusal is not one", e.bus.Refused())
	}

	// A real agent, no start jitter, reconnecting every second: turned
	// away again and again while saturated, it keeps trying.
	a := bustest.StartAgents(t, bustest.AgentSpec{URLs: e.bus.AgentURLs(), Identities: []bustest.Identity{fleet}, Heartbeat: testHeartbeat, Jitter: -1})
	bustest.WaitFor(t, 60*time.Second, "the agent turned away three times", func() bool { return e.bus.Busy() >= 4 })
	if e.bus.Present(fleet.SID) {
		t.Fatal("the agent is present while admission is saturated")
	}
	release()
	bustest.WaitFor(t, 60*time.Second, "the agent admitted after the storm", func() bool { return e.bus.Present(fleet.SID) })
	if a.Cmd.ProcessState != nil {
		t.Fatalf("the agent process exited: %s", a.Log())
	}
}
