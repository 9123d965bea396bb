package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// Souls reaches souls for one run: through the soul's agent when it is
// connected to the keeper's bus (Agents), else over SSH, with one pooled
// connection per host for the whole run, keys resolved from their
// references and held in memory only, host keys pinned on first contact
// and verified after.
type Souls struct {
	store  store.Store
	agents transport.Agents
	pool   *ssh.Pool
	conns  interface {
		Get(ctx context.Context, t ssh.Target) (*ssh.Client, error)
	} // pool, or the run's scope of a shared pool
	keeper  []byte // the keeper's own private key, for souls without key_ref
	files   string // the keeper's files directory
	resolve func(ctx context.Context, ref string) ([]byte, error)

	shared bool // pool is the keeper's, not the run's: Close leaves it open

	mu    sync.Mutex
	souls map[string]store.Soul
	seen  map[string]bool // souls whose contact this run recorded
	ready map[string]bool // cloud-made souls this run found ready

	readyTimeout time.Duration
}

// SoulsConfig configures Souls.
type SoulsConfig struct {
	Store store.Store
	// KeeperKey is the keeper's SSH private key.
	KeeperKey []byte
	// Resolve reads the secret a key_ref names; nil resolves env: and
	// file: references.
	Resolve func(ctx context.Context, ref string) ([]byte, error)
	// FilesDir is the keeper's files directory, which modules may read
	// from (module.KeeperFiles); empty means none.
	FilesDir string
	// Options are the transport's options.
	Options ssh.Options
	// Pool, when set, is a connection pool shared with other runs (the
	// keeper's, with an idle timeout), which Close leaves open; nil means
	// a pool of the run's own, made with Options.
	Pool *ssh.Pool
	// Agents, when set, are the souls reached through their agent rather
	// than SSH (transport.Agents); nil means SSH only.
	Agents transport.Agents
	// ReadyTimeout bounds the wait for a cloud-made soul's cloud-init
	// when the step has no deadline; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// NewSouls returns the soul reacher of one run; Close it when the run ends.
func NewSouls(cfg SoulsConfig) *Souls {
	s := &Souls{store: cfg.Store, agents: cfg.Agents, keeper: cfg.KeeperKey, files: cfg.FilesDir, resolve: cfg.Resolve, souls: map[string]store.Soul{}, seen: map[string]bool{}, ready: map[string]bool{}, readyTimeout: cfg.ReadyTimeout}
	if s.readyTimeout <= 0 {
		s.readyTimeout = DefaultReadyTimeout
	}
	if s.resolve == nil {
		s.resolve = resolveLocal
	}
	s.pool, s.shared = cfg.Pool, cfg.Pool != nil
	if s.pool == nil {
		s.pool = ssh.NewPool(cfg.Options)
		s.conns = s.pool
	} else {
		// A warm connection from an earlier run is reused only once its
		// host has shown the pinned key again this run (ssh.Scope).
		s.conns = s.pool.Scope()
	}
	return s
}

func resolveLocal(_ context.Context, ref string) ([]byte, error) {
	r, err := secret.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	v, err := r.Resolve()
	if err != nil {
		return nil, err
	}
	return []byte(v + "\n"), nil
}

// Close closes every connection of the run; those of a shared pool stay
// open for the next runs.
func (s *Souls) Close() error {
	if s.shared {
		return nil
	}
	return s.pool.Close()
}

// SoulConnName names the connections to soul so in a pool (ssh.Pool.Drop):
// user@host:port.
func SoulConnName(so store.Soul) string {
	addr := so.Address
	if addr == "" {
		addr = so.PrimaryIP
	}
	return ssh.Target{Address: addr, Port: portOf(so), User: so.Connection.User}.String()
}

// Lookup returns the registered soul sid, or an error with code
// soul.not_found.
func (s *Souls) Lookup(ctx context.Context, sid string) (store.Soul, error) {
	s.mu.Lock()
	so, ok := s.souls[sid]
	s.mu.Unlock()
	if ok {
		return so, nil
	}
	err := retryStore(ctx, func(ctx context.Context) (err error) {
		so, err = s.store.SoulGet(ctx, sid)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.Soul{}, &module.Error{Code: "soul.not_found", Message: fmt.Sprintf("soul %q is not registered", sid)}
	}
	if err != nil {
		return store.Soul{}, err
	}
	s.mu.Lock()
	s.souls[sid] = so
	s.mu.Unlock()
	return so, nil
}

// pin records the host key a soul presented on first contact. A key
// pinned meanwhile by another run must be the same one.
func (s *Souls) pin(ctx context.Context, sid string, t ssh.Target, hostKey string) error {
	err := retryStore(ctx, func(ctx context.Context) error {
		return s.store.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: sid, HostKey: hostKey, Actor: store.ActorKeeper})
	})
	if errors.Is(err, store.ErrExists) {
		so, gerr := s.store.SoulGet(ctx, sid)
		if gerr == nil && sameKey(so.Connection.HostKey, hostKey) {
			return nil
		}
		return &ssh.HostKeyMismatchError{Addr: t.Addr(), Pinned: so.Connection.HostKey, Presented: hostKey}
	}
	if err == nil {
		s.mu.Lock()
		so := s.souls[sid]
		so.Connection.HostKey = hostKey
		s.souls[sid] = so
		s.mu.Unlock()
	}
	return err
}

func sameKey(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) >= 2 && len(fb) >= 2 && fa[0] == fb[0] && fa[1] == fb[1]
}

func portOf(so store.Soul) int {
	if so.Connection.Port == 0 {
		return 22
	}
	return so.Connection.Port
}

// AwaitsReady reports whether Target will wait for the cloud-init of
// soul sid, which Lookup has cached: a cloud-made soul never reached that
// this run has not found ready yet.
func (s *Souls) AwaitsReady(sid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	so, ok := s.souls[sid]
	return ok && awaitsReady(so) && !s.ready[sid]
}

// AgentGrace is how long after its join a soul's agent is expected to
// connect: the agent starts right after `soul join`, so a step on a soul
// that joined this recently (its seeds, typically) waits for the agent,
// for the rest of this window, before it falls back to SSH.
const AgentGrace = 30 * time.Second

// agentOf returns the agent connection of soul so, waiting for it while
// the soul is within AgentGrace of its join.
func (s *Souls) agentOf(ctx context.Context, so store.Soul) (transport.Conn, bool) {
	c, ok := s.agents.Agent(so.SID)
	if ok || so.JoinedAt == nil {
		return c, ok
	}
	deadline := so.JoinedAt.Add(AgentGrace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, false
		case <-tick.C:
		}
		if c, ok := s.agents.Agent(so.SID); ok {
			return c, true
		}
	}
	return nil, false
}

// Target returns a soul as a module target: through its agent when one is
// connected (Agents), else over SSH, connecting once per run. A soul that awaits readiness (awaitsReady) is dialled with its
// key refusals retried, and its cloud-init waited for (awaitReady) before
// it is returned. sudo wraps commands in sudo -n when the user is not root.
func (s *Souls) Target(ctx context.Context, sid string, retry transport.RetryPolicy, sudo bool) (module.Target, error) {
	so, err := s.Lookup(ctx, sid)
	if err != nil {
		return nil, err
	}
	if so.Connection.HostKey == "" && so.Connection.AwaitJoin && so.Status != store.SoulDestroyed {
		if so, err = s.awaitJoin(ctx, sid); err != nil {
			return nil, err
		}
	}
	if so.Status == store.SoulDestroyed {
		return nil, &module.Error{Code: "soul.destroyed", Message: fmt.Sprintf("soul %q is destroyed", sid)}
	}
	if s.agents != nil {
		if c, ok := s.agentOf(ctx, so); ok {
			// A running agent means the soul's userdata has run to the
			// point of starting it: no cloud-init wait.
			s.mu.Lock()
			s.ready[sid] = true
			s.mu.Unlock()
			return &soulTarget{KeeperFiles: KeeperFiles(s.files), sid: sid, conn: c, sudo: sudo}, nil
		}
	}
	key := s.keeper
	if so.Connection.KeyRef != "" {
		if key, err = s.resolve(ctx, so.Connection.KeyRef); err != nil {
			return nil, &module.Error{Code: "soul.key_unavailable", Message: fmt.Sprintf("the SSH key of soul %q (%s) cannot be read: %v", sid, so.Connection.KeyRef, err)}
		}
	}
	addr := so.Address
	if addr == "" {
		addr = so.PrimaryIP
	}
	awaits := s.AwaitsReady(sid)
	if awaits && retry == (transport.RetryPolicy{}) {
		retry = ReadyConnectRetry
	}
	// A soul that is not ready may refuse the key until its cloud-init
	// has written it: that is retried too, within the policy.
	t := ssh.Target{Address: addr, Port: portOf(so), User: so.Connection.User, PrivateKey: key, HostKey: so.Connection.HostKey, Retry: retry, RetryAuth: awaits}
	c, err := s.conns.Get(ctx, t)
	if err == nil && so.Connection.HostKey == "" {
		err = s.pin(ctx, sid, t, c.HostKey())
	}
	if err != nil {
		if errors.Is(err, ssh.ErrHostKeyMismatch) {
			var m *ssh.HostKeyMismatchError
			payload := map[string]any{"sid": sid, "address": t.Addr()}
			if errors.As(err, &m) {
				payload["pinned"], payload["presented"] = m.Pinned, m.Presented
			}
			if aerr := s.store.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{Actor: store.ActorKeeper, Action: "ssh.host_key_mismatch", Object: "soul/" + sid, Payload: payload}); aerr != nil {
				return nil, fmt.Errorf("%w (and its audit event failed: %v)", err, aerr)
			}
		}
		return nil, err
	}
	st := &soulTarget{KeeperFiles: KeeperFiles(s.files), sid: sid, conn: c, sudo: sudo}
	if awaits {
		if err := awaitReady(ctx, c, sid, s.readyTimeout); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.ready[sid] = true
		s.mu.Unlock()
		// The probe ran on the soul: it counts as the first contact,
		// which makes the soul active and ready for later runs.
		st.ran.Store(true)
	}
	return st, nil
}

// Contact is what one target of a step learned about reaching its soul:
// Reached when a command ran on it over an established connection,
// Unreachable when no connection could be set up (ssh.unreachable), with
// the error's code and message. A target that is neither (skipped, failed
// before connecting, refused by auth or host key) is no contact.
type Contact struct {
	SID         string
	Reached     bool
	Unreachable bool
	Code        string
	Error       string
}

// Record writes a step's contacts to the registry: souls come alive
// (pending or unreachable -> active) on a contact, go unreachable when a
// step cannot reach them, and an active soul's last_seen_at advances at
// most once per run. One store call per step, none when there is nothing
// new; the run's cached records follow, so that later steps' soul.status
// sees the change.
func (s *Souls) Record(ctx context.Context, runID string, actor store.Actor, contacts []Contact) error {
	p := store.SoulContactParams{RunID: runID, Actor: actor}
	s.mu.Lock()
	for _, c := range contacts {
		switch {
		case c.Reached && !(s.seen[c.SID] && s.souls[c.SID].Status == store.SoulActive):
			p.Reached = append(p.Reached, c.SID)
		case c.Unreachable:
			p.Unreachable = append(p.Unreachable, store.UnreachableSoul{SID: c.SID, Code: c.Code, Error: c.Error})
		}
	}
	s.mu.Unlock()
	if len(p.Reached) == 0 && len(p.Unreachable) == 0 {
		return nil
	}
	var trs []store.SoulTransition
	err := retryStore(ctx, func(ctx context.Context) (err error) {
		trs, err = s.store.SoulContact(ctx, p)
		return err
	})
	changed := make(map[string]store.SoulTransition, len(trs))
	for _, tr := range trs {
		changed[tr.SID] = tr
	}
	var stale []string
	s.mu.Lock()
	for _, sid := range p.Reached {
		so, ok := s.souls[sid]
		if tr, moved := changed[sid]; moved && ok {
			so.Status, so.LastSeenAt, so.LastError = tr.To, &tr.At, ""
			s.souls[sid] = so
		} else if ok && so.Status != store.SoulActive {
			stale = append(stale, sid) // another run moved it meanwhile
		}
		s.seen[sid] = err == nil
	}
	for _, u := range p.Unreachable {
		so, ok := s.souls[u.SID]
		if tr, moved := changed[u.SID]; moved && ok {
			so.Status, so.LastError = tr.To, u.Error
			s.souls[u.SID] = so
		} else if ok && so.Status != store.SoulUnreachable {
			stale = append(stale, u.SID)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("record contact with souls: %w", err)
	}
	for _, sid := range stale {
		so, gerr := s.store.SoulGet(ctx, sid)
		if gerr != nil {
			continue // deleted meanwhile: the next Lookup says so
		}
		s.mu.Lock()
		s.souls[sid] = so
		s.mu.Unlock()
	}
	return nil
}

// KeeperFiles reads files from a keeper directory for modules
// (module.KeeperFiles): names are relative and may not leave it.
type KeeperFiles string

// ReadKeeperFile reads name under the directory.
func (d KeeperFiles) ReadKeeperFile(_ context.Context, name string) ([]byte, error) {
	if d == "" {
		return nil, &module.Error{Code: "module.keeper_files_unavailable", Message: "the keeper has no files directory", Err: module.ErrNoKeeperFiles}
	}
	if !filepath.IsLocal(name) {
		return nil, &module.Error{Code: "keeper_file.invalid", Message: fmt.Sprintf("%q must be a relative path inside the keeper's files directory", name)}
	}
	b, err := os.ReadFile(filepath.Join(string(d), name))
	if err != nil {
		return nil, &module.Error{Code: "keeper_file.unreadable", Message: fmt.Sprintf("keeper file %q: %v", name, errors.Unwrap(err))}
	}
	return b, nil
}

// soulTarget is a module.Target over one transport connection: an SSH
// client or a soul's agent.
type soulTarget struct {
	KeeperFiles
	sid       string
	conn      transport.Conn
	transport string // "ssh" or "agent"
	sudo      bool
	ran       atomic.Bool // a command ran over the connection (any exit code)
}

var (
	_ module.Target      = (*soulTarget)(nil)
	_ module.KeeperFiles = (*soulTarget)(nil)
)

func (t *soulTarget) SID() string { return t.sid }

func (t *soulTarget) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	res, err := t.conn.Exec(ctx, transport.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: t.sudo})
	if err != nil {
		return module.ExecResult{}, err
	}
	t.ran.Store(true)
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}
