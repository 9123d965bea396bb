package ssh_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// breakableDialer dials real TCP connections and can make every write on
// them fail, as a peer that vanished without closing does.
type breakableDialer struct {
	n      atomic.Int64
	broken atomic.Bool
}

type breakableConn struct {
	net.Conn
	d *breakableDialer
}

func (c breakableConn) Write(b []byte) (int, error) {
	if c.d.broken.Load() {
		return 0, errors.New("connection reset by peer")
	}
	return c.Conn.Write(b)
}

func (d *breakableDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return breakableConn{Conn: c, d: d}, nil
}

func TestSharedPoolKeepsConnectionsAcrossUsesUntilIdle(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0)) // moved by hand
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial, IdleTimeout: time.Hour, Base: base.Base{Clock: clock}})
	defer pool.Close()

	// Two "runs" in a row, a while apart but within the idle timeout.
	for run := range 2 {
		c, err := pool.Get(t.Context(), target(s))
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if res := exec(t, c, ssh.Command{Argv: []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("run %d: true exited %d", run, res.ExitCode)
		}
		clock.Advance(30 * time.Minute)
		if n := pool.Sweep(); n != 0 {
			t.Fatalf("run %d: sweep closed %d connections used 30 minutes ago", run, n)
		}
	}
	if dials.count() != 1 {
		t.Fatalf("%d dials for two uses within the idle timeout, want 1", dials.count())
	}
	c, _ := pool.Get(t.Context(), target(s))
	clock.Advance(time.Hour + time.Second)
	if n := pool.Sweep(); n != 1 || pool.Len() != 0 {
		t.Fatalf("after the idle timeout: sweep closed %d, %d left; want 1 and 0", n, pool.Len())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the idle connection was not closed")
	}
	if _, err := pool.Get(t.Context(), target(s)); err != nil || dials.count() != 2 {
		t.Fatalf("get after the sweep: %v, %d dials; want a fresh dial", err, dials.count())
	}
}

func TestSharedPoolRedialsADeadIdleConnection(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var d breakableDialer
	pool := ssh.NewPool(ssh.Options{DialContext: d.dial, IdleTimeout: time.Hour})
	defer pool.Close()
	first, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	exec(t, first, ssh.Command{Argv: []string{"true"}})
	d.broken.Store(true) // the connection is dead, though nothing said so
	second, err := pool.Get(t.Context(), target(s))
	d.broken.Store(false)
	if err != nil {
		// The redial itself ran while writes still failed: try once more.
		second, err = pool.Get(t.Context(), target(s))
	}
	if err != nil {
		t.Fatalf("get after the connection died: %v", err)
	}
	if second == first {
		t.Fatal("the dead connection was handed out again")
	}
	if res := exec(t, second, ssh.Command{Argv: []string{"echo", "ok"}}); string(res.Stdout) != "ok\n" {
		t.Fatalf("stdout %q on the redialled connection", res.Stdout)
	}
}

func TestPoolDropClosesATargetsConnections(t *testing.T) {
	t.Parallel()
	servers := sshtest.StartN(t, 2, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	var clients []*ssh.Client
	for _, s := range servers {
		c, err := pool.Get(t.Context(), target(s))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	if n := pool.Drop(target(servers[0]).String()); n != 1 {
		t.Fatalf("drop closed %d connections, want 1", n)
	}
	select {
	case <-clients[0].Done():
	default:
		t.Fatal("the dropped connection is still open")
	}
	select {
	case <-clients[1].Done():
		t.Fatal("the other target's connection was closed")
	default:
	}
	if pool.Len() != 1 {
		t.Fatalf("%d connections left, want 1", pool.Len())
	}
}
