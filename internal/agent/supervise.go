package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/atomicfile"
)

// An executor's durable commands run under one supervisor of its own:
// the soul binary again (`soul exec --supervise -`), in a session of its
// own, started with the executor's first durable command, whose only job
// is to run them (Run) and write each one's outcome to its spool entry.
// The executor hands it an entry as a line on its stdin and reads the
// line back on its stdout once that entry's outcome is written. When the
// executor goes (the agent restarted or upgraded, killed, the SSH session
// that started `soul exec --stdio` cut), its end of the pipe closes: the
// supervisor takes no new command, finishes those it runs and exits, and
// the next executor attaches to their entries by id: it waits for the
// outcome while the supervisor lives, and never starts a command again.
// One supervisor for many commands, rather than one each, spares every
// durable command the start of the soul binary (docs/performance.md,
// "One supervisor per executor"); a supervisor killed loses the outcomes
// of the commands it ran (run.command_lost), as one per command did.
//
// An entry holds request.json (the request, stdin included: read and
// removed by the supervisor), meta.json (digest, boot, run, epoch),
// supervisor.json (the supervisor's PID and start time, so that a reused
// PID is not taken for it), cancel once an executor cancelled the command
// and, once the command ended, result.json.
const (
	requestFile    = "request.json"
	supervisorFile = "supervisor.json"
	cancelFile     = "cancel"
	resultFile     = "result.json"
)

// superviseArgs are the arguments after the binary that make it a
// supervisor reading its entries from stdin.
var superviseArgs = []string{"exec", "--supervise", "-"}

// SuperviseIfAsked runs the supervisor and exits when the process was
// started as one (os.Args: <binary> exec --supervise -). A binary that is
// not soul but starts executors (a test binary re-executed as an agent)
// calls it first thing.
func SuperviseIfAsked() {
	if len(os.Args) == 1+len(superviseArgs) && slices.Equal(os.Args[1:], superviseArgs) {
		os.Exit(Supervise(os.Stdin, os.Stdout))
	}
}

// Supervise runs the command of each spool entry read from in (a path on
// a line, at once and concurrently) and writes its outcome there, then
// the entry's line to out, until in ends and the commands it runs have
// ended: the supervisor's whole life. SIGUSR1 cancels the commands whose
// entries hold a cancel file, SIGTERM all of them (a command's process
// group is killed; its outcome says Cancelled). It returns the process's
// exit code.
func Supervise(in io.Reader, out io.Writer) int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	sv := &supervision{out: out, running: map[string]context.CancelFunc{}}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			sv.cancelAsked()
		}
	}()
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 4096), 4096)
	for lines.Scan() {
		if entry := lines.Text(); filepath.IsAbs(entry) {
			sv.start(ctx, entry)
		}
	}
	sv.wg.Wait()
	return 0
}

// supervision is a supervisor's commands.
type supervision struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]context.CancelFunc // by entry, under mu
	outMu   sync.Mutex
	out     io.Writer // under outMu
}

// start runs the command of entry in the background: cancelled at once
// when its entry already holds a cancel file.
func (sv *supervision) start(ctx context.Context, entry string) {
	ctx, cancel := context.WithCancel(ctx)
	sv.mu.Lock()
	sv.running[entry] = cancel
	sv.mu.Unlock()
	if cancelled(entry) {
		cancel()
	}
	sv.wg.Go(func() {
		defer cancel()
		err := superviseEntry(ctx, entry)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soul supervise:", err) // the executor finds no outcome
		}
		sv.mu.Lock()
		delete(sv.running, entry)
		sv.mu.Unlock()
		// Its own lock: the reader of entries (start) never waits on
		// this write.
		sv.outMu.Lock()
		defer sv.outMu.Unlock()
		fmt.Fprintln(sv.out, entry)
	})
}

// cancelAsked cancels the running commands whose entries hold a cancel
// file.
func (sv *supervision) cancelAsked() {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	for entry, cancel := range sv.running {
		if cancelled(entry) {
			cancel()
		}
	}
}

func cancelled(entry string) bool {
	_, err := os.Lstat(filepath.Join(entry, cancelFile))
	return err == nil
}

// superviseEntry runs the command of entry and writes its outcome there.
func superviseEntry(ctx context.Context, dir string) error {
	var req wire.ExecRequest
	b, err := os.ReadFile(filepath.Join(dir, requestFile))
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	_ = os.Remove(filepath.Join(dir, requestFile)) // stdin and env may be secret
	out := Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: fmt.Sprintf("the supervisor cannot read the request: %v", err)}}
	if err == nil {
		out = Run(ctx, req)
	}
	b, _ = json.Marshal(out)
	return atomicfile.Replace(filepath.Join(dir, resultFile), b, 0o600)
}

// supervisorID is a supervisor process: its PID and the start time the
// kernel gives it (field 22 of /proc/<pid>/stat), which a reused PID does
// not share. Shared: it supervises many commands, read from its stdin
// (one each, started by an earlier version, has not).
type supervisorID struct {
	PID    int    `json:"pid"`
	Start  string `json:"start"`
	Shared bool   `json:"shared,omitempty"`
}

// processStart is the start time of process pid, "" when it is gone.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return "" // a zombie has ended
	}
	return f[19]
}

// alive reports whether the supervisor still runs.
func (s supervisorID) alive() bool { return s.PID > 1 && processStart(s.PID) == s.Start }

// cancel cancels the command of entry: a shared supervisor is asked to
// (a cancel file in the entry, then SIGUSR1), one of its own is ended
// (SIGTERM). Either kills the command's process group and spools the
// outcome.
func (s supervisorID) cancel(entry string) {
	if !s.alive() {
		return
	}
	if !s.Shared {
		_ = syscall.Kill(s.PID, syscall.SIGTERM)
		return
	}
	if err := os.WriteFile(filepath.Join(entry, cancelFile), nil, 0o600); err == nil || errors.Is(err, os.ErrExist) {
		_ = syscall.Kill(s.PID, syscall.SIGUSR1)
	}
}

// supervisorProc is the supervisor this executor started: it hands it
// entries (stdin) and learns which have their outcome (stdout).
type supervisorProc struct {
	id     supervisorID
	exited chan struct{} // closed once it ended and every line it wrote was read

	mu      sync.Mutex
	stdin   io.WriteCloser
	waiting map[string]chan struct{} // by entry: closed once its outcome is spooled
}

// startSupervisor starts a supervisor, detached in a session of its own.
func (e *executor) startSupervisor() (*supervisorProc, error) {
	argv := append(append([]string(nil), e.supervisor...), superviseArgs...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &supervisorProc{id: supervisorID{PID: cmd.Process.Pid, Start: processStart(cmd.Process.Pid), Shared: true},
		exited: make(chan struct{}), stdin: stdin, waiting: map[string]chan struct{}{}}
	go func() {
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 4096), 4096)
		for lines.Scan() {
			p.mu.Lock()
			if ch, ok := p.waiting[lines.Text()]; ok {
				close(ch)
				delete(p.waiting, lines.Text())
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// hand gives the supervisor entry; the channel is closed once its outcome
// is spooled. An error means the supervisor did not take it (it had
// ended, or was let go).
// The caller holds the executor's supMu, as release's do. The write is
// made without p.mu: the reader of the supervisor's lines takes p.mu,
// and must go on draining them while a write waits for the supervisor
// to read (else a full pipe each way would hold both).
func (p *supervisorProc) hand(entry string) (<-chan struct{}, error) {
	p.mu.Lock()
	stdin := p.stdin
	if stdin == nil {
		p.mu.Unlock()
		return nil, os.ErrClosed
	}
	ch := make(chan struct{})
	p.waiting[entry] = ch
	p.mu.Unlock()
	if _, err := io.WriteString(stdin, entry+"\n"); err != nil {
		p.mu.Lock()
		delete(p.waiting, entry)
		p.mu.Unlock()
		return nil, err
	}
	return ch, nil
}

// release closes the supervisor's stdin: it takes no new command and
// exits once those it runs have ended.
func (p *supervisorProc) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// supervise hands entry, whose request.json holds req, to the executor's
// supervisor — started now when there is none, or the last has ended —
// and records it in the entry. The channel is closed once its outcome is
// spooled, or the supervisor has ended.
func (e *executor) supervise(entry string, req wire.ExecRequest) (*supervisorProc, <-chan struct{}, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	if err := atomicfile.Replace(filepath.Join(entry, requestFile), b, 0o600); err != nil {
		return nil, nil, err
	}
	e.supMu.Lock()
	defer e.supMu.Unlock()
	// Write supervisor.json first: the supervisor may finish before hand
	// returns, and an attaching executor must find whom to wait for.
	for range 2 {
		p := e.sup
		if p == nil || isClosed(p.exited) {
			if e.ctx.Err() != nil {
				return nil, nil, context.Cause(e.ctx)
			}
			if p, err = e.startSupervisor(); err != nil {
				return nil, nil, err
			}
			e.sup = p
		}
		b, _ = json.Marshal(p.id)
		if err := atomicfile.Replace(filepath.Join(entry, supervisorFile), b, 0o600); err != nil {
			return nil, nil, err
		}
		ch, err := p.hand(entry)
		if err == nil {
			return p, ch, nil
		}
		p.release()
		e.sup = nil // it had ended: once more with a new one
	}
	return nil, nil, errors.New("the supervisor ended as it was started")
}

// releaseSupervisor lets the executor's supervisor go: the executor stops.
func (e *executor) releaseSupervisor() {
	e.supMu.Lock()
	defer e.supMu.Unlock()
	if e.sup != nil {
		e.sup.release()
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// readResult reads an entry's outcome; fs.ErrNotExist while there is none.
func readResult(entry string) (Outcome, error) {
	b, err := os.ReadFile(filepath.Join(entry, resultFile))
	if err != nil {
		return Outcome{}, err
	}
	var out Outcome
	if err := json.Unmarshal(b, &out); err != nil {
		return Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: "the command's spooled result cannot be read: " + err.Error()}}, nil
	}
	return out, nil
}

// attachPoll is how often an executor that attached to another one's
// supervisor looks for its outcome.
const attachPoll = 20 * time.Millisecond

// awaitSupervisor waits until the supervisor of entry has written its
// outcome, or is gone without one.
func awaitSupervisor(ctx context.Context, entry string, sup supervisorID) Outcome {
	for {
		if out, err := readResult(entry); err == nil {
			return out
		} else if !errors.Is(err, os.ErrNotExist) {
			return Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: "the command's spooled result cannot be read: " + err.Error()}}
		}
		if !sup.alive() {
			// It may have written the outcome just before it ended.
			if out, err := readResult(entry); err == nil {
				return out
			}
			return Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: "the command started and was lost before it ended: its supervisor is gone"}}
		}
		select {
		case <-ctx.Done():
			return Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: "the executor stopped while it waited for the command"}}
		case <-time.After(attachPoll):
		}
	}
}
