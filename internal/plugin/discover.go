package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/soulstack/soulstack/driversdk"
)

// BinaryPrefix starts the name of every CloudDriver plugin executable:
// driver "local" is served by soul-cloud-local.
const BinaryPrefix = "soul-cloud-"

// driverName is the grammar of a driver name: it becomes part of a file
// name, so nothing that could leave the plugin dir.
var driverName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// discover returns the path of the executable serving driver name: dir's
// soul-cloud-<name>, or, only when pathLookup is set and dir has none, the
// one on $PATH. Either must pass trusted; nothing is executed here.
func discover(dir, name string, pathLookup bool) (string, error) {
	if !driverName.MatchString(name) {
		return "", &driversdk.Error{
			Code:    driversdk.CodeDriverNotFound,
			Message: fmt.Sprintf("%q is not a valid driver name (lowercase letters, digits, - and _)", name),
		}
	}
	file := BinaryPrefix + name
	if dir != "" {
		p := filepath.Join(dir, file)
		if _, err := os.Lstat(p); err == nil {
			return p, trusted(name, p)
		}
	}
	if pathLookup {
		if p, err := exec.LookPath(file); err == nil {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
			return p, trusted(name, p)
		}
	}
	where := "the plugin dir " + dir
	switch {
	case dir == "" && pathLookup:
		where = "$PATH"
	case dir == "":
		where = "no plugin dir (and $PATH lookup is off)"
	case pathLookup:
		where += " or $PATH"
	}
	msg := fmt.Sprintf("driver %q: no executable %s in %s", name, file, where)
	if !pathLookup {
		msg += "; install it there (plugin_path_lookup: true also searches $PATH)"
	}
	return "", &driversdk.Error{Code: driversdk.CodeDriverNotFound, Message: msg}
}

// trusted checks that only the keeper's user or root can change what
// running path executes: the file (after symbolic links) and the
// directories holding the link and the file must be owned by the keeper's
// effective uid or by root and not be writable by group or others. The
// file must be a regular executable. The error is a driver.untrusted (or
// driver.not_found) *driversdk.Error naming the path and the problem.
func trusted(name, path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return &driversdk.Error{Code: driversdk.CodeDriverNotFound, Message: fmt.Sprintf("driver %q: %s: %v", name, path, err)}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return &driversdk.Error{Code: driversdk.CodeDriverNotFound, Message: fmt.Sprintf("driver %q: %s: %v", name, real, err)}
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return &driversdk.Error{Code: driversdk.CodeDriverNotFound, Message: fmt.Sprintf("driver %q: %s is not an executable file", name, real)}
	}
	if err := safeOwnerAndMode(real, fi); err != nil {
		return untrusted(name, err)
	}
	dirs := []string{filepath.Dir(path)}
	if d := filepath.Dir(real); d != dirs[0] {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		di, err := os.Stat(d)
		if err != nil {
			return untrusted(name, err)
		}
		if err := safeOwnerAndMode(d, di); err != nil {
			return untrusted(name, err)
		}
	}
	return nil
}

var errUnsafe = errors.New("unsafe")

// safeOwnerAndMode reports why fi (of path) could be changed by someone
// other than the keeper's user or root, or nil.
func safeOwnerAndMode(path string, fi fs.FileInfo) error {
	kind := "file"
	if fi.IsDir() {
		kind = "directory"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: cannot read the owner of %s %s", errUnsafe, kind, path)
	}
	if euid := uint32(os.Geteuid()); st.Uid != euid && st.Uid != 0 {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not by the keeper's user (uid %d) or root", errUnsafe, kind, path, st.Uid, euid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		who := "group"
		if perm&0o002 != 0 {
			who = "world"
		}
		return fmt.Errorf("%w: %s %s is %s-writable (mode %04o): chmod go-w it", errUnsafe, kind, path, who, perm)
	}
	return nil
}

func untrusted(name string, err error) error {
	msg := err.Error()
	if errors.Is(err, errUnsafe) {
		msg = msg[len(errUnsafe.Error())+2:]
	}
	return &driversdk.Error{
		Code:    driversdk.CodeDriverUntrusted,
		Message: fmt.Sprintf("driver %q not started: %s", name, msg),
	}
}
