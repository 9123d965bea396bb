package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/transport"
)

// DefaultReadyTimeout bounds the wait for a cloud-made soul's cloud-init,
// or for the join of a soul that joins by itself, when the step has no
// deadline of its own (no timeout, no run timeout).
const DefaultReadyTimeout = 15 * time.Minute

// Registry is the part of the keeper's store the engine uses: the souls a
// run reaches, their host keys and contact, and the audit log of host key
// mismatches.
type Registry interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	SoulPinHostKey(ctx context.Context, p store.SoulHostKeyParams) error
	SoulContact(ctx context.Context, p store.SoulContactParams) ([]store.SoulTransition, error)
	AuditRecord(ctx context.Context, p store.AuditParams) error
}

// Souls reaches souls for one run: through the soul's agent when it is
// connected to the keeper's bus (Agents), else over SSH (the run's
// transport.Dialer), keys resolved from their references and held in
// memory only, host keys pinned in the registry on first contact and
// verified after.
type Souls struct {
	store   Registry
	project string           // the run's project; empty confines nothing
	dialer  transport.Dialer // nil: no transport at all
	keeper  []byte           // the keeper's own private key, for souls without key_ref
	files   string           // the keeper's files directory
	resolve func(ctx context.Context, project, ref string) ([]byte, error)
	// projectKey is the keeper's key of a project; nil: keeper.
	projectKey func(ctx context.Context, project string) ([]byte, error)

	mu    sync.Mutex
	souls map[string]store.Soul
	seen  map[string]bool // souls whose contact this run recorded
	ready map[string]bool // cloud-made souls this run found ready
	// keys are the SSH keys this run resolved, by project and reference
	// (each step of a soul reaches it with the same key: resolving a file
	// or a sealed credential again per step is work, not safety).
	keys map[string][]byte

	readyTimeout time.Duration
}

// SoulsConfig configures Souls.
type SoulsConfig struct {
	Store Registry
	// KeeperKey is the keeper's SSH private key.
	KeeperKey []byte
	// ProjectKey returns the keeper's SSH private key for a project's
	// souls (each project has its own, so that one project's hosts do not
	// trust another's runs); nil: KeeperKey for every project.
	ProjectKey func(ctx context.Context, project string) ([]byte, error)
	// Resolve reads the secret a key_ref names, in the soul's project
	// (where the keeper decides what the reference may reach); nil
	// resolves env: and file: references.
	Resolve func(ctx context.Context, project, ref string) ([]byte, error)
	// FilesDir is the keeper's files directory, which modules may read
	// from (module.KeeperFiles); empty means none.
	FilesDir string
	// Dial opens the run's dialer, which pins and checks SSH host keys in
	// the HostKeys it is given: the keeper's agent bus first, then its
	// SSH pool (transport.AgentFirst over ssh.Pool.Dialer). Nil means no
	// soul can be reached.
	Dial func(transport.HostKeys) transport.Dialer
	// ReadyTimeout bounds the wait for a cloud-made soul's cloud-init
	// when the step has no deadline; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Project confines the run to its project's souls: another project's
	// soul is not registered, as far as the run can tell. Empty confines
	// nothing.
	Project string
}

// NewSouls returns the soul reacher of one run; Close it when the run ends.
func NewSouls(cfg SoulsConfig) *Souls {
	s := &Souls{store: cfg.Store, project: cfg.Project, keeper: cfg.KeeperKey, projectKey: cfg.ProjectKey, files: cfg.FilesDir, resolve: cfg.Resolve, souls: map[string]store.Soul{}, seen: map[string]bool{}, ready: map[string]bool{}, readyTimeout: cfg.ReadyTimeout}
	if s.readyTimeout <= 0 {
		s.readyTimeout = DefaultReadyTimeout
	}
	if s.resolve == nil {
		s.resolve = resolveLocal
	}
	if cfg.Dial != nil {
		s.dialer = cfg.Dial(hostKeys{s})
	}
	return s
}

func resolveLocal(_ context.Context, _, ref string) ([]byte, error) {
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

// Lookup returns the registered soul sid, or an error with code
// soul.not_found.
func (s *Souls) Lookup(ctx context.Context, sid string) (store.Soul, error) {
	s.mu.Lock()
	so, ok := s.souls[sid]
	s.mu.Unlock()
	if ok {
		return so, nil
	}
	so, err := s.get(ctx, sid)
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

// get reads soul sid from the registry, retrying a passing refusal.
func (s *Souls) get(ctx context.Context, sid string) (so store.Soul, err error) {
	err = retryStore(ctx, func(ctx context.Context) (err error) {
		so, err = s.store.SoulGet(ctx, sid)
		return err
	})
	if err == nil && s.project != "" && so.Project != s.project {
		// Checked at every read, so a target computed while the run goes
		// (an output, a fact) cannot reach across either.
		return store.Soul{}, &store.Error{Err: store.ErrNotFound, Kind: "soul", Key: sid}
	}
	return so, err
}

// refreshFor bounds the registry read before a redial.
const refreshFor = 2 * time.Second

// refresh reads soul sid from the registry again (its status may have
// changed since the run cached it).
func (s *Souls) refresh(ctx context.Context, sid string) (store.Soul, error) {
	so, err := s.get(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return store.Soul{}, &module.Error{Code: "soul.destroyed", Message: fmt.Sprintf("soul %q is no longer registered", sid)}
	}
	return so, err
}

// hostKeys pins and checks host keys in the registry for the run's SSH
// dialer (transport.HostKeys), keeping the run's cached records in step.
type hostKeys struct{ s *Souls }

// Pin records key as sid's host key and returns the key pinned: key, or
// the one another run pinned meanwhile.
func (h hostKeys) Pin(ctx context.Context, sid, key string) (string, error) {
	err := retryStore(ctx, func(ctx context.Context) error {
		return h.s.store.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: sid, HostKey: key, Actor: store.ActorKeeper})
	})
	if errors.Is(err, store.ErrHostTaken) {
		return "", &module.Error{Code: "soul.host_taken", Message: fmt.Sprintf("soul %q: the host it reached is another project's soul (its host key is pinned there); nothing ran on it", sid), Err: err}
	}
	if errors.Is(err, store.ErrExists) {
		so, err := h.s.store.SoulGet(ctx, sid)
		if err != nil {
			return "", err
		}
		return so.Connection.HostKey, nil
	}
	if err != nil {
		return "", err
	}
	h.s.mu.Lock()
	so := h.s.souls[sid]
	so.Connection.HostKey = key
	h.s.souls[sid] = so
	h.s.mu.Unlock()
	return key, nil
}

// Mismatch audits ssh.host_key_mismatch.
func (h hostKeys) Mismatch(ctx context.Context, sid, addr, pinned, presented string) error {
	payload := map[string]any{"sid": sid, "address": addr, "pinned": pinned, "presented": presented}
	return h.s.store.AuditRecord(ctx, store.AuditParams{Actor: store.ActorKeeper, Action: "ssh.host_key_mismatch", Object: "soul/" + sid, Payload: payload})
}

func portOf(so store.Soul) int {
	if so.Connection.Port == 0 {
		return 22
	}
	return so.Connection.Port
}

// awaitsReady reports whether a soul must be waited for before its first
// step: made by a cloud step (it has a provider) and never reached since
// (no last_seen_at; pending, or unreachable at every try so far). A soul
// that joined through the agent is active, so it is ready; so are
// hand-registered souls, which start active. Everything here is read from
// the run's cached record: a ready soul costs nothing.
func awaitsReady(so store.Soul) bool {
	return so.Provider != "" && so.LastSeenAt == nil && so.Status != store.SoulActive && so.Status != store.SoulDestroyed
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
// that joined this recently (its seeds, typically) and holds its
// certificate waits for the agent, for the rest of this window, before it
// falls back to SSH. Two minutes: a small VM on a busy host (an emulated
// one measured 30 s and more) starts its agent well after its join.
const AgentGrace = 2 * time.Minute

// Target returns a soul as a module target, through the run's dialer: its
// agent when one is connected (or connects within AgentGrace of its join),
// else SSH. A soul that awaits readiness (awaitsReady) is dialled with its
// key refusals retried and its cloud-init waited for
// (transport.Peer.AwaitReady) before it is returned.
// sudo wraps commands in sudo -n when the user is not root. via, when
// set, is the only transport to use (transport.Peer.Via): the one an
// earlier execution sent the target's durable commands through.
func (s *Souls) Target(ctx context.Context, sid string, retry transport.RetryPolicy, sudo bool, via string) (module.Target, error) {
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
	if s.dialer == nil {
		return nil, &module.Error{Code: "transport.unavailable", Message: fmt.Sprintf("soul %q cannot be reached: this keeper has no transport", sid)}
	}
	addr := so.Address
	if addr == "" {
		addr = so.PrimaryIP
	}
	peer := transport.Peer{SID: sid, Address: addr, Port: portOf(so), User: so.Connection.User, Key: s.keyOf(so),
		HostKey: so.Connection.HostKey, Retry: retry, AwaitReady: s.AwaitsReady(sid), ReadyTimeout: s.readyTimeout, Via: via, HasAgent: so.CertSerial != ""}
	if so.JoinedAt != nil && so.CertSerial != "" {
		peer.AgentUntil = so.JoinedAt.Add(AgentGrace)
	}
	awaits := peer.AwaitReady
	c, err := s.dialer.Dial(ctx, peer)
	if err != nil {
		return nil, err
	}
	st := &soulTarget{KeeperFiles: KeeperFiles(s.files), sid: sid, conn: c, sudo: sudo}
	// A redial (after a cut) goes through the transport the commands went
	// by, and only after the soul is looked up again: a soul destroyed
	// meanwhile is not dialled.
	st.redial = func(ctx context.Context) (transport.Conn, error) {
		// Bounded: a keeper whose registry does not answer still
		// reattaches by the record it has (it may be fenced there).
		rctx, cancel := context.WithTimeout(ctx, refreshFor)
		so, err := s.refresh(rctx, sid)
		cancel()
		var me *module.Error
		switch {
		case errors.As(err, &me) && me.Code == "soul.destroyed":
			return nil, err
		case err == nil && so.Status == store.SoulDestroyed:
			return nil, &module.Error{Code: "soul.destroyed", Message: fmt.Sprintf("soul %q is destroyed", sid)}
		}
		p := peer
		p.Via, p.AwaitReady = via, false
		// The host key pinned since the peer was made (first contact
		// pins it in the run's cached record): a redial verifies it and
		// pins nothing.
		s.mu.Lock()
		if k := s.souls[sid].Connection.HostKey; k != "" {
			p.HostKey = k
		}
		s.mu.Unlock()
		if err == nil && so.Connection.HostKey != "" {
			p.HostKey = so.Connection.HostKey
		}
		if p.Via == "" {
			p.Via = transportOf(st.conn)
		}
		return s.dialer.Dial(ctx, p)
	}
	if awaits {
		s.mu.Lock()
		s.ready[sid] = true
		s.mu.Unlock()
		// The probe ran on the soul (or its agent answers): it counts as
		// the first contact, which makes the soul active and ready for
		// later runs.
		st.ran.Store(true)
	}
	return st, nil
}

// keyOf returns how the SSH key of soul so is read: its key_ref, resolved
// when a dialer needs it, or the keeper's own key.
func (s *Souls) keyOf(so store.Soul) func(context.Context) ([]byte, error) {
	resolve := s.resolveKey(so)
	return func(ctx context.Context) ([]byte, error) {
		id := so.Project + "\x00" + so.Connection.KeyRef
		s.mu.Lock()
		key, ok := s.keys[id]
		s.mu.Unlock()
		if ok {
			return key, nil
		}
		key, err := resolve(ctx)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.keys == nil {
			s.keys = map[string][]byte{}
		}
		s.keys[id] = key
		s.mu.Unlock()
		return key, nil
	}
}

// resolveKey reads the SSH key of so: its key_ref's secret, or the
// keeper's key of its project.
func (s *Souls) resolveKey(so store.Soul) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		if so.Connection.KeyRef == "" {
			if s.projectKey == nil {
				return s.keeper, nil
			}
			key, err := s.projectKey(ctx, so.Project)
			if err != nil {
				return nil, &module.Error{Code: "soul.key_unavailable", Message: fmt.Sprintf("the keeper's SSH key of project %s cannot be had: %v", so.Project, err)}
			}
			return key, nil
		}
		key, err := s.resolve(ctx, so.Project, so.Connection.KeyRef)
		if err != nil {
			return nil, &module.Error{Code: "soul.key_unavailable", Message: fmt.Sprintf("the SSH key of soul %q (%s) cannot be read: %v", so.SID, so.Connection.KeyRef, err)}
		}
		return key, nil
	}
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
	// Executor is how commands ran on a soul reached
	// (transport.ExecutorReporter), "" when not known.
	Executor string
}

// Record writes a step's contacts to the registry: souls come alive
// (pending or unreachable -> active) on a contact, go unreachable when a
// step cannot reach them, and an active soul's last_seen_at advances at
// most once per run. One store call per step, none when there is nothing
// new; the run's cached records follow, so that later steps' soul.status
// sees the change. A soul's Executor is written when it differs from the
// record's.
func (s *Souls) Record(ctx context.Context, runID string, actor store.Actor, contacts []Contact) error {
	p := store.SoulContactParams{RunID: runID, Actor: actor}
	s.mu.Lock()
	for _, c := range contacts {
		if so, ok := s.souls[c.SID]; ok && c.Reached && c.Executor != "" && c.Executor != so.Executor {
			if p.Executors == nil {
				p.Executors = map[string]string{}
			}
			p.Executors[c.SID] = c.Executor
		}
		switch {
		case c.Reached && !(s.seen[c.SID] && s.souls[c.SID].Status == store.SoulActive):
			p.Reached = append(p.Reached, c.SID)
		case c.Unreachable:
			p.Unreachable = append(p.Unreachable, store.UnreachableSoul{SID: c.SID, Code: c.Code, Error: c.Error})
		}
	}
	s.mu.Unlock()
	if len(p.Reached) == 0 && len(p.Unreachable) == 0 && len(p.Executors) == 0 {
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
	if err == nil {
		for sid, x := range p.Executors {
			so := s.souls[sid]
			so.Executor = x
			s.souls[sid] = so
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
	// durable numbers and records the target's commands (apply runs'
	// soul-side steps); nil sends them as plain commands.
	durable *durableTarget
	// redial reaches the soul again through the same transport.
	redial func(ctx context.Context) (transport.Conn, error)
}

var (
	_ module.Target      = (*soulTarget)(nil)
	_ module.KeeperFiles = (*soulTarget)(nil)
)

func (t *soulTarget) SID() string { return t.sid }

func (t *soulTarget) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	tc := transport.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: t.sudo, Probe: cmd.Probe}
	var res transport.Result
	var err error
	if t.durable != nil {
		res, err = t.execDurable(ctx, tc, cmd.ReadOnly)
	} else {
		res, err = t.conn.Exec(ctx, tc)
	}
	if err != nil {
		return module.ExecResult{}, err
	}
	t.ran.Store(true)
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}
