package ssh_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// pinned is target(s) with s's host key pinned, as the engine targets a
// soul after its first contact.
func pinned(s *sshtest.Server) ssh.Target {
	t := target(s)
	t.HostKey = s.HostKey
	return t
}

func logins(s *sshtest.Server) int { return strings.Count(s.Log(), "Accepted publickey") }

func isClosed(c *ssh.Client) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func TestScopesShareAWarmConnectionAfterAHostKeyCheck(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial, IdleTimeout: time.Hour})
	defer pool.Close()

	first, err := pool.Scope().Get(t.Context(), pinned(s))
	if err != nil {
		t.Fatal(err)
	}
	exec(t, first, ssh.Command{Argv: []string{"true"}})
	if dials.count() != 1 {
		t.Fatalf("the first scope dialed %d times, want 1 (its own handshake verified the key)", dials.count())
	}

	run := pool.Scope()
	for i := range 3 {
		c, err := run.Get(t.Context(), pinned(s))
		if err != nil {
			t.Fatalf("get %d of the second scope: %v", i, err)
		}
		if c != first {
			t.Fatalf("get %d of the second scope made a new connection", i)
		}
		exec(t, c, ssh.Command{Argv: []string{"true"}})
	}
	// One connection logged in; the second scope's one check dialed
	// without authenticating, and only once.
	if n := logins(s); n != 1 {
		t.Fatalf("%d logins for two scopes, want 1:\n%s", n, s.Log())
	}
	if dials.count() != 2 {
		t.Fatalf("%d dials, want 2: the connection and one host key check", dials.count())
	}
}

func TestScopeRefusesAWarmConnectionWhoseHostChangedKey(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	old, err := pool.Scope().Get(t.Context(), pinned(s))
	if err != nil {
		t.Fatal(err)
	}
	exec(t, old, ssh.Command{Argv: []string{"true"}})

	// The server restarts in the same place with a new host key; the
	// session process behind the warm connection lives on.
	tg := pinned(s)
	s.Stop()
	sshtest.Start(t, sshtest.Options{Port: s.Port, ClientKey: s.ClientKey})
	if isClosed(old) {
		t.Fatal("the warm connection died with its listener; the test proves nothing")
	}

	_, err = pool.Scope().Get(t.Context(), tg)
	var m *ssh.HostKeyMismatchError
	if !errors.Is(err, ssh.ErrHostKeyMismatch) || !errors.As(err, &m) {
		t.Fatalf("get after the host key changed: %v, want ssh.host_key_mismatch", err)
	}
	if m.Pinned == m.Presented || m.Presented == "" {
		t.Fatalf("mismatch names pinned %q, presented %q", m.Pinned, m.Presented)
	}
	if !isClosed(old) || pool.Len() != 0 {
		t.Fatalf("the refused warm connection is kept: closed %v, %d in the pool", isClosed(old), pool.Len())
	}
}

func TestScopeDoesNotVouchForAWarmConnectionWhoseListenerIsGone(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	old, err := pool.Scope().Get(t.Context(), pinned(s))
	if err != nil {
		t.Fatal(err)
	}
	tg := pinned(s)
	s.Stop() // the session process stays, nothing listens any more
	if isClosed(old) {
		t.Fatal("the warm connection died with its listener; the test proves nothing")
	}
	_, err = pool.Scope().Get(t.Context(), tg)
	if !errors.Is(err, ssh.ErrUnreachable) {
		t.Fatalf("get with no listener: %v, want ssh.unreachable as on a cold run", err)
	}
	if !isClosed(old) {
		t.Fatal("the unverifiable warm connection is still open")
	}
}

func TestScopeKeepsAWarmConnectionAcrossARestartWithTheSameKey(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	old, err := pool.Scope().Get(t.Context(), pinned(s))
	if err != nil {
		t.Fatal(err)
	}
	tg := pinned(s)
	s.Stop()
	sshtest.Start(t, sshtest.Options{Port: s.Port, ClientKey: s.ClientKey, HostKey: s.HostPrivateKey})
	c, err := pool.Scope().Get(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if c != old {
		t.Fatal("the host showed the pinned key, yet the warm connection was not reused")
	}
	if res := exec(t, c, ssh.Command{Argv: []string{"echo", "ok"}}); string(res.Stdout) != "ok\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestPoolMaxIdleClosesTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	servers := sshtest.StartN(t, 3, sshtest.Options{})
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0)) // moved by hand
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour, MaxIdle: 2, Base: base.Base{Clock: clock}})
	defer pool.Close()
	var clients []*ssh.Client
	for _, s := range servers {
		c, err := pool.Get(t.Context(), target(s))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		clock.Advance(time.Second)
	}
	if pool.Len() != 2 || !isClosed(clients[0]) || isClosed(clients[1]) || isClosed(clients[2]) {
		t.Fatalf("max_idle 2 with 3 idle connections: %d kept, closed %v %v %v; want the oldest closed",
			pool.Len(), isClosed(clients[0]), isClosed(clients[1]), isClosed(clients[2]))
	}
}

// blackholeDialer dials real TCP connections whose writes it can make
// vanish, as on a link that went down: nothing answers, nothing resets.
type blackholeDialer struct {
	mu    sync.Mutex
	conns []*blackholeConn
}

type blackholeConn struct {
	net.Conn
	silent atomic.Bool
}

func (c *blackholeConn) Write(b []byte) (int, error) {
	if c.silent.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (d *blackholeDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	bc := &blackholeConn{Conn: c}
	d.mu.Lock()
	d.conns = append(d.conns, bc)
	d.mu.Unlock()
	return bc, nil
}

// silence makes the connections dialed so far drop what is written on them.
func (d *blackholeDialer) silence() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.silent.Store(true)
	}
}

// An idle connection whose peer stopped answering is not waited on for
// ever: its keepalive gives up and the Get dials again.
func TestPoolRedialsAnIdleConnectionThatNoLongerAnswers(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var d blackholeDialer
	pool := ssh.NewPool(ssh.Options{DialContext: d.dial, IdleTimeout: time.Hour})
	defer pool.Close()
	first, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	d.silence()
	second, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the connection that no longer answers was handed out again")
	}
	if !isClosed(first) {
		t.Fatal("the connection that no longer answers was left open")
	}
	if res := exec(t, second, ssh.Command{Argv: []string{"echo", "ok"}}); string(res.Stdout) != "ok\n" {
		t.Fatalf("stdout %q on the redialled connection", res.Stdout)
	}
}

// A host key change another scope finds does not cut a command an earlier
// scope is running on the warm connection; the connection is closed once
// that command ends and is never handed out again.
func TestScopeLetsARunningCommandFinishOnARetiredConnection(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	tg := pinned(s)
	old, err := pool.Scope().Get(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(t.TempDir(), "started")
	release := filepath.Join(t.TempDir(), "release")
	result := make(chan ssh.Result, 1)
	go func() {
		res, err := old.Exec(t.Context(), ssh.Command{Script: "touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.05; done; echo done"})
		if err != nil {
			t.Error(err)
		}
		result <- res
	}()
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	sshtest.Start(t, sshtest.Options{Port: s.Port, ClientKey: s.ClientKey})
	if _, err := pool.Scope().Get(t.Context(), tg); !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("get after the host key changed: %v, want ssh.host_key_mismatch", err)
	}
	if isClosed(old) {
		t.Fatal("the command running on the warm connection was cut")
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := <-result; string(res.Stdout) != "done\n" {
		t.Fatalf("the running command's stdout %q, want done", res.Stdout)
	}
	if !isClosed(old) || pool.Len() != 0 {
		t.Fatalf("after its last command the retired connection: closed %v, %d in the pool", isClosed(old), pool.Len())
	}
}

// A target that pins no key (a soul registered again at a host's address,
// first contact) is not refused for a key only a warm connection made
// before remembers: it gets a new connection and the key the host
// presents now.
func TestScopeRedialsAnUnpinnedTargetWhoseHostChangedKey(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	tg := target(s) // no pinned key
	old, err := pool.Scope().Get(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	rebuilt := sshtest.Start(t, sshtest.Options{Port: s.Port, ClientKey: s.ClientKey})
	c, err := pool.Scope().Get(t.Context(), tg)
	if err != nil {
		t.Fatalf("unpinned get after the host changed key: %v", err)
	}
	if c == old || c.HostKey() != rebuilt.HostKey {
		t.Fatalf("got the warm connection (%v) or the old key %q, want a new connection with %q", c == old, c.HostKey(), rebuilt.HostKey)
	}
	if !isClosed(old) {
		t.Fatal("the stale warm connection is still open")
	}
}

// TestScopeHostKeyRecheck: with Options.HostKeyRecheck, a scope whose first
// use of a pinned warm connection comes within that time of the
// listener's last proof of the key reuses it without a check (no dial);
// once the time has passed the check runs again, and a host whose key
// changed meanwhile is refused — at most that long after the change.
func TestScopeHostKeyRecheck(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0)) // moved by hand
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial, IdleTimeout: time.Hour, HostKeyRecheck: time.Minute, Base: base.Base{Clock: clock}})
	defer pool.Close()
	first, err := pool.Scope().Get(t.Context(), pinned(s))
	if err != nil {
		t.Fatal(err)
	}
	exec(t, first, ssh.Command{Argv: []string{"true"}})
	for i := range 3 {
		clock.Advance(15 * time.Second)
		c, err := pool.Scope().Get(t.Context(), pinned(s))
		if err != nil || c != first {
			t.Fatalf("scope %d within the recheck time: %v (same connection %v)", i, err, c == first)
		}
	}
	if dials.count() != 1 {
		t.Fatalf("%d dials within the recheck time, want 1 (the connection's own)", dials.count())
	}

	tg := pinned(s)
	s.Stop()
	sshtest.Start(t, sshtest.Options{Port: s.Port, ClientKey: s.ClientKey})
	if isClosed(first) {
		t.Fatal("the warm connection died with its listener; the test proves nothing")
	}
	clock.Advance(10 * time.Second) // 55 s after the handshake: still vouched for
	if c, err := pool.Scope().Get(t.Context(), tg); err != nil || c != first {
		t.Fatalf("within the recheck time: %v", err)
	}
	clock.Advance(10 * time.Second) // 65 s: checked, and refused
	if _, err := pool.Scope().Get(t.Context(), tg); !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("past the recheck time after the key changed: %v, want ssh.host_key_mismatch", err)
	}
	if dials.count() != 2 {
		t.Fatalf("%d dials, want 2: the connection and one check past the recheck time", dials.count())
	}
	if !isClosed(first) {
		t.Fatal("the refused warm connection is kept")
	}
}
