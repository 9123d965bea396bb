package localcloud

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/soulstack/soulstack/driversdk"
	"golang.org/x/sys/unix"
)

// runDir holds what all local drivers on the host share: the lock that
// serializes host network changes (it stays once made) and, while any of
// them has VMs, the IPv4 forwarding setting from before they changed it.
const runDir = "/run/soulstack-local"

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// flock takes an exclusive flock(2) on path, creating it, and returns the
// function that releases it.
func flock(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
}

// ensureHost sets up the bridge, its address, the nft table and IPv4
// forwarding for a state dir's VMs, or checks that they are still there.
// The subnet is the configured one, the one already in use, or the
// first free candidate; one that overlaps a route or address of the host
// is refused.
func ensureHost(ctx context.Context, st store, cfg Config) (*hostState, error) {
	unlock, err := flock(ctx, filepath.Join(runDir, "host.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	h, err := st.loadHost()
	if err != nil {
		return nil, err
	}
	inst := instanceID(cfg.StateDir)
	bridge := bridgePrefix + inst
	used, err := hostNetworks(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case h != nil:
		if cfg.Subnet.IsValid() && cfg.Subnet != h.Subnet {
			return nil, invalid("config.subnet", "the VMs of this state dir use %s: destroy them before changing the subnet to %s",
				h.Subnet, cfg.Subnet)
		}
	case cfg.Subnet.IsValid():
		h = &hostState{Subnet: cfg.Subnet}
	default:
		p, err := pickSubnet(used, bridge)
		if err != nil {
			return nil, invalid("config.subnet", "%v", err)
		}
		h = &hostState{Subnet: p}
	}
	h.Bridge = bridge
	h.Table = tablePrefix + inst
	h.HostPorts = cfg.HostPorts
	if h.HostPorts == nil {
		h.HostPorts = []uint16{DefaultHostPort}
	}
	h.LoopbackPorts = cfg.LoopbackPorts
	if h.LoopbackPorts == nil {
		h.LoopbackPorts = []uint16{DefaultHostPort}
	}
	if c := conflicts(h.Subnet, used, h.Bridge); len(c) > 0 {
		return nil, invalid("config.subnet", "%s overlaps what the host already uses: %s", h.Subnet, strings.Join(c, "; "))
	}
	if h.MTU == 0 {
		h.MTU = uplinkMTU(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err // the MTU may be a default, not the uplink's
		}
	}
	// Recorded first, so that a crash half-way still leaves what to undo.
	if err := st.saveHost(h); err != nil {
		return nil, err
	}
	wasOff, err := enableForwarding()
	if err != nil {
		return nil, err
	}
	if err := addBridge(ctx, h); err != nil {
		return nil, err
	}
	if err := setupTable(h, wasOff); err != nil {
		return nil, err
	}
	return h, nil
}

// teardownHost removes a state dir's bridge and nft table and, when no
// other local driver's bridge is left, puts IPv4 forwarding back as it
// was.
func teardownHost(ctx context.Context, st store) error {
	h, err := st.loadHost()
	if err != nil || h == nil {
		return err
	}
	unlock, err := flock(ctx, filepath.Join(runDir, "host.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if err := deleteTable(h.Table); err != nil {
		errs = append(errs, err)
	}
	if err := delLink(ctx, h.Bridge); err != nil {
		errs = append(errs, err)
	}
	if err := restoreForwarding(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return st.removeHost()
}

// enableForwarding turns IPv4 forwarding on. The value from before any
// local driver changed it is kept in runDir; it reports whether that was
// off.
func enableForwarding() (wasOff bool, err error) {
	orig := filepath.Join(runDir, "ip_forward.orig")
	b, err := os.ReadFile(orig)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(ipForwardPath)
		if err != nil {
			return false, fmt.Errorf("read ip_forward: %w", err)
		}
		if err := writeFileAtomic(orig, b, 0o644); err != nil {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		return false, fmt.Errorf("enable ip_forward: %w", err)
	}
	return strings.TrimSpace(string(b)) == "0", nil
}

// restoreForwarding puts back the IPv4 forwarding setting enableForwarding
// found, unless another local driver's bridge still needs forwarding.
func restoreForwarding() error {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), bridgePrefix) {
			return nil
		}
	}
	orig := filepath.Join(runDir, "ip_forward.orig")
	b, err := os.ReadFile(orig)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(ipForwardPath, b, 0o644); err != nil {
		return fmt.Errorf("restore ip_forward: %w", err)
	}
	// The lock file stays: removing a lock others may be waiting on would
	// let two of them hold it at once.
	return os.Remove(orig)
}

// unavailable is the error for a host the driver cannot work on.
func unavailable(format string, args ...any) *driversdk.Error {
	return &driversdk.Error{Code: codeUnavailable, Message: fmt.Sprintf(format, args...)}
}
