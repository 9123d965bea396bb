package ssh

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/transport"
)

// Defaults applied by Target.WithDefaults.
const (
	DefaultPort           = 22
	DefaultAttempts       = 3
	DefaultRetryInterval  = 10 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

// Target is one host to reach: where, as whom, with which key, and which host
// key to expect. The private key stays in memory: nothing in this package
// writes it anywhere or puts it in an error or a log line.
type Target struct {
	Address string // host name or IP
	Port    int    // 0 means 22
	User    string
	// PrivateKey is the client key, PEM or OpenSSH format, unencrypted.
	PrivateKey []byte
	// HostKey is the pinned host key in authorized_keys format
	// ("ssh-ed25519 AAAA… [comment]"). Empty means trust on first use: the
	// presented key is accepted and reported to Options.OnNewHostKey.
	HostKey string
	// Retry is how often and how far apart connecting is tried; booting
	// VMs need a few tries. Authentication and host key failures are never
	// retried, but for RetryAuth.
	Retry RetryPolicy
	// RetryAuth retries authentication failures too, within Retry: a VM
	// whose cloud-init has not yet written the user or its authorized
	// key refuses the key for a while after sshd answers. Host key
	// mismatches are never retried.
	RetryAuth bool
	// ConnectTimeout bounds one attempt: TCP dial plus SSH handshake.
	// 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// RetryPolicy says how many times a connection is attempted and how long to
// wait between attempts (transport.RetryPolicy).
type RetryPolicy = transport.RetryPolicy

// Addr returns host:port, with the default port when none is set.
func (t Target) Addr() string {
	port := t.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort(t.Address, strconv.Itoa(port))
}

// WithDefaults returns a copy of t with zero Port, Retry and ConnectTimeout
// replaced by their defaults.
func (t Target) WithDefaults() Target {
	if t.Port == 0 {
		t.Port = DefaultPort
	}
	if t.Retry.Attempts == 0 {
		t.Retry.Attempts = DefaultAttempts
	}
	if t.Retry.Interval == 0 {
		t.Retry.Interval = DefaultRetryInterval
	}
	if t.ConnectTimeout == 0 {
		t.ConnectTimeout = DefaultConnectTimeout
	}
	return t
}

// Validate reports the first unusable field of t, wrapping ErrInvalidTarget.
// It changes nothing and never quotes the private key.
func (t Target) Validate() error {
	_, _, err := t.parse()
	return err
}

// String returns user@host:port; it is safe to log.
func (t Target) String() string { return t.User + "@" + t.Addr() }

// parse validates t and returns its signer and pinned host key (nil when
// none is pinned).
func (t Target) parse() (gossh.Signer, gossh.PublicKey, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ssh target %s: %w: %s", t, ErrInvalidTarget, fmt.Sprintf(format, args...))
	}
	switch {
	case t.Address == "":
		return nil, nil, bad("address is empty")
	case t.Port < 0 || t.Port > 65535:
		return nil, nil, bad("port %d out of range", t.Port)
	case t.User == "":
		return nil, nil, bad("user is empty")
	case len(t.PrivateKey) == 0:
		return nil, nil, bad("private key is empty")
	case t.Retry.Attempts < 0 || t.Retry.Interval < 0 || t.ConnectTimeout < 0:
		return nil, nil, bad("negative retry or timeout")
	}
	signer, err := gossh.ParsePrivateKey(t.PrivateKey)
	if err != nil {
		// The parser's messages name the problem, never the key bytes;
		// still, say only what kind of failure it was.
		if _, ok := err.(*gossh.PassphraseMissingError); ok {
			return nil, nil, bad("private key is passphrase-protected")
		}
		return nil, nil, bad("private key does not parse")
	}
	if t.HostKey == "" {
		return signer, nil, nil
	}
	pinned, _, _, _, err := gossh.ParseAuthorizedKey([]byte(t.HostKey))
	if err != nil {
		return nil, nil, bad("pinned host key does not parse: %v", err)
	}
	return signer, pinned, nil
}

// authorizedKey renders a public key in authorized_keys format without a
// trailing newline, the form Target.HostKey takes.
func authorizedKey(key gossh.PublicKey) string {
	return string(bytes.TrimSpace(gossh.MarshalAuthorizedKey(key)))
}
