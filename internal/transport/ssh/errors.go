package ssh

import (
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/transport"
)

// Sentinel errors. Callers branch on them with errors.Is; Code (and
// transport.Code) maps each one to the stable dotted code that runs and the
// API report. ErrUnreachable, ErrDisconnected and ErrInvalidCommand also
// match the transport package's classes of the same name.
var (
	// ErrUnreachable means no SSH connection could be set up within the
	// target's retry policy: the host refused or dropped the connection, or
	// the TCP dial or SSH handshake timed out.
	ErrUnreachable error = transport.NewSentinel("host unreachable", "ssh.unreachable", transport.ErrUnreachable)
	// ErrAuth means the server rejected the private key. It is never retried.
	ErrAuth error = transport.NewSentinel("authentication failed", "ssh.auth_failed", nil)
	// ErrHostKeyMismatch means the server presented a host key other than
	// the pinned one. It is never retried and never silently accepted.
	ErrHostKeyMismatch error = transport.NewSentinel("host key mismatch", "ssh.host_key_mismatch", nil)
	// ErrInvalidTarget means the target itself is unusable: no address or
	// user, an unparsable private key or pinned host key.
	ErrInvalidTarget error = transport.NewSentinel("invalid target", "ssh.invalid_target", nil)
	// ErrInvalidCommand means a command cannot be sent: no argv or script,
	// an invalid environment variable name, a NUL byte, or a command line
	// longer than a remote shell accepts.
	ErrInvalidCommand error = transport.NewSentinel("invalid command", "ssh.invalid_command", transport.ErrInvalidCommand)
	// ErrSudoPassword means sudo asked for a password; commands run with
	// sudo -n need a NOPASSWD rule for the connecting user.
	ErrSudoPassword error = transport.NewSentinel("sudo requires a password", "ssh.sudo_password_required", nil)
	// ErrSudoMissing means the command needed sudo and the host has none.
	ErrSudoMissing error = transport.NewSentinel("sudo is not installed", "ssh.sudo_missing", nil)
	// ErrDisconnected means the connection failed while a command ran, so
	// its outcome is unknown.
	ErrDisconnected error = transport.NewSentinel("connection lost", "ssh.disconnected", transport.ErrDisconnected)
	// ErrClosed means the pool or client was already closed.
	ErrClosed error = transport.NewSentinel("closed", "ssh.closed", nil)
)

// codes maps each sentinel to its stable dotted code.
var codes = []struct {
	err  error
	code string
}{
	{ErrHostKeyMismatch, "ssh.host_key_mismatch"},
	{ErrAuth, "ssh.auth_failed"},
	{ErrUnreachable, "ssh.unreachable"},
	{ErrInvalidTarget, "ssh.invalid_target"},
	{ErrInvalidCommand, "ssh.invalid_command"},
	{ErrSudoPassword, "ssh.sudo_password_required"},
	{ErrSudoMissing, "ssh.sudo_missing"},
	{ErrDisconnected, "ssh.disconnected"},
	{ErrClosed, "ssh.closed"},
}

// Code returns the stable dotted code of an error from this package, such
// as "ssh.host_key_mismatch", or "" when err carries none of its sentinels.
func Code(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// ConnectError reports a failed connection to a target. Kind is one of
// ErrUnreachable, ErrAuth, ErrHostKeyMismatch or ErrInvalidTarget; Err is the
// last underlying failure. It never holds key material.
type ConnectError struct {
	Addr     string // host:port
	User     string
	Attempts int // connection attempts made
	Kind     error
	Err      error
}

func (e *ConnectError) Error() string {
	msg := fmt.Sprintf("ssh connect %s@%s: %v", e.User, e.Addr, e.Kind)
	if errors.Is(e.Kind, ErrUnreachable) {
		msg += fmt.Sprintf(" after %d attempt", e.Attempts)
		if e.Attempts != 1 {
			msg += "s"
		}
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// TransportCode returns the code of the failure's kind (transport.Coder).
func (e *ConnectError) TransportCode() string { return Code(e) }

// Unwrap returns both the kind and the cause, so errors.Is matches the
// sentinel and errors.As finds a HostKeyMismatchError.
func (e *ConnectError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// HostKeyMismatchError carries the fingerprints (SHA256, as ssh-keygen -l
// prints them) of the pinned key and of the key the server presented.
type HostKeyMismatchError struct {
	Addr      string
	Pinned    string // fingerprint of the pinned key
	Presented string // fingerprint of the presented key
	// PresentedKey is the presented key in authorized_keys format, for an
	// operator who decides to re-pin after checking the host.
	PresentedKey string
}

func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("host key of %s is %s, pinned %s", e.Addr, e.Presented, e.Pinned)
}

// Is reports whether target is ErrHostKeyMismatch.
func (e *HostKeyMismatchError) Is(target error) bool { return target == ErrHostKeyMismatch }

// TransportCode returns "ssh.host_key_mismatch" (transport.Coder).
func (e *HostKeyMismatchError) TransportCode() string { return "ssh.host_key_mismatch" }
