package secret

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrOutOfReach is wrapped by Reach.Check's errors: a well-formed
// reference that a project's provider or soul may not resolve — a file
// outside the allowed directories or inside the keeper's own, a variable
// not allowed or the keeper's own, a Vault path outside the project's
// prefix.
var ErrOutOfReach = errors.New("credentials reference is out of reach")

// ErrEndpointNotAllowed is a provider whose config names an endpoint that
// keeper.yml does not allow its driver: the endpoint would receive the
// provider's credentials and its VMs' userdata.
var ErrEndpointNotAllowed = errors.New("endpoint not allowed")

// Reach is what the secrets of a project's providers and souls may be
// read from: the keeper's machine only where a keeper admin allowed it,
// the keeper's own secrets never. The zero Reach allows no file: or env:
// reference and any vault: path.
type Reach struct {
	// Files are the directories file: references may name files under.
	Files []string
	// Env are the variables env: references may name; a trailing *
	// matches a prefix.
	Env []string
	// Keeper are the keeper's own: directories and files never read
	// (its data dir), whatever Files says.
	Keeper []string
	// KeeperRefs are the references the keeper's configuration holds
	// (its data key, Vault token, …), never resolvable for a project.
	KeeperRefs []string
	// VaultPrefix returns the path a project's vault: references must lie
	// under; nil or "" means any path.
	VaultPrefix func(project string) string
}

// Check reports whether project may resolve r, and for a file: reference
// returns the path to read: the file's real path, symlinks resolved, so
// that a link from an allowed directory into the keeper's own is refused.
// credential: references are always in reach (they resolve in project's
// own registry).
func (rc Reach) Check(project string, r Ref) (path string, err error) {
	for _, k := range rc.KeeperRefs {
		if kr, err := ParseRef(k); err == nil && kr == r {
			return "", fmt.Errorf("%w: %s is one of the keeper's own secrets", ErrOutOfReach, r)
		}
	}
	switch r.Scheme {
	case "file":
		return rc.file(r)
	case "env":
		for _, p := range rc.Env {
			if p == r.Name || p == "*" || (strings.HasSuffix(p, "*") && strings.HasPrefix(r.Name, strings.TrimSuffix(p, "*"))) {
				return "", nil
			}
		}
		return "", fmt.Errorf("%w: env:%s is not among keeper.yml's credentials.env", ErrOutOfReach, r.Name)
	case "vault":
		if rc.VaultPrefix == nil {
			return "", nil
		}
		if p := rc.VaultPrefix(project); p != "" && !UnderPrefix(r.Name, p) {
			return "", fmt.Errorf("%w: %s is outside project %s's Vault prefix %s", ErrOutOfReach, r, project, p)
		}
		return "", nil
	}
	return "", nil
}

// UnderPrefix reports whether the Vault path lies under prefix (which
// ends with /): a clean path (no . or .. segment, no doubled /) that
// starts with it. An empty prefix holds nothing.
func UnderPrefix(vaultPath, prefix string) bool {
	return prefix != "" && strings.HasPrefix(vaultPath, prefix) && path.Clean("/"+vaultPath) == "/"+vaultPath
}

// file checks a file: reference (see Check).
func (rc Reach) file(r Ref) (string, error) {
	real, err := filepath.EvalSymlinks(r.Name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: resolve %s: the file does not exist", ErrUnresolved, r)
		}
		return "", fmt.Errorf("%w: resolve %s: %w", ErrUnresolved, r, err)
	}
	keeper := append([]string{"/proc", "/sys"}, rc.Keeper...)
	for _, k := range keeper {
		for _, kp := range realPaths(k) {
			if within(real, kp) {
				return "", fmt.Errorf("%w: %s is inside the keeper's own %s", ErrOutOfReach, r, k)
			}
		}
	}
	for _, kr := range rc.KeeperRefs {
		if p, err := ParseRef(kr); err == nil && p.Scheme == "file" {
			for _, kp := range realPaths(p.Name) {
				if real == kp {
					return "", fmt.Errorf("%w: %s is one of the keeper's own secrets", ErrOutOfReach, r)
				}
			}
		}
	}
	for _, d := range rc.Files {
		for _, dp := range realPaths(d) {
			if within(real, dp) && real != dp {
				return real, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s is not under keeper.yml's credentials.files", ErrOutOfReach, r)
}

// realPaths is p made absolute, as written and with its symlinks resolved
// (when it exists): a keeper started with data_dir ./.keeper still keeps
// /its/working/dir/.keeper out of reach.
func realPaths(p string) []string {
	abs, err := filepath.Abs(p)
	if err != nil {
		abs = filepath.Clean(p)
	}
	out := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		if r, err := filepath.Abs(real); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
