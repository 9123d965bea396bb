package secret

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrInvalidRef is returned for a credentials reference that is malformed or
// uses an unknown scheme.
var ErrInvalidRef = errors.New("invalid credentials reference")

// Ref is a parsed credentials reference: env:NAME, file:/abs/path,
// vault:<path>#<field> or credential:NAME (a secret in the credentials
// registry of the project whose object holds the reference). A Ref names
// a secret; it never holds one.
type Ref struct {
	Scheme string // env, file, vault or credential
	Name   string // variable name, file path, vault path or credential name
	Field  string // vault field
}

// Local reports whether the reference reads the keeper's own machine (a
// file or an environment variable): only keeper admins may write one.
func (r Ref) Local() bool { return r.Scheme == "env" || r.Scheme == "file" }

var (
	envName        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	credentialName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ParseRef parses and validates a credentials reference. The error wraps
// ErrInvalidRef and says what is wrong in words a user can act on.
func ParseRef(s string) (Ref, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Ref{}, fmt.Errorf("%w: %q has no scheme; use credential:NAME, env:NAME, file:/path or vault:<path>#<field>", ErrInvalidRef, s)
	}
	switch scheme {
	case "env":
		if !envName.MatchString(rest) {
			return Ref{}, fmt.Errorf("%w: env:%s is not a valid environment variable name", ErrInvalidRef, rest)
		}
		return Ref{Scheme: scheme, Name: rest}, nil
	case "file":
		if !filepath.IsAbs(rest) || filepath.Clean(rest) != rest {
			return Ref{}, fmt.Errorf("%w: file:%s must be an absolute, clean path", ErrInvalidRef, rest)
		}
		return Ref{Scheme: scheme, Name: rest}, nil
	case "vault":
		path, field, ok := strings.Cut(rest, "#")
		if !ok || path == "" || field == "" || strings.ContainsAny(path, " \t\n") {
			return Ref{}, fmt.Errorf("%w: vault:%s must look like vault:<path>#<field>", ErrInvalidRef, rest)
		}
		return Ref{Scheme: scheme, Name: path, Field: field}, nil
	case "credential":
		if !credentialName.MatchString(rest) {
			return Ref{}, fmt.Errorf("%w: credential:%s is not a credential name (lowercase letters, digits and -)", ErrInvalidRef, rest)
		}
		return Ref{Scheme: scheme, Name: rest}, nil
	default:
		return Ref{}, fmt.Errorf("%w: unknown scheme %q; use credential:, env:, file: or vault:", ErrInvalidRef, scheme)
	}
}

// String returns the reference in its canonical text form.
func (r Ref) String() string {
	if r.Scheme == "vault" {
		return "vault:" + r.Name + "#" + r.Field
	}
	return r.Scheme + ":" + r.Name
}

// Resolve reads the secret a local reference names (env: and file:). It
// registers nothing: whoever resolves decides where the value is masked
// (Keeper.Register for the keeper's own secrets, a run's Set for a run's). vault:
// references need a Vault client and are resolved by the keeper's resolver.
func (r Ref) Resolve() (string, error) {
	var v string
	switch r.Scheme {
	case "env":
		val, ok := os.LookupEnv(r.Name)
		if !ok {
			return "", fmt.Errorf("resolve %s: environment variable is not set", r)
		}
		v = val
	case "file":
		b, err := os.ReadFile(r.Name)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", r, err)
		}
		v = strings.TrimRight(string(b), "\r\n")
	default:
		return "", fmt.Errorf("resolve %s: scheme %q is not resolvable here", r, r.Scheme)
	}
	return v, nil
}
