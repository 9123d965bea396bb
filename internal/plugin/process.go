package plugin

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/soulstack/soulstack/driversdk"
	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/plugin/wire"
)

// proc is one running plugin process.
type proc struct {
	name   string
	path   string
	pid    int
	cmd    *exec.Cmd
	client *plugin.Client
	rpc    pb.CloudDriverClient
	log    *slog.Logger
	stop   func(force bool)
	stderr *lineLogger
	stdout *lineLogger

	dead atomic.Bool

	capsMu sync.Mutex
	caps   *driversdk.Capabilities
}

// inheritedEnv are the keeper's variables a plugin process gets; nothing
// else of the keeper's environment is passed on.
var inheritedEnv = []string{"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME"}

// pluginEnv returns the environment of a plugin process.
func pluginEnv(extra []string) []string {
	var env []string
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// start finds and starts the plugin of driver name and completes the
// handshake.
func (h *Host) start(name string) (*proc, error) {
	path, err := discover(h.cfg.PluginDir, name, h.cfg.PathLookup)
	if err != nil {
		return nil, err
	}
	log := h.log.With("driver", name)
	p := &proc{name: name, path: path, log: log}
	p.stderr = newLineLogger(log, h.cfg.Secrets, "stderr", slog.LevelInfo)
	p.stdout = newLineLogger(log, h.cfg.Secrets, "stdout", slog.LevelWarn)

	cmd := exec.Command(path)
	cmd.Env = pluginEnv(h.cfg.Env)
	p.cmd = cmd
	p.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.Plugins(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     h.cfg.StartTimeout,
		Logger:           newHCLogger(log, filepath.Base(path)),
		// The plugin's stderr: log lines, parsed here rather than by
		// go-plugin, whose parser panics on some malformed JSON lines.
		Stderr: p.stderr,
		// os.Stdout and os.Stderr of the plugin after its handshake, streamed
		// over gRPC: writing there is a driver bug, logged as a warning.
		SyncStdout: p.stdout,
		SyncStderr: p.stdout,
	})
	p.stop = p.stopFunc(h.cfg.StopTimeout)

	rpc, err := p.client.Client()
	if err != nil {
		p.stop(true)
		return nil, startError(name, path, err, p.stderr.tail())
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		p.stop(true)
		return nil, startError(name, path, err, p.stderr.tail())
	}
	cd, ok := raw.(pb.CloudDriverClient)
	if !ok {
		p.stop(true)
		return nil, startError(name, path, errNotCloudDriver, nil)
	}
	p.rpc = cd
	if rc := p.client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	p.stderr.setPID(p.pid)
	p.stdout.setPID(p.pid)
	log.Debug("plugin started", "path", path, "pid", p.pid, "protocol", p.client.NegotiatedVersion())
	return p, nil
}

// alive reports whether p can take calls.
func (p *proc) alive() bool {
	return !p.dead.Load() && !p.client.Exited()
}

// stopFunc returns p's stop function, which runs once: it marks p dead,
// kills the process (at once when force is set; else gracefully first, as
// go-plugin's Client.Kill does) and waits at most timeout for it to exit
// and its output to drain, so that a plugin that left a child holding its
// stderr open cannot hang the keeper.
func (p *proc) stopFunc(timeout time.Duration) func(force bool) {
	var once sync.Once
	return func(force bool) {
		once.Do(func() {
			p.dead.Store(true)
			if force && p.cmd.Process != nil {
				// os.Process knows when it was reaped: no risk of killing a
				// process that reused the PID.
				_ = p.cmd.Process.Kill()
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				p.client.Kill()
			}()
			select {
			case <-done:
			case <-time.After(timeout):
				p.log.Warn("plugin process did not finish stopping in time", "pid", p.pid, "timeout", timeout)
			}
			p.stderr.flush()
			p.stdout.flush()
		})
	}
}

// waitExited waits at most d for the process to have exited and reports
// whether it has.
func (p *proc) waitExited(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if p.client.Exited() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// capabilities returns the driver's capabilities, asking the process once.
func (p *proc) capabilities(ctx context.Context) (driversdk.Capabilities, error) {
	p.capsMu.Lock()
	defer p.capsMu.Unlock()
	if p.caps != nil {
		return *p.caps, nil
	}
	r, err := p.rpc.Capabilities(ctx, &pb.CapabilitiesRequest{})
	if err != nil {
		return driversdk.Capabilities{}, err
	}
	c := capsFromWire(r)
	p.caps = &c
	return c, nil
}

// setCapabilities records capabilities the caller just fetched.
func (p *proc) setCapabilities(c driversdk.Capabilities) {
	p.capsMu.Lock()
	defer p.capsMu.Unlock()
	p.caps = &c
}
