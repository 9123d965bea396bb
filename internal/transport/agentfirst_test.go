package transport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/transport"
)

// fakeConn is a connection that names the transport it came from.
type fakeConn string

func (fakeConn) Exec(context.Context, transport.Command) (transport.Result, error) {
	return transport.Result{}, nil
}

// lateAgents are the souls whose agent is connected; connect adds one.
type lateAgents struct {
	mu  sync.Mutex
	sid map[string]bool
}

func (a *lateAgents) Agent(sid string) (transport.Conn, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sid[sid] {
		return fakeConn("agent"), true
	}
	return nil, false
}

func (a *lateAgents) connect(sid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sid[sid] = true
}

// sshDialer counts its dials.
type sshDialer struct{ dials int }

func (d *sshDialer) Dial(context.Context, transport.Peer) (transport.Conn, error) {
	d.dials++
	return fakeConn("ssh"), nil
}

// TestAgentFirst: a soul with a connected agent is reached through it and
// SSH is never dialled; one without an agent and no grace goes over SSH at
// once; one whose agent connects within its grace (a soul that just
// joined) waits for it; one whose agent never comes goes over SSH once the
// grace has passed. The clock is fake; nothing sleeps.
func TestAgentFirst(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	agents := &lateAgents{sid: map[string]bool{"with.test": true}}
	ssh := &sshDialer{}
	d := transport.AgentFirst(agents, ssh, clock)
	ctx := context.Background()
	via := func(p transport.Peer) string {
		t.Helper()
		c, err := d.Dial(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return string(c.(fakeConn))
	}
	if got := via(transport.Peer{SID: "with.test"}); got != "agent" || ssh.dials != 0 {
		t.Fatalf("a soul with its agent went %s (%d SSH dials)", got, ssh.dials)
	}
	if got := via(transport.Peer{SID: "without.test"}); got != "ssh" {
		t.Fatalf("a soul without an agent or grace went %s", got)
	}

	grace := clock.Now().Add(30 * time.Second)
	done := make(chan string, 1)
	go func() {
		c, _ := d.Dial(ctx, transport.Peer{SID: "joined.test", AgentUntil: grace})
		done <- string(c.(fakeConn))
	}()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil { // the poll ticker
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	agents.connect("joined.test")
	clock.Advance(time.Second)
	select {
	case got := <-done:
		if got != "agent" {
			t.Fatalf("a soul whose agent connected within its grace went %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dial did not pick up the agent that connected")
	}

	grace = clock.Now().Add(5 * time.Second)
	go func() {
		c, _ := d.Dial(ctx, transport.Peer{SID: "never.test", AgentUntil: grace})
		done <- string(c.(fakeConn))
	}()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	before := ssh.dials
	for range 10 {
		clock.Advance(time.Second)
	}
	select {
	case got := <-done:
		if got != "ssh" || ssh.dials != before+1 {
			t.Fatalf("a soul whose agent never came went %s (%d SSH dials)", got, ssh.dials-before)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dial did not fall back to SSH after the grace")
	}
}
