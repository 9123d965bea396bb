// Package plugin is the keeper's PluginHost: it finds CloudDriver plugins
// (executables named soul-cloud-<driver>), starts them through
// hashicorp/go-plugin, and hands the rest of the keeper a driversdk.Driver
// whose calls travel over gRPC to the plugin process.
//
// The host keeps one process per driver, reused across calls and started
// again when it has died. Every call has a deadline. Whatever the plugin
// does, the keeper neither hangs nor dies with it; a failure is a
// *driversdk.Error with a stable code:
//
//   - driver.not_found: no soul-cloud-<driver> in the plugin dir (or on
//     $PATH, with Config.PathLookup);
//   - driver.untrusted: the executable or its directory could be changed
//     by someone other than the keeper's user or root; it is not started;
//   - driver.incompatible: the executable is not a CloudDriver plugin, or
//     speaks a protocol version this keeper does not (see wire.Handshake);
//   - driver.crashed: the process died (or its connection broke) during the
//     call; the next call starts a new process;
//   - driver.timeout: the call's deadline passed; when the driver did not
//     answer within a grace period after it, its process is killed.
//
// Errors the driver returns keep the driver's code, message and field.
//
// What a plugin writes to stderr (and, against the rules, to stdout) ends
// up in the keeper's log, one record per line, passed through the masking
// handler of internal/secret. Plugins get a minimal environment (PATH, HOME,
// TMPDIR, locale, TZ): the keeper's own variables, which may hold secrets,
// are not inherited; credentials travel in each call.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/secret"
)

// ErrClosed is returned by a Host, and by the drivers it handed out, after
// Close.
var ErrClosed = errors.New("plugin host is closed")

// Config configures a Host. The zero value works: see WithDefaults.
type Config struct {
	// PluginDir is where soul-cloud-<driver> is found; the keeper passes
	// <data-dir>/plugins. The executable and its directory must be owned by
	// the keeper's user or root and not be group- or world-writable, or the
	// driver fails with driver.untrusted and is not started.
	PluginDir string
	// PathLookup also searches $PATH when PluginDir has no executable
	// for a driver, with the same checks. Off: PluginDir only.
	PathLookup bool
	// Secrets are masked in the plugins' log lines and the host's records
	// (besides secret-looking keys and token patterns); nil: none.
	Secrets *secret.Keeper
	// Base: Log receives the host's records and the plugins' log lines,
	// masked (default: slog.Default()).
	base.Base
	// CallTimeout bounds Capabilities, ValidateProfile and List. Default 30 s.
	CallTimeout time.Duration
	// CreateTimeout bounds Create. Default 10 min.
	CreateTimeout time.Duration
	// DestroyTimeout bounds Destroy. Default 10 min.
	DestroyTimeout time.Duration
	// ResizeTimeout bounds Resize. Default 10 min.
	ResizeTimeout time.Duration
	// KillGrace is how long after a call's deadline the host still waits for
	// the driver's answer before it takes the plugin for hung and kills its
	// process. Default 2 s.
	KillGrace time.Duration
	// StartTimeout bounds starting a plugin process up to the end of its
	// handshake. Default 15 s.
	StartTimeout time.Duration
	// StopTimeout bounds how long stopping a plugin process waits for it to
	// exit and for its output to drain. Default 5 s.
	StopTimeout time.Duration
	// Env holds extra KEY=VALUE variables for plugin processes, on top of
	// the minimal environment they always get.
	Env []string
}

// WithDefaults returns a copy of c with every unset field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.Init()
	setDefault(&c.CallTimeout, 30*time.Second)
	setDefault(&c.CreateTimeout, 10*time.Minute)
	setDefault(&c.DestroyTimeout, 10*time.Minute)
	setDefault(&c.ResizeTimeout, 10*time.Minute)
	setDefault(&c.KillGrace, 2*time.Second)
	setDefault(&c.StartTimeout, 15*time.Second)
	setDefault(&c.StopTimeout, 5*time.Second)
	return c
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d == 0 {
		*d = v
	}
}

// Validate reports the first field of c that is invalid. It changes
// nothing.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"call_timeout", c.CallTimeout},
		{"create_timeout", c.CreateTimeout},
		{"destroy_timeout", c.DestroyTimeout},
		{"resize_timeout", c.ResizeTimeout},
		{"kill_grace", c.KillGrace},
		{"start_timeout", c.StartTimeout},
		{"stop_timeout", c.StopTimeout},
	} {
		if f.d <= 0 {
			return fmt.Errorf("plugin host config: %s must be positive, got %s", f.name, f.d)
		}
	}
	return nil
}

// Host starts and talks to CloudDriver plugins. It is safe for concurrent
// use. Close stops every plugin process it started.
type Host struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	slots   map[string]*slot
	closed  bool
	metrics hostMetrics
}

// slot holds the one process of a driver; its mutex is held while the
// process is started or replaced.
type slot struct {
	mu sync.Mutex
	p  *proc
}

// New returns a Host for cfg (with defaults applied). No process is started
// until a driver is asked for.
func New(cfg Config) (*Host, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Host{
		cfg:     cfg,
		log:     slog.New(cfg.Secrets.LogHandler(cfg.Log.Handler())).With("component", "plugin"),
		slots:   make(map[string]*slot),
		metrics: newHostMetrics(),
	}, nil
}

// Driver returns the driver named name (served by soul-cloud-<name>),
// starting its plugin process if none is running, so that a missing or
// incompatible plugin is reported here. The Driver's calls go to the
// driver's current process, started again when it has died.
func (h *Host) Driver(ctx context.Context, name string) (driversdk.Driver, error) {
	if _, err := h.acquire(ctx, name); err != nil {
		return nil, err
	}
	return &driver{h: h, name: name}, nil
}

// PID returns the process ID of the running plugin for the driver name, or
// 0 when none is running. It is for diagnostics and tests.
func (h *Host) PID(name string) int {
	h.mu.Lock()
	s := h.slots[name]
	h.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || !s.p.alive() {
		return 0
	}
	return s.p.pid
}

// acquire returns the running process of driver name, starting one if there
// is none or the last one died. Starting is bounded by StartTimeout rather
// than by ctx, which is only checked before a start.
func (h *Host) acquire(ctx context.Context, name string) (*proc, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	s := h.slots[name]
	if s == nil {
		s = &slot{}
		h.slots[name] = s
	}
	h.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		if s.p.alive() {
			return s.p, nil
		}
		h.log.Info("plugin process is gone; starting a new one", "driver", name, "pid", s.p.pid)
		s.p.stop(false)
		s.p = nil
	}
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start driver %q: %w", name, err)
	}
	p, err := h.start(name)
	if err != nil {
		return nil, err
	}
	s.p = p
	return p, nil
}

// Close stops every plugin process the host started (gracefully, then by
// killing it) and waits, at most StopTimeout each, for them to exit. Later
// calls fail with ErrClosed.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	slots := make([]*slot, 0, len(h.slots))
	for _, s := range h.slots {
		slots = append(slots, s)
	}
	h.mu.Unlock()

	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Go(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.p != nil {
				s.p.stop(false)
				s.p = nil
			}
		})
	}
	wg.Wait()
	return nil
}
