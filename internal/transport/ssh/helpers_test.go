package ssh_test

import (
	"context"
	"net"
	"os"
	"os/user"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if soulDir != "" {
		os.RemoveAll(soulDir)
	}
	os.Exit(code)
}

// target returns a Target for s with a short retry policy.
func target(s *sshtest.Server) ssh.Target {
	return ssh.Target{
		Address:        s.Addr,
		Port:           s.Port,
		User:           s.User,
		PrivateKey:     s.ClientKey,
		Retry:          ssh.RetryPolicy{Attempts: 3, Interval: 10 * time.Millisecond},
		ConnectTimeout: 5 * time.Second,
	}
}

// dialCounter counts TCP dials made through it.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (d *dialCounter) count() int { return int(d.n.Load()) }

// sleepRecorder records the waits between attempts without waiting.
type sleepRecorder struct {
	mu     sync.Mutex
	sleeps []time.Duration
	hook   func() // runs on each sleep, e.g. to start a server
}

func (r *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.sleeps = append(r.sleeps, d)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ctx.Err()
}

func (r *sleepRecorder) recorded() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.sleeps...)
}

// connect dials s with TOFU and returns the client, closed at cleanup.
func connect(t *testing.T, s *sshtest.Server, opts ssh.Options) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial(t.Context(), target(s), opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func exec(t *testing.T, c *ssh.Client, cmd ssh.Command) ssh.Result {
	t.Helper()
	res, err := c.Exec(t.Context(), cmd)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	return res
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}
