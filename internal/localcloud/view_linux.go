package localcloud

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A VM without a base_root is built on a view of the host's system
// directories, not on the host's live /: the VM's / is a directory of its
// own (vms/<id>/upper) holding empty /root, /home, /tmp, /srv, /opt, /mnt…
// and the host's top-level symlinks (bin -> usr/bin), and each of
// viewDirs the host has (a directory, not a symlink) is an overlay of its
// own in the VM, lower layer the host's directory, upper layer
// vms/<id>/layers/<dir>/upper. Nothing else of the host is in the VM:
// not the keeper's data dir, its plugin dir, the driver's state dir (the
// other VMs' layers), /root, /home, /work or any checkout, /tmp, /srv,
// /opt, /mnt or a top-level directory made later. Within the view,
// prepareView hides what a system directory holds of the host's own
// (secrets, logs, data): see etcHidden, etcEmptied, varKept, varEmptied,
// varHidden and dataDirs. Those lists name where Debian hosts usually keep
// secrets; a secret elsewhere under /usr, /etc or a package's /var/lib
// directory is visible to VMs.
var viewDirs = []string{"usr", "etc", "var", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// viewEmpty are the top-level directories a VM gets empty (with the
// host's mode and owner), whatever the host has in them.
var viewEmpty = []string{"root", "home", "tmp", "run", "proc", "sys", "dev", "srv", "opt", "mnt", "media", "boot"}

// etcHidden are paths under /etc the VM does not see: the host's
// password hashes and their backups, its SSH host keys (public halves
// too: a VM's /etc/ssh shows its own, written by prepare), TLS private keys,
// old passwords, and Soul Stack's own config. shadow and gshadow are
// replaced by copies without passwords (sanitizedShadow), not hidden, so
// that useradd and sudo keep working.
var etcHidden = []string{
	"shadow-", "gshadow-", "security/opasswd",
	"ssh/ssh_host_rsa_key", "ssh/ssh_host_ecdsa_key", "ssh/ssh_host_ed25519_key", "ssh/ssh_host_dsa_key",
	"ssh/ssh_host_rsa_key.pub", "ssh/ssh_host_ecdsa_key.pub", "ssh/ssh_host_ed25519_key.pub", "ssh/ssh_host_dsa_key.pub",
	"krb5.keytab", "ipsec.secrets", "ppp/chap-secrets", "ppp/pap-secrets", "docker/key.json",
}

// etcEmptied are directories under /etc a VM gets empty: where hosts keep
// private keys and credentials (TLS, VPN, Wi-Fi, cluster admin configs).
var etcEmptied = []string{
	"ssl/private", "letsencrypt", "wireguard", "openvpn", "NetworkManager/system-connections",
	"wpa_supplicant", "sssd", "kubernetes", "rancher", "cni",
}

// varHidden are files of package-owned /var/lib directories that hold a
// host secret: systemd's credential key and random seed.
var varHidden = []string{
	"lib/systemd/credential.secret", "lib/systemd/random-seed", "lib/samba/private",
}

// etcHiddenPrefixes hide every /etc entry whose name starts with one of
// them (keeper.yml and its keys, wherever an admin put them under /etc).
var etcHiddenPrefixes = []string{"soulstack"}

// varKept are the directories of /var a VM sees; every other entry of
// the host's /var is hidden, and those of varEmptied are there but empty.
// In /var/lib only what an installed package owns stays (dpkg's lists),
// minus dataDirs.
var (
	varKept    = []string{"cache", "lib", "lock", "run", "spool"}
	varEmptied = []string{"tmp", "log", "backups", "mail", "local", "opt", "spool/cron", "spool/mail", "cache/private"}
	// dataDirs are package-owned directories of /var/lib and /etc that
	// hold a service's data rather than the package's: the VM gets them
	// empty (PostgreSQL's clusters are the host's, a VM makes its own).
	dataDirs = []string{"var/lib/postgresql", "etc/postgresql", "var/lib/mysql", "var/lib/docker", "var/lib/containerd",
		"var/lib/redis", "var/lib/private", "var/lib/sss", "var/lib/krb5kdc", "var/lib/ldap"}
)

// viewLayers returns the viewDirs that are directories on the host: the
// VM mounts an overlay on each.
func viewLayers() []string {
	var out []string
	for _, d := range viewDirs {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// prepareView lays out a VM's top directory (top) and the upper layers
// (layers/<dir>/upper and work) of its view of the host, and hides what
// the VM must not see in them.
func prepareView(top, layers string) error {
	for _, d := range viewDirs {
		fi, err := os.Lstat("/" + d)
		if err != nil {
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			to, err := os.Readlink("/" + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(to, filepath.Join(top, d)); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			continue
		}
		if !fi.IsDir() {
			continue
		}
		if err := mkdirLike(filepath.Join(top, d), "/"+d); err != nil {
			return err
		}
		for _, sub := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(layers, d, sub), 0o755); err != nil {
				return err
			}
		}
		if err := mkdirLike(filepath.Join(layers, d, "upper"), "/"+d); err != nil {
			return err
		}
	}
	for _, d := range viewEmpty {
		if err := mkdirLike(filepath.Join(top, d), "/"+d); err != nil {
			return err
		}
	}
	etc := filepath.Join(layers, "etc", "upper")
	if exists(etc) {
		if err := hideEtc(etc); err != nil {
			return fmt.Errorf("hide the host's secrets in /etc: %w", err)
		}
	}
	if v := filepath.Join(layers, "var", "upper"); exists(v) {
		if err := hideVar(v); err != nil {
			return fmt.Errorf("hide the host's data in /var: %w", err)
		}
	}
	for _, d := range dataDirs {
		name, rel, _ := strings.Cut(d, "/")
		if exists(filepath.Join(layers, name)) {
			if err := opaque(filepath.Join(layers, name, "upper"), "/"+name, rel); err != nil {
				return err
			}
		}
	}
	return nil
}

func hideEtc(upper string) error {
	for _, p := range etcHidden {
		if err := whiteout(upper, "/etc", p); err != nil {
			return err
		}
	}
	for _, p := range etcEmptied {
		if err := opaque(upper, "/etc", p); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir("/etc")
	if err != nil {
		return err
	}
	for _, e := range ents {
		for _, pre := range etcHiddenPrefixes {
			if strings.HasPrefix(e.Name(), pre) {
				if err := whiteout(upper, "/etc", e.Name()); err != nil {
					return err
				}
			}
		}
	}
	for _, name := range []string{"shadow", "gshadow"} {
		b, err := os.ReadFile(filepath.Join("/etc", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		fi, err := os.Stat(filepath.Join("/etc", name))
		if err != nil {
			return err
		}
		l := layer{lower: "/etc", upper: upper}
		if err := l.write(name, sanitizedShadow(b), fi.Mode().Perm()); err != nil {
			return err
		}
		if s, ok := fi.Sys().(*unix.Stat_t); ok {
			if err := os.Chown(filepath.Join(upper, name), int(s.Uid), int(s.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sanitizedShadow is a shadow or gshadow file with every password field
// (the second) replaced by "*": the accounts and groups stay, no hash
// does. "*" rather than "!": sshd without PAM refuses "!" as locked.
func sanitizedShadow(b []byte) []byte {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) == 3 {
			f[1] = "*"
		}
		out.WriteString(strings.Join(f, ":") + "\n")
	}
	return []byte(out.String())
}

func hideVar(upper string) error {
	ents, err := os.ReadDir("/var")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !slices.Contains(varKept, e.Name()) && !slices.Contains(varEmptied, e.Name()) {
			if err := whiteout(upper, "/var", e.Name()); err != nil {
				return err
			}
		}
	}
	for _, p := range varEmptied {
		if err := opaque(upper, "/var", p); err != nil {
			return err
		}
	}
	for _, p := range varHidden {
		if err := whiteout(upper, "/var", p); err != nil {
			return err
		}
	}
	owned, err := packageOwned("/var/lib/")
	if err != nil {
		return err
	}
	ents, err = os.ReadDir("/var/lib")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !owned[e.Name()] {
			if err := whiteout(upper, "/var", "lib/"+e.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// packageOwned returns the names directly under prefix (a directory with
// a trailing slash) that an installed package owns, from dpkg's file
// lists. Reading them all takes a while, so the answer is kept until
// dpkg's info dir changes (dpkg replaces a list by renaming).
func packageOwned(prefix string) (map[string]bool, error) {
	const info = "/var/lib/dpkg/info"
	fi, err := os.Stat(info)
	if err != nil {
		return map[string]bool{"dpkg": true}, nil
	}
	ownedCache.Lock()
	defer ownedCache.Unlock()
	if c, ok := ownedCache.m[prefix]; ok && c.mtime.Equal(fi.ModTime()) {
		return c.names, nil
	}
	lists, err := filepath.Glob(filepath.Join(info, "*.list"))
	if err != nil {
		return nil, err
	}
	owned := map[string]bool{"dpkg": true}
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				name, _, _ := strings.Cut(rest, "/")
				owned[name] = true
			}
		}
	}
	if ownedCache.m == nil {
		ownedCache.m = map[string]ownedNames{}
	}
	ownedCache.m[prefix] = ownedNames{mtime: fi.ModTime(), names: owned}
	return owned, nil
}

type ownedNames struct {
	mtime time.Time
	names map[string]bool
}

var ownedCache struct {
	sync.Mutex
	m map[string]ownedNames
}

// whiteout hides lower/rel in an overlay whose upper layer is upper.
// Nothing happens when the lower layer lacks it.
func whiteout(upper, lower, rel string) error {
	if _, err := os.Lstat(filepath.Join(lower, rel)); err != nil {
		return nil
	}
	l := layer{lower: lower, upper: upper}
	if err := l.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	p := filepath.Join(upper, rel)
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("whiteout %s: %w", filepath.Join(lower, rel), err)
	}
	return nil
}

// opaque makes lower/rel, when it is a directory, an empty directory of
// the same mode and owner in the overlay.
func opaque(upper, lower, rel string) error {
	if fi, err := os.Stat(filepath.Join(lower, rel)); err != nil || !fi.IsDir() {
		return nil
	}
	if fi, err := os.Lstat(filepath.Join(upper, rel)); err == nil && !fi.IsDir() {
		return nil // whited out already
	}
	l := layer{lower: lower, upper: upper}
	if err := l.mkdirs(rel); err != nil {
		return err
	}
	if err := unix.Setxattr(filepath.Join(upper, rel), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		return fmt.Errorf("make %s empty in the VM: %w", filepath.Join(lower, rel), err)
	}
	return nil
}

// mkdirLike makes dir with the mode and owner of like (0755 root when
// like is missing).
func mkdirLike(dir, like string) error {
	mode, uid, gid := os.FileMode(0o755), 0, 0
	if fi, err := os.Stat(like); err == nil && fi.IsDir() {
		mode = fi.Mode().Perm() | fi.Mode()&(os.ModeSticky|os.ModeSetgid)
		if s, ok := fi.Sys().(*unix.Stat_t); ok {
			uid, gid = int(s.Uid), int(s.Gid)
		}
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// mountView mounts a VM's view of the host at merged (in the init's mount
// namespace): its top directory, bound there, and an overlay per layer.
func mountView(bc bootConfig, merged string) error {
	top := filepath.Join(bc.Dir, "upper")
	if err := unix.Mount(top, merged, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the VM's root: %w", err)
	}
	if err := unix.Mount("", merged, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the VM's root nodev: %w", err)
	}
	for _, d := range bc.Layers {
		l := filepath.Join(bc.Dir, "layers", d)
		opts := fmt.Sprintf("lowerdir=/%s,upperdir=%s,workdir=%s", d, filepath.Join(l, "upper"), filepath.Join(l, "work"))
		if err := unix.Mount("soulstack-"+d, filepath.Join(merged, d), "overlay", unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount the view of /%s (%s): %w", d, opts, err)
		}
	}
	return nil
}
