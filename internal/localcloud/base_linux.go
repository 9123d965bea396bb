package localcloud

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soulstack/soulstack/driversdk"
)

// ensureBase returns the directory of the named base (see bases), built
// first if the bases dir lacks it: debootstrap into a temporary directory
// next to it, in a mount namespace of its own (so that a killed build
// leaves no mount behind), then the host keys it generated removed and
// the directory renamed into place. Builds of one base are serialized by
// a flock; a finished base is never written again.
func ensureBase(ctx context.Context, cfg Config, name string, log *slog.Logger) (string, error) {
	recipe := bases[name]
	return BuildBase(ctx, cfg.basesDir(), name, recipe.suite, recipe.include, cfg.DebianMirror, log)
}

// strip removes from a built root what no VM may share (its host keys:
// each VM gets its own) and what no VM needs (the downloaded packages).
func strip(root string) error {
	keys, _ := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		_ = os.Remove(d)
	}
	return nil
}

// BuildBase returns dir/name, a Debian root of suite with the packages
// include (a comma-separated list for debootstrap's --include) built
// from mirror if dir lacks it, as ensureBase does for this driver's
// bases. soul-cloud-qemu builds its machine images' roots with it.
func BuildBase(ctx context.Context, dir, name, suite, include, mirror string, log *slog.Logger) (string, error) {
	final := filepath.Join(dir, name)
	ready := func() bool { return exists(filepath.Join(final, "usr/sbin/sshd")) }
	if ready() {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("bases dir: %w", err)
	}
	unlock, err := flock(ctx, filepath.Join(dir, name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if ready() {
		return final, nil
	}
	tool, err := toolPath("debootstrap")
	if err != nil {
		return "", unavailable("base %s is not built yet and debootstrap is not installed (apt-get install debootstrap)", name)
	}
	// Builds that did not finish (the holder of the lock died) are no
	// use: their processes died with their process group.
	stale, _ := filepath.Glob(filepath.Join(dir, name+".building-*"))
	for _, p := range stale {
		_ = os.RemoveAll(p)
	}
	tmp, err := os.MkdirTemp(dir, name+".building-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	start := time.Now()
	log.InfoContext(ctx, "building base", "base", name, "dir", final, "mirror", mirror)
	cmd := exec.CommandContext(ctx, tool, "--variant=minbase", "--include="+include, suite, tmp, mirror)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = []string{"PATH=" + vmPath, "LANG=C.UTF-8"}
	// Its own process group, so that a cancelled build stops all of it
	// (dpkg runs as debootstrap's child), and its own mount namespace, so
	// that the mounts it makes in the target go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: unix.CLONE_NEWNS}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		tail := ""
		if b, rerr := os.ReadFile(logPath); rerr == nil {
			if len(b) > 1500 {
				b = b[len(b)-1500:]
			}
			tail = "; its log ends: " + string(b)
		}
		return "", &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("build base %s (log in %s): debootstrap: %v%s", name, logPath, err, tail)}
	}
	if err := strip(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	log.InfoContext(ctx, "built base", "base", name, "seconds", time.Since(start).Seconds())
	return final, nil
}
