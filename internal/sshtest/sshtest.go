// Package sshtest starts real OpenSSH servers (/usr/sbin/sshd) on loopback
// addresses for tests: each with its own generated ed25519 host key, a
// generated client key authorized to log in, and a config of its own in a
// temporary directory. Servers are stopped, by the PID this package started,
// when the test ends.
//
// The servers run as the test's user; as root they accept logins for root
// and, through NonRootUser and NonRootSudoUser, for unprivileged accounts
// without and with passwordless sudo. StartN starts many servers at once
// for fan-out tests. A machine without sshd fails the test with a message
// pointing to scripts/test, which installs openssh-server.
package sshtest

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/testlog"
)

// SSHD is the server binary the package runs.
const SSHD = "/usr/sbin/sshd"

// Options configure Start. The zero value starts a server on 127.0.0.1 at a
// free port for the current user with fresh keys.
type Options struct {
	// Addr is the loopback address to listen on; empty means 127.0.0.1.
	Addr string
	// Port is the port to listen on; 0 picks a free one. A fixed port lets
	// a test restart a server in the same place.
	Port int
	// User is the account allowed to log in; empty means the current user.
	// As root, any existing account with a POSIX shell works (see
	// NonRootUser).
	User string
	// HostKey is the server's private host key (OpenSSH PEM); nil
	// generates a new ed25519 key.
	HostKey []byte
	// ClientKey is the private key to authorize (OpenSSH PEM); nil
	// generates a new ed25519 key.
	ClientKey []byte
	// Config holds extra sshd_config lines ("LogLevel DEBUG1"). They come
	// first, and sshd keeps the first value it reads for a keyword, so they
	// override the package's settings.
	Config []string
}

// Server is one running sshd.
type Server struct {
	Addr string // listen address, without port
	Port int
	User string // the account the client key logs in as
	// HostKey is the server's public host key in authorized_keys format.
	HostKey string
	// HostPrivateKey is the server's private host key (OpenSSH PEM), to
	// restart a server with the same identity.
	HostPrivateKey []byte
	// ClientKey is the authorized private key (OpenSSH PEM).
	ClientKey []byte
	// Dir holds the config, host key, authorized_keys and pid file.
	Dir string

	extra  []string // extra sshd_config lines
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *testlog.Buffer
	stop   sync.Once
}

// HostPort returns addr:port.
func (s *Server) HostPort() string { return net.JoinHostPort(s.Addr, strconv.Itoa(s.Port)) }

// Log returns what sshd has written to its stderr so far.
func (s *Server) Log() string { return s.stderr.String() }

// Start starts one sshd and waits until it accepts connections. The server
// is stopped when the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	requireSSHD(tb)
	s, err := start(opts)
	if err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	tb.Cleanup(func() { s.cleanup(tb) })
	return s
}

// StartN starts n servers at once, all authorizing the same client key
// (opts.ClientKey, or one generated for all), each at its own port and,
// unless opts.HostKey is set, with its own host key. It suits fan-out tests
// and benchmarks.
func StartN(tb testing.TB, n int, opts Options) []*Server {
	tb.Helper()
	requireSSHD(tb)
	if opts.ClientKey == nil {
		key, _, err := NewKey()
		if err != nil {
			tb.Fatalf("sshtest: %v", err)
		}
		opts.ClientKey = key
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = start(opts) })
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			tb.Cleanup(func() { s.cleanup(tb) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	return servers
}

// Stop stops the server: SIGTERM to the sshd this package started, SIGKILL
// if it has not exited after five seconds. Sessions already open are
// served by their own sshd children until their connections close. Stop is
// idempotent; it also runs when the test ends.
func (s *Server) Stop() {
	s.stop.Do(func() {
		select {
		case <-s.exited:
			return
		default:
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

func (s *Server) cleanup(tb testing.TB) {
	s.Stop()
	if tb.Failed() {
		tb.Logf("sshtest: sshd on %s logged:\n%s", s.HostPort(), s.Log())
	}
	os.RemoveAll(s.Dir)
}

func requireSSHD(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		tb.Fatalf("sshtest: %s not found: run scripts/test, which installs openssh-server (or apt-get install openssh-server)", SSHD)
	}
}

// NewKey generates an ed25519 key pair and returns the private key in
// OpenSSH PEM form and the public key in authorized_keys format.
func NewKey() (private []byte, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate key: %w", err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, "", fmt.Errorf("marshal key: %w", err)
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return nil, "", fmt.Errorf("public key: %w", err)
	}
	return pem.EncodeToMemory(block), authorizedKey(sshPub), nil
}

// PublicKey returns the authorized_keys form of a private key's public half.
func PublicKey(private []byte) (string, error) {
	signer, err := gossh.ParsePrivateKey(private)
	if err != nil {
		return "", fmt.Errorf("parse key: %w", err)
	}
	return authorizedKey(signer.PublicKey()), nil
}

func authorizedKey(k gossh.PublicKey) string {
	return string(bytes.TrimSpace(gossh.MarshalAuthorizedKey(k)))
}

// startAttempts bounds retries when a freshly picked port is taken by
// someone else before sshd binds it.
const startAttempts = 5

func start(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1"
	}
	if opts.User == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("current user: %w", err)
		}
		opts.User = u.Username
	}
	if opts.HostKey == nil {
		k, _, err := NewKey()
		if err != nil {
			return nil, err
		}
		opts.HostKey = k
	}
	if opts.ClientKey == nil {
		k, _, err := NewKey()
		if err != nil {
			return nil, err
		}
		opts.ClientKey = k
	}
	hostPub, err := PublicKey(opts.HostKey)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	clientPub, err := PublicKey(opts.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("client key: %w", err)
	}
	if os.Geteuid() == 0 {
		// sshd refuses to start as root without its privilege
		// separation directory, which only the system's ssh service
		// creates.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("privilege separation dir: %w", err)
		}
	}
	var lastErr error
	for range startAttempts {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(opts.Addr); err != nil {
				return nil, err
			}
		}
		s := &Server{
			Addr: opts.Addr, Port: port, User: opts.User,
			HostKey: hostPub, HostPrivateKey: opts.HostKey, ClientKey: opts.ClientKey,
			extra: opts.Config,
		}
		err := s.launch(clientPub)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if opts.Port != 0 || !strings.Contains(s.Log(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

// launch writes the server's files, starts sshd and waits for its banner.
func (s *Server) launch(clientPub string) error {
	s.stderr = &testlog.Buffer{}
	dir, err := os.MkdirTemp("", "sshtest-")
	if err != nil {
		return err
	}
	s.Dir = dir
	// A non-root login user must be able to read authorized_keys.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"host_ed25519_key", s.HostPrivateKey, 0o600},
		{"authorized_keys", []byte(clientPub + "\n"), 0o644},
		{"sshd_config", []byte(s.config()), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			os.RemoveAll(dir)
			return err
		}
	}
	s.exited = make(chan struct{})
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	s.cmd.Stdout = s.stderr
	s.cmd.Stderr = s.stderr
	s.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// Session children hold the log pipe open while their connections
	// live (a client's pool may keep them for minutes): once sshd itself
	// has exited, Wait stops waiting for them.
	s.cmd.WaitDelay = 500 * time.Millisecond
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("start %s: %w", SSHD, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(10 * time.Second); err != nil {
		s.Stop()
		os.RemoveAll(dir)
		return fmt.Errorf("sshd on %s: %w; its log:\n%s", s.HostPort(), err, s.Log())
	}
	return nil
}

func (s *Server) config() string {
	d := s.Dir
	lines := append([]string(nil), s.extra...)
	lines = append(lines,
		"ListenAddress "+s.HostPort(),
		"HostKey "+filepath.Join(d, "host_ed25519_key"),
		"AuthorizedKeysFile "+filepath.Join(d, "authorized_keys"),
		"PidFile "+filepath.Join(d, "sshd.pid"),
		"AllowUsers "+s.User,
		"StrictModes no",
		"UsePAM no",
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UseDNS no",
		"PrintMotd no",
		"PrintLastLog no",
		"MaxStartups 100:30:200",
		"MaxSessions 10",
		"LogLevel INFO",
		// bash reads ~/.bashrc for commands sshd runs unless it is a
		// nested shell; root's may be slow (pyenv init on these
		// machines), and every test command would pay for it.
		"SetEnv SHLVL=1",
	)
	return strings.Join(lines, "\n") + "\n"
}

// waitReady waits until the server sends its SSH banner.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.exited:
			return errors.New("sshd exited during start")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", timeout)
		}
		if s.banner() {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) banner() bool {
	conn, err := net.DialTimeout("tcp", s.HostPort(), time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ConnectionPIDs returns the PIDs of the server's per-connection sshd
// processes (one per open connection), children of the sshd this package
// started: killing one cuts that connection as a network failure or an
// OOM kill on the host would.
func (s *Server) ConnectionPIDs() ([]int, error) {
	raw, err := os.ReadFile(filepath.Join(s.Dir, "sshd.pid"))
	if err != nil {
		return nil, err
	}
	pid := strings.TrimSpace(string(raw))
	children, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(children)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		pids = append(pids, n)
	}
	return pids, nil
}
