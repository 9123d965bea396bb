package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/atomicfile"
)

// A durable command runs under a supervisor of its own: the soul binary
// again (`soul exec --supervise <entry>`), in a session of its own, whose
// only job is to run the command (Run) and write its outcome to the
// spool entry. The executor that started it waits for it as its parent;
// when that executor goes (the agent restarted or upgraded, killed, the
// SSH session that started `soul exec --stdio` cut), the supervisor and
// its command go on, and the next executor attaches to the entry by id:
// it waits for the outcome while the supervisor lives, and never starts
// the command again.
//
// An entry holds request.json (the request, stdin included: read and
// removed by the supervisor), meta.json (digest, boot, run, epoch),
// supervisor.json (the supervisor's PID and start time, so that a reused
// PID is not taken for it) and, once the command ended, result.json.
const (
	requestFile    = "request.json"
	supervisorFile = "supervisor.json"
	resultFile     = "result.json"
)

// superviseArgs are the arguments after the binary that make it a
// supervisor of the entry that follows them.
var superviseArgs = []string{"exec", "--supervise"}

// SuperviseIfAsked runs the supervisor and exits when the process was
// started as one (os.Args: <binary> exec --supervise <entry>). A binary
// that is not soul but starts executors (a test binary re-executed as an
// agent) calls it first thing.
func SuperviseIfAsked() {
	if len(os.Args) == 4 && os.Args[1] == superviseArgs[0] && os.Args[2] == superviseArgs[1] {
		os.Exit(Supervise(os.Args[3]))
	}
}

// Supervise runs the command of spool entry dir and writes its outcome
// there: the supervisor's whole life. SIGTERM cancels the command (its
// process group is killed; the outcome says Cancelled). It returns the
// process's exit code: 0 once result.json is written.
func Supervise(dir string) int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
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
	if err := atomicfile.Replace(filepath.Join(dir, resultFile), b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "soul supervise:", err)
		return 1
	}
	return 0
}

// supervisorID is a supervisor process: its PID and the start time the
// kernel gives it (field 22 of /proc/<pid>/stat), which a reused PID does
// not share.
type supervisorID struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`
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

// terminate cancels the supervisor's command (SIGTERM: the supervisor
// kills its process group and spools the outcome).
func (s supervisorID) terminate() {
	if s.alive() {
		_ = syscall.Kill(s.PID, syscall.SIGTERM)
	}
}

// startSupervisor starts the supervisor of entry with req, detached in a
// session of its own, and records it in the entry.
func (e *executor) startSupervisor(entry string, req wire.ExecRequest) (*exec.Cmd, supervisorID, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, supervisorID{}, err
	}
	if err := atomicfile.Replace(filepath.Join(entry, requestFile), b, 0o600); err != nil {
		return nil, supervisorID{}, err
	}
	argv := append(append(append([]string(nil), e.supervisor...), superviseArgs...), entry)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, supervisorID{}, err
	}
	id := supervisorID{PID: cmd.Process.Pid, Start: processStart(cmd.Process.Pid)}
	b, _ = json.Marshal(id)
	if err := atomicfile.Replace(filepath.Join(entry, supervisorFile), b, 0o600); err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return nil, supervisorID{}, err
	}
	return cmd, id, nil
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
