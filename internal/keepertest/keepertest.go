// Package keepertest starts real keepers for tests, the way the keeper
// runs: Start serves one in the test's process (keeper.Run, on loopback,
// its own data directory, SQLite unless the config says otherwise), and
// Serve runs the keeper binary (Build) as a process of its own. Both wait
// until the keeper listens and stop it when the test ends; Buffer is the
// log both share with the test.
package keepertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
)

// Buffer is a bytes.Buffer safe for a keeper's concurrent logging and the
// test reading it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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
	Logs *Buffer
}

// Start serves a keeper in this process until tb ends: on 127.0.0.1 (a
// free port), in a data directory of the test's own, logging at info.
// edit, when not nil, changes that configuration before the defaults are
// applied. The keeper's log is printed when the test fails.
func Start(tb testing.TB, edit func(*config.Config)) *Keeper {
	tb.Helper()
	c := config.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(tb.TempDir(), "keeper"), Log: config.Log{Level: "info"}}
	if edit != nil {
		edit(&c)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		tb.Fatalf("keeper config: %v", err)
	}
	k := &Keeper{Config: c, Logs: &Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx, c, keeper.NewLogger(k.Logs, c), ready) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("keeper: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Error("keeper did not stop within 30 s")
		}
		if tb.Failed() {
			tb.Logf("keeper log:\n%s", k.Logs.String())
		}
	})
	select {
	case k.Addr = <-ready:
	case err := <-done:
		tb.Fatalf("keeper stopped before listening: %v\n%s", err, k.Logs.String())
	case <-time.After(30 * time.Second):
		tb.Fatalf("keeper did not start listening:\n%s", k.Logs.String())
	}
	k.URL = "http://" + k.Addr.String()
	var opts client.Options
	if c.ServesTLS() {
		k.URL = "https://127.0.0.1:" + strconv.Itoa(k.Addr.(*net.TCPAddr).Port)
		opts.CAFile = filepath.Join(c.TLSDir(), "ca.crt")
	}
	k.Token = AdminToken(tb, c)
	var err error
	if k.Client, err = client.NewWithOptions(k.URL, k.Token, opts); err != nil {
		tb.Fatal(err)
	}
	return k
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
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "keeper")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/keeper")
	cmd.Dir = root
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

var listening = regexp.MustCompile(`msg="keeper listening" addr=(https?://[0-9a-f.:\[\]]+)`)

// Serve runs `bin serve --listen 127.0.0.1:0 args…` in dir and waits until
// it listens; the process is killed, by its PID, if the test ends with it
// still running.
func Serve(t *testing.T, bin, dir string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
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
				addr <- m[1]
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

// Interrupt sends SIGINT (Ctrl-C), waits for a clean exit and returns the
// log lines not read yet.
func (p *Proc) Interrupt(t *testing.T) string {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		logs := p.Drain()
		if err != nil {
			t.Fatalf("keeper exited with %v after SIGINT:\n%s", err, logs)
		}
		return logs
	case <-time.After(20 * time.Second):
		t.Fatal("keeper did not stop within 20 s of SIGINT")
	}
	return ""
}
