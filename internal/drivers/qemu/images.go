package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
)

// image is what a VM's disk is made on.
type image struct {
	// Disk is the backing file of the VMs' overlays; Format its format
	// (qcow2 or raw) and Size its virtual size in bytes.
	Disk   string `json:"disk"`
	Format string `json:"format"`
	Size   int64  `json:"size"`
	// Kernel, Initrd and Cmdline boot the built image directly; empty for
	// an image with its own boot loader.
	Kernel  string `json:"kernel,omitempty"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
}

// debianPackages are what the debian-bookworm image holds beyond
// Debian's minimal base: its kernel, systemd as init, cloud-init (with
// python3-cffi-backend, which its --include otherwise leaves
// unconfigured), sshd, ifupdown for the network config cloud-init
// renders, and curl for the keeper's userdata.
const debianPackages = "systemd-sysv,linux-image-amd64,cloud-init,python3-cffi-backend,openssh-server,ifupdown,netbase,udev,kmod," +
	"dbus,iproute2,procps,sudo,curl,ca-certificates"

// debianRootGB is the size of the built image's root filesystem; cloud-init
// grows it to the VM's disk_gb at first boot.
const debianRootGB = 2

// resolveImage returns the image a spec names: the debian-bookworm image
// (built the first time), or a cloud image file in one of the config's
// image_dirs, checked with qemu-img.
func (d *Driver) resolveImage(ctx context.Context, cfg Config, spec Spec) (image, error) {
	if spec.Image == ImageDebianBookworm {
		return d.debianImage(ctx, cfg)
	}
	return imageFile(ctx, cfg, spec.Image)
}

// imageFile checks a profile's image path: a regular file (after
// symlinks) inside an allowed directory, qcow2 or raw, with no backing
// file of its own (which could name any file of the host).
func imageFile(ctx context.Context, cfg Config, path string) (image, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return image{}, invalid("image", "%s: %v", path, errors.Unwrap(err))
	}
	allowed := false
	for _, dir := range cfg.ImageDirs {
		if rd, err := filepath.EvalSymlinks(dir); err == nil {
			if rel, err := filepath.Rel(rd, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				allowed = true
			}
		}
	}
	if !allowed {
		return image{}, invalid("image", "%s is not in one of the provider's image_dirs (%s)", path, strings.Join(cfg.ImageDirs, ", "))
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return image{}, invalid("image", "%s is not a regular file", path)
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "info", "--output=json", "--force-share", real).Output()
	if err != nil {
		return image{}, invalid("image", "%s: qemu-img info: %v", path, err)
	}
	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
		Backing     string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return image{}, invalid("image", "%s: qemu-img info: %v", path, err)
	}
	if info.Format != "qcow2" && info.Format != "raw" {
		return image{}, invalid("image", "%s is a %s image; qcow2 and raw are supported", path, info.Format)
	}
	if info.Backing != "" {
		return image{}, invalid("image", "%s has a backing file of its own (%s): flatten it with qemu-img convert", path, info.Backing)
	}
	return image{Disk: real, Format: info.Format, Size: info.VirtualSize}, nil
}

// debianImage returns the debian-bookworm image, building it once: a
// Debian root made with debootstrap from the config's mirror (the local
// driver's base builder), prepared to boot as a VM (fstab, an empty
// machine-id, cloud-init looking only for NoCloud), its kernel and
// initrd copied out, and an ext4 filesystem made from the directory with
// mkfs.ext4 -d (no loop mount) and converted to qcow2. Builds are
// serialized by a flock; a finished image is never written again.
func (d *Driver) debianImage(ctx context.Context, cfg Config) (image, error) {
	dir := filepath.Join(cfg.imagesDir(), ImageDebianBookworm)
	manifest := filepath.Join(dir, "image.json")
	load := func() (image, bool) {
		b, err := os.ReadFile(manifest)
		if err != nil {
			return image{}, false
		}
		var img image
		return img, json.Unmarshal(b, &img) == nil
	}
	if img, ok := load(); ok {
		return img, nil
	}
	if err := os.MkdirAll(cfg.imagesDir(), 0o700); err != nil {
		return image{}, err
	}
	unlock, err := localcloud.Flock(ctx, filepath.Join(cfg.imagesDir(), ImageDebianBookworm+".lock"))
	if err != nil {
		return image{}, err
	}
	defer unlock()
	if img, ok := load(); ok {
		return img, nil
	}
	for _, tool := range []string{"mkfs.ext4", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			return image{}, &driversdk.Error{Code: codeUnavailable, Message: fmt.Sprintf("building the %s image needs %s (apt-get install e2fsprogs qemu-utils)", ImageDebianBookworm, tool)}
		}
	}
	start := time.Now()
	roots := filepath.Join(cfg.imagesDir(), "roots")
	root, err := localcloud.BuildBase(ctx, roots, ImageDebianBookworm, "bookworm", debianPackages, cfg.DebianMirror, d.log())
	if err != nil {
		return image{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return image{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return image{}, err
	}
	if err := prepareRoot(root); err != nil {
		return image{}, fmt.Errorf("prepare %s: %w", root, err)
	}
	img := image{Format: "qcow2", Disk: filepath.Join(dir, "root.qcow2"), Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"), Cmdline: "root=/dev/vda rw console=ttyS0 net.ifnames=0",
		Size: debianRootGB << 30}
	for src, dst := range map[string]string{"vmlinuz-*": img.Kernel, "initrd.img-*": img.Initrd} {
		m, _ := filepath.Glob(filepath.Join(root, "boot", src))
		if len(m) != 1 {
			return image{}, fmt.Errorf("image root %s: want one boot/%s, have %d", root, src, len(m))
		}
		if err := copyFile(m[0], dst); err != nil {
			return image{}, err
		}
	}
	raw := filepath.Join(dir, "root.raw")
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "soulstack-root", "-d", root, raw, strconv.Itoa(debianRootGB)+"G").CombinedOutput(); err != nil {
		return image{}, &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("mkfs.ext4 -d %s: %v: %s", root, err, out)}
	}
	if out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-O", "qcow2", raw, img.Disk).CombinedOutput(); err != nil {
		return image{}, &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("qemu-img convert: %v: %s", err, out)}
	}
	_ = os.Remove(raw)
	b, _ := json.MarshalIndent(img, "", "  ")
	if err := localcloud.WriteFileAtomic(manifest, append(b, '\n')); err != nil {
		return image{}, err
	}
	// The root tree is no use once the image exists.
	_ = os.RemoveAll(root)
	d.log().InfoContext(ctx, "built image", "image", ImageDebianBookworm, "seconds", time.Since(start).Seconds())
	return img, nil
}

// prepareRoot makes a debootstrapped tree bootable as a VM of this driver.
func prepareRoot(root string) error {
	files := map[string]string{
		"etc/fstab":    "/dev/vda / ext4 defaults,discard 0 1\n",
		"etc/hostname": "localhost\n",
		// systemd makes a machine ID at each VM's first boot.
		"etc/machine-id": "",
		// Only NoCloud (the driver's seed) is looked for, and the locale is
		// one the image has (it has no locales package).
		"etc/cloud/cloud.cfg.d/90_soulstack.cfg": "datasource_list: [ NoCloud, None ]\nlocale: C.UTF-8\n",
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(root, "var/lib/dbus/machine-id")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// makeOverlay creates a VM's disk: a qcow2 overlay of size GiB on the
// image's disk, which stays untouched.
func makeOverlay(ctx context.Context, img image, path string, gb int) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", img.Format, "-b", img.Disk, path, strconv.Itoa(gb)+"G").CombinedOutput()
	if err != nil {
		return &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("qemu-img create %s: %v: %s", path, err, out)}
	}
	return nil
}

// growDisk grows a stopped VM's overlay to gb GiB.
func growDisk(ctx context.Context, path string, gb int) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "resize", "-q", path, strconv.Itoa(gb)+"G").CombinedOutput()
	if err != nil {
		return &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("qemu-img resize %s: %v: %s", path, err, out)}
	}
	return nil
}

func (d *Driver) log() *slog.Logger {
	if d.logger != nil {
		return d.logger
	}
	return slog.Default()
}
