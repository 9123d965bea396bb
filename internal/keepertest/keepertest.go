// Package keepertest starts real keepers for tests, the way the keeper
// runs: Start serves one in the test's process (keeper.Run, on loopback,
// its own data directory, SQLite unless the config says otherwise), and
// Serve runs the keeper binary (Build) as a process of its own. Both wait
// until the keeper listens and stop it when the test ends.
package keepertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
	"github.com/soulstack/soulstack/internal/testlog"
)

// Keeper is a keeper serving in the test's process.
type Keeper struct {
	// Config is the keeper's configuration, defaults applied.
	Config config.Config
	// Addr is the API listener's address; URL is how the test reaches it
	// (through 127.0.0.1 when it listens on every interface).
	Addr net.Addr
	URL  string
	// Token is the first admin token; Client uses it (trusting the
	// keeper's CA when it serves HTTPS).
	Token  string
	Client *client.Client
	// Logs is the keeper's log.
	Logs *testlog.Buffer
}

// Start serves a keeper in this process until tb ends: on 127.0.0.1 (a
// free port), in a data directory of the test's own, logging at info.
// edit, when not nil, changes that configuration before the defaults are
// applied. The keeper's log is printed when the test fails.
func Start(tb testing.TB, edit func(*config.Config)) *Keeper {
	tb.Helper()
	c := config.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(tb.TempDir(), "keeper"), Log: config.Log{Level: "info"}}
	// Tests keep their SSH keys and credential files in their temporary
	// directories and name their variables freely; the keeper's own data
	// dir (under the same root) stays out of reach whatever this allows.
	c.Credentials = config.Credentials{Files: []string{filepath.Clean(os.TempDir())}, Env: []string{"*"}}
	if edit != nil {
		edit(&c)
	}
	k, stop, err := Launch(c, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("keeper: %v", err)
		}
		if tb.Failed() {
			tb.Logf("keeper log:\n%s", k.Logs.String())
		}
	})
	return k
}

// Launch serves a keeper with config c (defaults applied, validated) in
// this process and returns once it listens; stop stops it and returns its
// error. Its log goes to Logs and, when log is not nil, to log as well.
// Start is Launch for a test; Launch is for harnesses that have no
// testing.TB (testscript's setup).
func Launch(c config.Config, log io.Writer) (_ *Keeper, stop func() error, _ error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, nil, fmt.Errorf("keeper config: %w", err)
	}
	k := &Keeper{Config: c, Logs: &testlog.Buffer{}}
	var w io.Writer = k.Logs
	if log != nil {
		w = io.MultiWriter(k.Logs, log)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx, c, keeper.NewLogger(w, c), ready) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the keeper did not stop within 30 s")
		}
	}
	select {
	case k.Addr = <-ready:
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("keeper stopped before listening: %v\n%s", err, k.Logs.String())
	case <-time.After(30 * time.Second):
		_ = stop()
		return nil, nil, fmt.Errorf("keeper did not start listening:\n%s", k.Logs.String())
	}
	k.URL = "http://" + k.Addr.String()
	var opts client.Options
	if c.ServesTLS() {
		k.URL = "https://127.0.0.1:" + strconv.Itoa(k.Addr.(*net.TCPAddr).Port)
		opts.CAFile = filepath.Join(c.TLSDir(), "ca.crt")
	}
	tok, err := os.ReadFile(c.AdminTokenPath())
	if err == nil {
		k.Token = strings.TrimSpace(string(tok))
		k.Client, err = client.NewWithOptions(k.URL, k.Token, opts)
	}
	if err != nil {
		_ = stop()
		return nil, nil, err
	}
	return k, stop, nil
}

// AdminToken reads the first admin token the keeper of c wrote.
func AdminToken(tb testing.TB, c config.Config) string {
	tb.Helper()
	b, err := os.ReadFile(c.AdminTokenPath())
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Build builds the keeper binary (cmd/keeper of this module) into dir and
// returns its path: for a TestMain, once per test process.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "keeper")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/keeper")
	cmd.Dir = moduleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the keeper: %w\n%s", err, out)
	}
	return bin, nil
}

// Proc is a keeper process a test started.
type Proc struct {
	Cmd *exec.Cmd
	// Addr is the API's URL as the keeper logged it.
	Addr string
	logs chan string
	done chan error
}

var listening = regexp.MustCompile(`msg="keeper listening" addr=(https?://[0-9a-f.:\[\]]+)|"msg":"keeper listening","addr":"(https?://[0-9a-f.:\[\]]+)"`)

// Serve runs `bin serve --listen 127.0.0.1:0 args…` in dir and waits until
// it listens; the process is killed, by its PID, if the test ends with it
// still running.
func Serve(t testing.TB, bin, dir string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	return Run(t, cmd)
}

// Run starts cmd, a keeper serving (`keeper serve`, or a command that
// execs it, such as `ip netns exec`), and waits until it logs that it
// listens; it is killed, by its PID, if the test ends with it still
// running.
func Run(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, logs: make(chan string, 1000), done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1] + m[2]
			}
			select {
			case p.logs <- line:
			default:
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the process this test started, by PID
		}
	})
	select {
	case p.Addr = <-addr:
	case err := <-p.done:
		t.Fatalf("keeper exited before listening: %v\n%s", err, p.Drain())
	case <-time.After(30 * time.Second):
		t.Fatalf("keeper did not start listening:\n%s", p.Drain())
	}
	return p
}

// Logs is the channel of the process's log lines (the last 1,000 unread).
func (p *Proc) Logs() <-chan string { return p.logs }

// Done receives the process's exit once it has exited.
func (p *Proc) Done() <-chan error { return p.done }

// Drain returns the log lines not read yet.
func (p *Proc) Drain() string {
	var b strings.Builder
	for {
		select {
		case l := <-p.logs:
			b.WriteString(l + "\n")
		default:
			return b.String()
		}
	}
}

// Interrupt sends SIGINT (Ctrl-C), waits up to 20 s for a clean exit and
// returns the log lines not read yet.
func (p *Proc) Interrupt(t testing.TB) string {
	t.Helper()
	return p.stop(t, syscall.SIGINT, 20*time.Second)
}

// Terminate sends SIGTERM, as systemd does on every stop, waits up to
// 120 s for a clean exit (a drain takes up to drain_timeout) and returns
// the log lines not read yet.
func (p *Proc) Terminate(t testing.TB) string {
	t.Helper()
	return p.stop(t, syscall.SIGTERM, 120*time.Second)
}

func (p *Proc) stop(t testing.TB, sig syscall.Signal, within time.Duration) string {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		logs := p.Drain()
		if err != nil {
			t.Fatalf("keeper exited with %v after %v:\n%s", err, sig, logs)
		}
		return logs
	case <-time.After(within):
		t.Fatalf("keeper did not stop within %s of %v:\n%s", within, sig, p.Drain())
	}
	return ""
}
