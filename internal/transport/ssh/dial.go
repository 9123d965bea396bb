package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	gossh "golang.org/x/crypto/ssh"
)

// keyExchanges is the key exchange preference: curve25519-sha256 first,
// since it costs less CPU per connection than the post-quantum hybrid, which
// stays available for servers that insist on it.
var keyExchanges = []string{
	gossh.KeyExchangeCurve25519,
	gossh.KeyExchangeMLKEM768X25519,
	gossh.KeyExchangeECDHP256,
	gossh.KeyExchangeECDHP384,
	gossh.KeyExchangeECDHP521,
	gossh.KeyExchangeDH14SHA256,
	gossh.KeyExchangeDH16SHA512,
}

// hostKeyAlgorithms is the host key preference when no key is pinned.
var hostKeyAlgorithms = []string{
	gossh.KeyAlgoED25519,
	gossh.KeyAlgoECDSA256,
	gossh.KeyAlgoECDSA384,
	gossh.KeyAlgoECDSA521,
	gossh.KeyAlgoRSASHA512,
	gossh.KeyAlgoRSASHA256,
}

// Default limits applied by Options.WithDefaults.
const (
	DefaultMaxOutput = 16 << 20 // bytes captured per stream
	// DefaultMaxSessions stays below OpenSSH's default MaxSessions (10),
	// past which sessions are refused, leaving room for the session that
	// kills a cancelled command.
	DefaultMaxSessions = 8
)

// Options configure how connections are made and commands run. The zero
// value is ready to use.
type Options struct {
	// OnNewHostKey is called after a successful first connection to a
	// target with no pinned host key, with the key the server presented in
	// authorized_keys format, so the caller can pin it. An error fails the
	// connection. Nil means the key is accepted without being recorded
	// anywhere but the pool.
	OnNewHostKey func(ctx context.Context, t Target, hostKey string) error
	// DialContext opens the TCP connection; nil means a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Sleep waits between connection attempts; nil means a timer that
	// stops early when ctx is done. Tests inject one that records calls.
	Sleep func(ctx context.Context, d time.Duration) error
	// MaxOutput caps the bytes captured from each of stdout and stderr;
	// 0 means DefaultMaxOutput.
	MaxOutput int
	// Spool is the directory on the souls where durable commands are
	// spooled; empty means /var/lib/soulstack/spool for root and
	// ${XDG_STATE_HOME:-~/.local/state}/soulstack/spool for other users.
	Spool string
	// MaxSessions bounds the commands running at once on one connection;
	// 0 means DefaultMaxSessions. Keep it below the servers' MaxSessions
	// (OpenSSH: 10), as cancelling a command takes one more session.
	MaxSessions int
	// Base: Log receives connection retries at debug level (nil
	// discards); Clock is what idle times are measured on (nil: the real
	// clock; tests move a fake one by hand).
	base.Base
	// IdleTimeout, for a Pool, closes a connection no command has used
	// for that long; 0 keeps connections until Pool.Close (a pool that
	// lives for one run). A pool shared across runs sets it.
	IdleTimeout time.Duration
	// Executor, when set, is the soul binary each connection starts to
	// run its plain commands (see Executor); nil runs every command
	// through a shell.
	Executor *Executor
	// MaxIdle, for a Pool, caps the connections it keeps open with no
	// command on them: past it, the least recently used idle ones are
	// closed when a connection is added and at each sweep. 0 means no cap.
	MaxIdle int
	// HostKeyRecheck, for a Pool's scopes, is how long the listener's
	// proof of a pinned host key (the connection's handshake, a scope's
	// check) vouches for a warm connection: a scope whose first use of it
	// comes sooner skips the check. 0 checks at every scope's first use.
	HostKeyRecheck time.Duration
}

// WithDefaults returns a copy of o with nil and zero fields set.
func (o Options) WithDefaults() Options {
	if o.DialContext == nil {
		o.DialContext = (&net.Dialer{}).DialContext
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	o.Init()
	return o
}

func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Client is one SSH connection to a target. It is safe for concurrent use;
// each Exec opens its own session.
type Client struct {
	target  Target
	conn    *gossh.Client
	hostKey string
	opts    Options
	slots   chan struct{} // one token per concurrent session
	done    chan struct{} // closed when the connection has ended

	closeOnce sync.Once
	closeErr  error

	busy     atomic.Int64 // commands holding a session slot
	retired  atomic.Bool  // out of the pool: the last command to finish closes it
	lastUsed atomic.Int64 // opts.Now in unix nanoseconds when a command last held or released a slot
	// verified is opts.Now in unix nanoseconds when the listener last
	// proved it holds the host key (the handshake, a scope's check).
	verified atomic.Int64

	durable durableState
	exe     executorState
}

func newClient(t Target, conn *gossh.Client, hostKey string, opts Options) *Client {
	c := &Client{
		target:  t,
		conn:    conn,
		hostKey: hostKey,
		opts:    opts,
		slots:   make(chan struct{}, opts.MaxSessions),
		done:    make(chan struct{}),
	}
	c.touch()
	c.verified.Store(opts.Now().UnixNano())
	// The watcher ends with the connection, which Close ends.
	go func() {
		conn.Wait()
		close(c.done)
	}()
	return c
}

// Target returns the target the client is connected to.
func (c *Client) Target() Target { return c.target }

// HostKey returns the host key the server presented, in authorized_keys
// format.
func (c *Client) HostKey() string { return c.hostKey }

// Close closes the connection. Clients obtained from a Pool are closed by
// Pool.Close and must not be closed by their users.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.conn.Close()
		if errors.Is(c.closeErr, net.ErrClosed) {
			c.closeErr = nil
		}
		<-c.done
	})
	return c.closeErr
}

// Done returns a channel closed when the connection has ended, closed by
// either side or broken.
func (c *Client) Done() <-chan struct{} { return c.done }

// retire closes the connection once no command runs on it any more.
func (c *Client) retire() {
	c.retired.Store(true)
	if c.busy.Load() == 0 {
		_ = c.Close()
	}
}

// touch records that the connection is in use now.
func (c *Client) touch() { c.lastUsed.Store(c.opts.Now().UnixNano()) }

// idleSince reports whether no command holds the connection and none has
// since before t.
func (c *Client) idleSince(t time.Time) bool {
	return c.busy.Load() == 0 && c.lastUsed.Load() < t.UnixNano()
}

// HealthTimeout bounds the keepalive a pool sends over an idle connection
// before reusing it (or the target's ConnectTimeout, when shorter). A peer
// behind a link that went down answers nothing and resets nothing: without
// a bound the request would wait forever.
const HealthTimeout = 3 * time.Second

// healthy asks the server for a reply over the connection within limit: a
// connection whose peer is gone fails it where alive may not have noticed
// yet. It gives up when ctx ends.
func (c *Client) healthy(ctx context.Context, limit time.Duration) bool {
	if !c.alive() {
		return false
	}
	replied := make(chan error, 1)
	go func() {
		_, _, err := c.conn.SendRequest("keepalive@openssh.com", true, nil)
		replied <- err // a dead connection's Close ends a request left waiting
	}()
	tm := time.NewTimer(limit)
	defer tm.Stop()
	select {
	case err := <-replied:
		return err == nil
	case <-tm.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (c *Client) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Dial connects to t following its retry policy. If t pins no host key, the
// presented one is accepted and reported to opts.OnNewHostKey. Errors wrap
// ErrUnreachable, ErrAuth, ErrHostKeyMismatch or ErrInvalidTarget, or the
// context's error when ctx ends first.
func Dial(ctx context.Context, t Target, opts Options) (*Client, error) {
	return dial(ctx, t, opts.WithDefaults())
}

func dial(ctx context.Context, t Target, opts Options) (*Client, error) {
	t = t.WithDefaults()
	signer, pinned, err := t.parse()
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 1; ; attempt++ {
		c, err := connectOnce(ctx, t, signer, pinned, opts)
		if err == nil {
			if pinned == nil && opts.OnNewHostKey != nil {
				if err := opts.OnNewHostKey(ctx, t, c.hostKey); err != nil {
					c.Close()
					return nil, fmt.Errorf("ssh connect %s: record host key: %w", t, err)
				}
			}
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh connect %s: %w", t, context.Cause(ctx))
		}
		var ce *ConnectError
		if errors.As(err, &ce) {
			ce.Attempts = attempt
			if !t.RetryAuth || !errors.Is(ce.Kind, ErrAuth) || attempt >= t.Retry.Attempts {
				return nil, ce
			}
		}
		last = err
		if attempt >= t.Retry.Attempts {
			break
		}
		opts.Log.DebugContext(ctx, "ssh connect failed, retrying", "target", t.String(),
			"attempt", attempt, "of", t.Retry.Attempts, "in", t.Retry.Interval, "err", err)
		if err := opts.Sleep(ctx, t.Retry.Interval); err != nil {
			return nil, fmt.Errorf("ssh connect %s: %w", t, err)
		}
	}
	return nil, &ConnectError{Addr: t.Addr(), User: t.User, Attempts: t.Retry.Attempts, Kind: ErrUnreachable, Err: last}
}

// connectOnce makes one attempt. Failures worth retrying come back as plain
// errors; final ones (auth, host key) as a *ConnectError.
func connectOnce(ctx context.Context, t Target, signer gossh.Signer, pinned gossh.PublicKey, opts Options) (*Client, error) {
	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	addr := t.Addr()
	conn, err := opts.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The handshake has no context of its own: bound it by the deadline
	// and by cancellation.
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	var presented gossh.PublicKey
	var mismatch *HostKeyMismatchError
	cfg := &gossh.ClientConfig{
		Config:        gossh.Config{KeyExchanges: keyExchanges},
		User:          t.User,
		Auth:          []gossh.AuthMethod{gossh.PublicKeys(signer)},
		ClientVersion: "SSH-2.0-SoulStack",
		HostKeyCallback: func(_ string, _ net.Addr, key gossh.PublicKey) error {
			presented = key
			if pinned != nil && !keysEqual(pinned, key) {
				mismatch = &HostKeyMismatchError{
					Addr:         addr,
					Pinned:       gossh.FingerprintSHA256(pinned),
					Presented:    gossh.FingerprintSHA256(key),
					PresentedKey: authorizedKey(key),
				}
				return mismatch
			}
			return nil
		},
		HostKeyAlgorithms: hostKeyAlgorithms,
	}
	if pinned != nil {
		cfg.HostKeyAlgorithms = algorithmsFor(pinned)
	}
	sc, chans, reqs, err := gossh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		switch {
		case mismatch != nil:
			return nil, &ConnectError{Addr: addr, User: t.User, Kind: ErrHostKeyMismatch, Err: mismatch}
		case isAuthFailure(err):
			return nil, &ConnectError{Addr: addr, User: t.User, Kind: ErrAuth, Err: err}
		}
		return nil, err
	}
	if !stop() {
		sc.Close()
		return nil, ctx.Err()
	}
	conn.SetDeadline(time.Time{})
	return newClient(t, gossh.NewClient(sc, chans, reqs), authorizedKey(presented), opts), nil
}

// isAuthFailure reports whether a handshake error is the server refusing
// our key. x/crypto/ssh has no exported type for it, so this is the one
// place that reads its message.
func isAuthFailure(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to authenticate") ||
		strings.Contains(msg, "no supported methods remain") ||
		strings.Contains(msg, "Too many authentication failures")
}

func keysEqual(a, b gossh.PublicKey) bool {
	return a.Type() == b.Type() && string(a.Marshal()) == string(b.Marshal())
}

// algorithmsFor lists the host key algorithms that make the server present
// the pinned key rather than another one it also holds.
func algorithmsFor(key gossh.PublicKey) []string {
	if key.Type() == gossh.KeyAlgoRSA {
		return []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSA}
	}
	return []string{key.Type()}
}
