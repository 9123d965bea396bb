// Package qemutest helps tests that make QEMU machines with
// soul-cloud-qemu: whether this host can, where the built images are
// cached between runs, and the check that a state dir left nothing behind.
package qemutest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// EnvRequire, set to 1 (scripts/test sets it), makes a host that cannot
// run QEMU machines fail the tests that need them instead of skipping
// them.
const EnvRequire = "SOULSTACK_TEST_QEMU"

// EnvImages names the directory where tests keep the images the driver
// builds (debian-bookworm takes minutes to build; it is built once).
const EnvImages = "SOULSTACK_TEST_QEMU_IMAGES"

// Require skips (or, with EnvRequire=1, fails) t unless this host can run
// the driver's VMs: Linux, root, QEMU, qemu-img, /dev/net/tun.
func Require(t testing.TB) {
	t.Helper()
	why := ""
	switch {
	case runtime.GOOS != "linux":
		why = "QEMU machines are made on Linux only"
	case os.Geteuid() != 0:
		why = "soul-cloud-qemu needs root"
	}
	if why == "" {
		for _, tool := range []string{"qemu-system-x86_64", "qemu-img"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = tool + " is not installed (apt-get install qemu-system-x86 qemu-utils)"
			}
		}
	}
	if why == "" {
		if _, err := os.Stat("/dev/net/tun"); err != nil {
			why = "no /dev/net/tun"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but %s", EnvRequire, why)
	}
	t.Skip(why)
}

// RequireImageBuild is Require plus what building the debian-bookworm
// image needs (debootstrap, mkfs.ext4), unless it is built already.
func RequireImageBuild(t testing.TB) {
	t.Helper()
	Require(t)
	if _, err := os.Stat(filepath.Join(ImagesDir(), "debian-bookworm", "image.json")); err == nil {
		return
	}
	for _, tool := range []string{"debootstrap", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(EnvRequire) == "1" {
				t.Fatalf("%s=1 but %s is not installed", EnvRequire, tool)
			}
			t.Skipf("building the debian-bookworm image needs %s", tool)
		}
	}
}

// ImagesDir is where tests keep built images: $SOULSTACK_TEST_QEMU_IMAGES,
// else /var/cache/soulstack-test/qemu-images.
func ImagesDir() string {
	if d := os.Getenv(EnvImages); d != "" {
		return d
	}
	return "/var/cache/soulstack-test/qemu-images"
}

// NothingLeft fails t if the state dir still has VMs, a host network, a
// QEMU process or a tap device of a VM it made.
func NothingLeft(t testing.TB, state string) {
	t.Helper()
	if ents, _ := os.ReadDir(filepath.Join(state, "vms")); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("VM dirs left in %s: %v", state, names)
	}
	if _, err := os.Stat(filepath.Join(state, "host.json")); err == nil {
		t.Errorf("the host network of %s is still recorded (host.json)", state)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(state)))
	if br := "soulbr" + hex.EncodeToString(sum[:4]); exists("/sys/class/net/" + br) {
		t.Errorf("the bridge %s of %s is still there", br, state)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("qemu")) && bytes.Contains(b, []byte(state+"/")) {
			t.Errorf("a QEMU process of %s is still running: %s", state, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	b, _ := os.ReadFile(filepath.Join(state, "destroyed"))
	for _, id := range strings.Fields(string(b)) {
		tap := "soulq" + strings.TrimPrefix(id, "vm-")
		if exists("/sys/class/net/" + tap) {
			t.Errorf("tap %s of destroyed VM %s is still there", tap, id)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
