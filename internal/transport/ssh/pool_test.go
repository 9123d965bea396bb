package ssh_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestPoolReusesOneConnectionPerHost(t *testing.T) {
	t.Parallel()
	servers := sshtest.StartN(t, 2, sshtest.Options{})
	var dials dialCounter
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial})
	defer pool.Close()

	first := make([]*ssh.Client, len(servers))
	for round := range 3 {
		for i, s := range servers {
			c, err := pool.Get(t.Context(), target(s))
			if err != nil {
				t.Fatalf("round %d: get %s: %v", round, s.HostPort(), err)
			}
			if round == 0 {
				first[i] = c
			} else if c != first[i] {
				t.Errorf("round %d: a second client for %s", round, s.HostPort())
			}
			if res := exec(t, c, ssh.Command{Argv: []string{"true"}}); res.ExitCode != 0 {
				t.Errorf("true exited %d", res.ExitCode)
			}
		}
	}
	if dials.count() != len(servers) {
		t.Errorf("%d dials for %d hosts over 3 rounds", dials.count(), len(servers))
	}
}

func TestPoolConcurrentGetsDialOnce(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	var tofu atomic.Int64
	pool := ssh.NewPool(ssh.Options{
		DialContext:  dials.dial,
		OnNewHostKey: func(context.Context, ssh.Target, string) error { tofu.Add(1); return nil },
	})
	defer pool.Close()

	const n = 64
	clients := make([]*ssh.Client, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			clients[i], errs[i] = pool.Get(t.Context(), target(s))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("get %d: %v", i, errs[i])
		}
		if clients[i] != clients[0] {
			t.Fatalf("get %d returned another client", i)
		}
	}
	if dials.count() != 1 || tofu.Load() != 1 {
		t.Errorf("%d dials and %d host key reports, want 1 and 1", dials.count(), tofu.Load())
	}
	// Many goroutines may run commands on the one connection at once,
	// more than sshd's MaxSessions.
	for range 30 {
		wg.Go(func() {
			res, err := clients[0].Exec(t.Context(), ssh.Command{Argv: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				t.Errorf("exec: %v (exit %d)", err, res.ExitCode)
			}
		})
	}
	wg.Wait()
}

func TestPoolRedialsADeadConnectionAndKeepsTheLearnedKey(t *testing.T) {
	t.Parallel()
	old := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	var reported []string
	pool := ssh.NewPool(ssh.Options{
		DialContext: dials.dial,
		OnNewHostKey: func(_ context.Context, _ ssh.Target, key string) error {
			reported = append(reported, key)
			return nil
		},
	})
	defer pool.Close()

	c, err := pool.Get(t.Context(), target(old))
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // the connection drops
	c2, err := pool.Get(t.Context(), target(old))
	if err != nil {
		t.Fatalf("get after drop: %v", err)
	}
	if c2 == c || dials.count() != 2 {
		t.Errorf("dead connection reused: %d dials", dials.count())
	}
	if len(reported) != 1 {
		t.Errorf("host key reported %d times, want once", len(reported))
	}

	// The host comes back with another key: the pool refuses it although
	// the target pins nothing, since it learned the first one.
	c2.Close()
	old.Stop()
	sshtest.Start(t, sshtest.Options{Port: old.Port, ClientKey: old.ClientKey})
	_, err = pool.Get(t.Context(), target(old))
	if !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("err = %v, want ErrHostKeyMismatch", err)
	}
}

func TestPoolCancelledDialerDoesNotFailWaiters(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	dialing := make(chan struct{})
	var calls atomic.Int64
	pool := ssh.NewPool(ssh.Options{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if calls.Add(1) == 1 {
			close(dialing)
			<-ctx.Done() // the first dial hangs until its caller gives up
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	defer pool.Close()

	ctx, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := pool.Get(ctx, target(s))
		firstErr <- err
	}()
	<-dialing
	second := make(chan error, 1)
	go func() {
		_, err := pool.Get(t.Context(), target(s))
		second <- err
	}()
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("first get: %v, want context.Canceled", err)
	}
	if err := <-second; err != nil {
		t.Errorf("second get: %v", err)
	}
}

func TestPoolClose(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{})
	c, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("client still open after pool close")
	}
	if _, err := pool.Get(t.Context(), target(s)); !errors.Is(err, ssh.ErrClosed) {
		t.Errorf("get after close: %v, want ErrClosed", err)
	}
	if _, err := c.Exec(t.Context(), ssh.Command{Argv: []string{"true"}}); !errors.Is(err, ssh.ErrDisconnected) {
		t.Errorf("exec after close: %v, want ErrDisconnected", err)
	}
}

// A connection is shared only by targets with the same pinned host key and
// client key: a soul whose pin is wrong, or whose key the server does not
// accept, must not ride on a connection another soul at the same address
// opened with its own credentials.
func TestPoolKeysConnectionsByHostKeyAndClientKey(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial})
	defer pool.Close()

	pinned := target(s)
	pinned.HostKey = s.HostKey
	first, err := pool.Get(t.Context(), pinned)
	if err != nil {
		t.Fatalf("get with the right pin: %v", err)
	}

	_, otherHostKey, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	strangerKey, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*ssh.Target)
		want   error
	}{
		{"another pinned host key", func(tg *ssh.Target) { tg.HostKey = otherHostKey }, ssh.ErrHostKeyMismatch},
		{"a client key the server does not accept", func(tg *ssh.Target) { tg.PrivateKey = strangerKey }, ssh.ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := pinned
			tc.change(&tg)
			c, err := pool.Get(t.Context(), tg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("get = %v, %v; want %v", c == first, err, tc.want)
			}
		})
	}

	// The same keys written differently (another comment on the pin) share
	// the connection, and so does an unpinned target's TOFU connection
	// once it has verified the key a later target pins.
	same := pinned
	same.HostKey = s.HostKey + " renamed-comment"
	if c, err := pool.Get(t.Context(), same); err != nil || c != first {
		t.Fatalf("same keys, another comment: reused=%v err=%v", c == first, err)
	}
	before := dials.count()
	tofu, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	if tofu == first || dials.count() != before+1 {
		t.Fatalf("an unpinned target reused the pinned target's connection (%d dials)", dials.count()-before)
	}
	if res := exec(t, tofu, ssh.Command{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Fatalf("true exited %d", res.ExitCode)
	}
}

// A target that pins the key an unpinned target's connection verified
// shares that connection instead of dialing again, so pinning on first
// contact does not cost each run a second connection.
func TestPoolPinAfterFirstContactReusesTheConnection(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	var dials dialCounter
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial})
	defer pool.Close()
	tofu, err := pool.Get(t.Context(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	pinned := target(s)
	pinned.HostKey = tofu.HostKey()
	c, err := pool.Get(t.Context(), pinned)
	if err != nil || c != tofu || dials.count() != 1 {
		t.Fatalf("pinned get: reused=%v err=%v dials=%d", c == tofu, err, dials.count())
	}
}

// A target whose keys do not parse fails before any dial: the pool needs
// their fingerprints to know which connection the target may share.
func TestPoolInvalidTargetDoesNotDial(t *testing.T) {
	t.Parallel()
	var dials dialCounter
	pool := ssh.NewPool(ssh.Options{DialContext: dials.dial})
	defer pool.Close()
	for _, tg := range []ssh.Target{
		{Address: "127.0.0.1", User: "root", PrivateKey: []byte("not a key")},
		{Address: "127.0.0.1", User: "root", PrivateKey: func() []byte { k, _, _ := sshtest.NewKey(); return k }(), HostKey: "ssh-ed25519 not-base64"},
	} {
		if _, err := pool.Get(t.Context(), tg); !errors.Is(err, ssh.ErrInvalidTarget) {
			t.Errorf("get: %v, want ErrInvalidTarget", err)
		}
	}
	if dials.count() != 0 {
		t.Errorf("%d dials for invalid targets", dials.count())
	}
}
