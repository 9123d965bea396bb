package ssh

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/transport"
)

// Executor is the soul binary the keeper runs over SSH (`soul exec
// --stdio`) so that a connection's commands are messages to one process
// instead of a session and a shell each: per architecture as Go names it
// (amd64, arm64), its path on the keeper and the SHA-256 of its content.
//
// On the first command of a connection the client starts it with one
// exec request: a short script picks the binary of the host's
// architecture, checks its hash in
//
//	root:        /var/lib/soulstack/exec/soul-<sha256>
//	other users: ${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/exec/soul-<sha256>
//
// (a directory only the user can read) and execs it; a missing or altered
// binary is uploaded (to a temporary name, its hash checked, then renamed
// over; binaries of other versions uploaded more than a day before are
// removed) and the start tried once more. Where it cannot run — another OS or
// architecture, no binary for it, a noexec directory, a refused upload —
// the connection falls back to the shell, per connection, and says why
// (Client.ExecutorState). Plain commands go through the executor; durable
// ones keep the shell supervisor, whose commands outlive the connection.
type Executor struct {
	Binaries map[string]ExecutorBinary
	// Dir, when set, is the directory of the binaries on the souls
	// instead of the user's default above; its spool subdirectory keeps
	// the executor's durable commands.
	Dir string
}

// ExecutorBinary is one architecture's soul binary.
type ExecutorBinary struct {
	Path   string
	SHA256 string
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// unameArch maps `uname -m` to Go's architecture names.
var unameArch = map[string][]string{"amd64": {"x86_64"}, "arm64": {"aarch64", "arm64"}}

// executorDir is the directory of the executor binaries on the soul.
const executorDir = `if [ "$(id -u)" = 0 ]; then D=/var/lib/soulstack/exec; else D=${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/exec; fi`

// executorSpool sets X to the executor's spool of durable commands.
const executorSpool = `if [ "$(id -u)" = 0 ]; then X=/var/lib/soulstack/exec/spool; else X=${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/exec/spool; fi`

// errStartInterrupted: the executor's start was cut short (its process
// killed); the next command tries again.
var errStartInterrupted = errors.New("the executor's start was interrupted")

// errElsewhere: a durable command's id is in the other spool of the
// soul (the executor's, or the shell supervisor's), where an earlier
// execution sent it; it is sent there to attach.
var errElsewhere = errors.New("the command is in the other spool")

// startScript starts the executor of the host's architecture, or says on
// its first line of stdout what it lacks. shellSpool is the shell
// supervisor's spool ("" for the user's default): the executor starts no
// command whose id is there.
func (x *Executor) startScript(shellSpool string) string {
	var b strings.Builder
	b.WriteString("umask 077\n" + x.dirLine() + "\nS=" + Quote(shellSpool) + "\n[ -n \"$S\" ] || S=${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/spool\n")
	b.WriteString(`case "$(uname -s) $(uname -m)" in` + "\n")
	archs := make([]string, 0, len(x.Binaries))
	for a := range x.Binaries {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	for _, a := range archs {
		bin := x.Binaries[a]
		if !sha256Hex.MatchString(bin.SHA256) {
			continue
		}
		for _, m := range unameArch[a] {
			fmt.Fprintf(&b, "'Linux %s') h=%s ;;\n", m, bin.SHA256)
		}
	}
	b.WriteString(`*) echo "soulstack-exec unsupported $(uname -s) $(uname -m)"; exit 0 ;;
esac
f=$D/soul-$h
if [ ! -e "$f" ]; then echo "soulstack-exec need $h"; exit 0; fi
if [ ! -x "$f" ] || [ "$(sha256sum <"$f" 2>/dev/null | cut -d' ' -f1)" != "$h" ]; then echo "soulstack-exec altered $h"; exit 0; fi
exec "$f" exec --stdio --spool "$D/spool" --shell-spool "$S"
`)
	return b.String()
}

// dirLine sets D to the executor's directory on the soul.
func (x *Executor) dirLine() string {
	if x.Dir != "" {
		return "D=" + Quote(x.Dir)
	}
	return executorDir
}

// spoolDir is the executor's spool on the souls, "" for the user's
// default.
func (x *Executor) spoolDir() string {
	if x == nil || x.Dir == "" {
		return ""
	}
	return x.Dir + "/spool"
}

// uploadScript writes its standard input to the executor binary of hash
// h, checked before it takes the binary's name.
func (x *Executor) uploadScript(h string) string {
	return "umask 077\n" + x.dirLine() + "\n" + `mkdir -p "$D" && chmod 700 "$D" || exit 1
t=$D/.soul-` + h + `.$$
if cat >"$t" && chmod 700 "$t" && [ "$(sha256sum <"$t" | cut -d' ' -f1)" = ` + h + ` ]; then mv -f "$t" "$D/soul-` + h + `"; else rm -f "$t"; exit 1; fi
find "$D" -maxdepth 1 -name 'soul-*' ! -name 'soul-` + h + `' -mtime +0 -exec rm -f {} + 2>/dev/null
exit 0
`
}

// executorState is a client's executor: running, or why not.
type executorState struct {
	mu       sync.Mutex
	conn     *stdioConn
	fallback string // why the shell is used; empty: not tried yet or running
	// replaced is the hash of a binary found altered on the host and
	// replaced, until TakeReplacedExecutor takes it.
	replaced string
}

// TakeReplacedExecutor returns, once, the hash of the executor binary this
// client found altered on the host (its content no longer its name's
// hash) and replaced by the keeper's: for the caller to audit.
func (c *Client) TakeReplacedExecutor() (string, bool) {
	c.exe.mu.Lock()
	defer c.exe.mu.Unlock()
	h := c.exe.replaced
	c.exe.replaced = ""
	return h, h != ""
}

// ExecutorState says how the client runs plain commands: "executor" once
// `soul exec --stdio` runs on the connection, "shell: <why>" when it fell
// back, "" before the first command or without an Executor.
func (c *Client) ExecutorState() string {
	c.exe.mu.Lock()
	defer c.exe.mu.Unlock()
	switch {
	case c.exe.conn != nil && c.exe.conn.alive():
		return "executor"
	case c.exe.fallback != "":
		return "shell: " + c.exe.fallback
	}
	return ""
}

// Executor is ExecutorState as a soul's record says it
// (transport.ExecutorReporter): "ssh: executor", "ssh: shell (<why>)",
// "ssh: shell" without an Executor, "" before the first command.
func (c *Client) Executor() string {
	st := c.ExecutorState()
	switch {
	case st == "executor":
		return "ssh: executor"
	case strings.HasPrefix(st, "shell: "):
		return "ssh: shell (" + strings.TrimPrefix(st, "shell: ") + ")"
	case c.opts.Executor == nil || len(c.opts.Executor.Binaries) == 0:
		return "ssh: shell"
	}
	return ""
}

// execDurable runs a durable command through the executor when the
// connection has one, else through the shell supervisor; an id the
// other spool holds (an earlier execution went the other way) is sent
// there to attach. Where that way is closed now, the command is lost to
// this execution rather than started twice. The spool entries to forget
// go with whichever way the command is sent first.
func (c *Client) execDurable(ctx context.Context, cmd Command, x *stdioConn, shell func(forget []string) (Result, error)) (Result, error) {
	forget := c.durable.forget.Take("")
	if x == nil {
		res, err := shell(forget)
		if !errors.Is(err, errElsewhere) {
			return res, err
		}
		if x = c.executor(ctx); x == nil {
			return res, fmt.Errorf("%w: an earlier execution started it through the soul's executor, which cannot run on this connection", transport.ErrCommandLost)
		}
		return x.exec(ctx, cmd, nil)
	}
	res, err := x.exec(ctx, cmd, forget)
	if errors.Is(err, errElsewhere) {
		return shell(nil)
	}
	return res, err
}

func orNoMessage(s string) string {
	if s == "" {
		return "no message"
	}
	return s
}

// executor returns the connection's running executor, starting it on
// first use; nil means the shell (no Executor, or it cannot run here).
func (c *Client) executor(ctx context.Context) *stdioConn {
	x := c.opts.Executor
	if x == nil || len(x.Binaries) == 0 {
		return nil
	}
	c.exe.mu.Lock()
	defer c.exe.mu.Unlock()
	if c.exe.conn != nil && c.exe.conn.alive() {
		return c.exe.conn
	}
	if c.exe.fallback != "" || !c.alive() {
		return nil
	}
	conn, err := c.startExecutor(ctx, x)
	if err != nil {
		// The shell for this command; for good only when the executor
		// cannot run here.
		if ctx.Err() == nil && !errors.Is(err, errStartInterrupted) && !errors.Is(err, ErrDisconnected) {
			c.exe.fallback = err.Error()
			c.opts.Log.Debug("executor unavailable: commands run through the shell", "target", c.target.String(), "why", err)
		}
		return nil
	}
	c.exe.conn = conn
	return conn
}

// startExecutor starts the executor, uploading its binary once when the
// host lacks it.
func (c *Client) startExecutor(ctx context.Context, x *Executor) (*stdioConn, error) {
	for attempt := 0; ; attempt++ {
		conn, need, altered, err := c.tryExecutor(ctx, x)
		if err != nil || need == "" {
			return conn, err
		}
		// One upload per start: a binary that does not start once
		// uploaded sends the connection to the shell for good. A later
		// start (the executor ended) checks the binary again, and
		// replaces it again if it was altered meanwhile.
		if attempt > 0 {
			return nil, errors.New("the uploaded binary does not start")
		}
		if err := c.uploadExecutor(ctx, x, need); err != nil {
			return nil, err
		}
		if altered {
			c.exe.replaced = need
			c.opts.Log.Warn("the executor binary on the host was altered: replaced", "target", c.target.String(), "sha256", need)
		}
	}
}

// tryExecutor runs the start script: a running executor, or the hash of
// the binary the host lacks (altered: it has one under that name whose
// content is not it), or why it cannot run.
func (c *Client) tryExecutor(ctx context.Context, x *Executor) (_ *stdioConn, need string, altered bool, _ error) {
	sess, err := c.newSession(ctx)
	if err != nil {
		return nil, "", false, err
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, "", false, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, "", false, err
	}
	stderr := transport.NewCapture(4 << 10)
	sess.Stderr = stderr
	if err := sess.Start(x.startScript(c.spoolDir())); err != nil {
		sess.Close()
		return nil, "", false, fmt.Errorf("start the executor: %w", err)
	}
	r := bufio.NewReaderSize(stdout, 64<<10)
	first := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		first <- strings.TrimSpace(line)
	}()
	var line string
	select {
	case line = <-first:
	case <-ctx.Done():
		sess.Close()
		return nil, "", false, context.Cause(ctx)
	}
	switch {
	case strings.HasPrefix(line, wire.StdioHello+" "):
		return newStdioConn(sess, stdin, r, c.opts.MaxOutput), "", false, nil
	case strings.HasPrefix(line, "soulstack-exec need "), strings.HasPrefix(line, "soulstack-exec altered "):
		sess.Close()
		alt := strings.HasPrefix(line, "soulstack-exec altered ")
		h := strings.TrimPrefix(strings.TrimPrefix(line, "soulstack-exec need "), "soulstack-exec altered ")
		if !sha256Hex.MatchString(h) {
			return nil, "", false, fmt.Errorf("the host asked for %q", h)
		}
		return nil, h, alt, nil
	case strings.HasPrefix(line, "soulstack-exec unsupported "):
		sess.Close()
		return nil, "", false, fmt.Errorf("no executor binary for %s", strings.TrimPrefix(line, "soulstack-exec unsupported "))
	}
	werr := sess.Wait()
	sess.Close()
	msg, _ := stderr.Bytes()
	err = fmt.Errorf("the executor did not start: %s", orNoMessage(firstLine(strings.TrimSpace(string(msg)))))
	var exit *gossh.ExitError
	if errors.As(werr, &exit) && exit.Signal() != "" {
		// Killed while it started: nothing says it cannot run here.
		err = fmt.Errorf("%w (killed by SIG%s while it started)", errStartInterrupted, exit.Signal())
	}
	return nil, "", false, err
}

// uploadExecutor copies the binary of hash h to the host.
func (c *Client) uploadExecutor(ctx context.Context, x *Executor, h string) error {
	var bin ExecutorBinary
	for _, b := range x.Binaries {
		if b.SHA256 == h {
			bin = b
		}
	}
	if bin.Path == "" {
		return fmt.Errorf("the host asked for a binary this keeper does not have (%s)", h)
	}
	f, err := os.Open(bin.Path)
	if err != nil {
		return fmt.Errorf("upload the executor: %w", err)
	}
	defer f.Close()
	sess, err := c.newSession(ctx)
	if err != nil {
		return err
	}
	defer sess.Close()
	sess.Stdin = f
	stderr := transport.NewCapture(4 << 10)
	sess.Stderr = stderr
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	if err := sess.Run(x.uploadScript(h)); err != nil {
		msg, _ := stderr.Bytes()
		return fmt.Errorf("upload the executor: refused (%s)", orNoMessage(firstLine(strings.TrimSpace(string(msg)))))
	}
	return nil
}

// stdioConn is a running executor: commands and cancels go to its
// standard input as frames, their output and ends come back on its
// standard output, matched by id.
type stdioConn struct {
	sess      *gossh.Session
	maxOutput int

	wmu sync.Mutex
	w   io.WriteCloser

	mu      sync.Mutex
	pending map[string]*pendingCmd
	dead    chan struct{}
	err     error
}

// pendingCmd is a command sent and not ended yet.
type pendingCmd struct {
	stdout, stderr *transport.Capture
	end            chan wire.ExecEnd
}

func newStdioConn(sess *gossh.Session, w io.WriteCloser, r *bufio.Reader, maxOutput int) *stdioConn {
	x := &stdioConn{sess: sess, w: w, maxOutput: maxOutput, pending: map[string]*pendingCmd{}, dead: make(chan struct{})}
	go x.read(r)
	return x
}

func (x *stdioConn) alive() bool {
	select {
	case <-x.dead:
		return false
	default:
		return true
	}
}

// read dispatches the executor's frames until its output ends; then every
// command waiting fails disconnected.
func (x *stdioConn) read(r *bufio.Reader) {
	max := wire.ChunkSize + 1<<10
	var err error
	for {
		var kind byte
		var id string
		var body []byte
		kind, id, body, err = wire.ReadFrame(r, max)
		if err != nil {
			break
		}
		x.mu.Lock()
		p := x.pending[id]
		if kind == wire.FrameEnd {
			delete(x.pending, id)
		}
		x.mu.Unlock()
		if p == nil {
			continue // a command given up on (its context ended)
		}
		switch kind {
		case wire.FrameStdout:
			p.stdout.Write(body)
		case wire.FrameStderr:
			p.stderr.Write(body)
		case wire.FrameEnd:
			var end wire.ExecEnd
			if json.Unmarshal(body, &end) != nil {
				end = wire.ExecEnd{Code: "agent.bad_answer", Error: "the executor's end of a command is not JSON"}
			}
			p.end <- end
		default:
			err = fmt.Errorf("%w: kind %q from the executor", wire.ErrFrame, kind)
		}
		if err != nil {
			break
		}
	}
	x.mu.Lock()
	x.err = err
	close(x.dead)
	x.pending = map[string]*pendingCmd{}
	x.mu.Unlock()
	x.sess.Close()
}

// send writes one frame.
func (x *stdioConn) send(kind byte, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return wire.WriteFrame(x.w, kind, id, b)
}

// exec runs cmd through the executor (the semantics of Client.Exec);
// a durable command carries forget, the spool entries to remove.
func (x *stdioConn) exec(ctx context.Context, cmd Command, forget []string) (Result, error) {
	var idb [12]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return Result{}, err
	}
	id := hex.EncodeToString(idb[:])
	// The executor cuts each stream at maxOutput and marks it; past the
	// marker, this side cuts.
	p := &pendingCmd{stdout: transport.NewCapture(x.maxOutput + wire.MarkerSlack), stderr: transport.NewCapture(x.maxOutput + wire.MarkerSlack), end: make(chan wire.ExecEnd, 1)}
	x.mu.Lock()
	if !x.alive() {
		x.mu.Unlock()
		return Result{}, fmt.Errorf("%w: the executor is gone", ErrDisconnected)
	}
	x.pending[id] = p
	x.mu.Unlock()
	req := wire.ExecRequest{ID: id, Argv: cmd.Argv, Script: cmd.Script, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: cmd.Sudo, MaxOutput: x.maxOutput, Probe: cmd.Probe}
	cancel := wire.CancelRequest{ID: id}
	if d := cmd.Durable; d != nil {
		req.Durable = &wire.Durable{ID: d.ID, Run: d.Run, Epoch: d.Epoch, Digest: d.Digest, Forget: forget}
		cancel.Run, cancel.Epoch = d.Run, d.Epoch
	}
	if err := x.send(wire.FrameExec, id, req); err != nil {
		x.forget(id)
		return Result{}, fmt.Errorf("%w: send to the executor: %v", ErrDisconnected, err)
	}
	outcome := func(end wire.ExecEnd) Result {
		res := result(p.stdout, p.stderr)
		res.ExitCode, res.Signal = end.ExitCode, end.Signal
		res.StdoutTruncated = res.StdoutTruncated || end.StdoutTruncated
		res.StderrTruncated = res.StderrTruncated || end.StderrTruncated
		return res
	}
	select {
	case end := <-p.end:
		res := outcome(end)
		res.Reattached = end.Reattached
		return res, endError(end)
	case <-x.dead:
		return outcome(wire.ExecEnd{}), fmt.Errorf("%w: the executor's session ended", ErrDisconnected)
	case <-ctx.Done():
	}
	if transport.Detached(ctx) && cmd.Durable != nil {
		// The keeper lets go: the command goes on under its supervisor.
		x.forget(id)
		return outcome(wire.ExecEnd{}), context.Cause(ctx)
	}
	// Kill it, and take the output it wrote until it was killed.
	_ = x.send(wire.FrameCancel, id, cancel)
	select {
	case end := <-p.end:
		return outcome(end), context.Cause(ctx)
	case <-x.dead:
	case <-time.After(cancelGrace):
		x.forget(id)
	}
	return outcome(wire.ExecEnd{}), context.Cause(ctx)
}

func (x *stdioConn) forget(id string) {
	x.mu.Lock()
	delete(x.pending, id)
	x.mu.Unlock()
}

// endError is the transport error of an executor's end of a command.
func endError(end wire.ExecEnd) error {
	switch end.Code {
	case "":
		return nil
	case wire.CodeFenced:
		return fmt.Errorf("%w: %s", transport.ErrFenced, end.Error)
	case wire.CodeLost:
		return fmt.Errorf("%w: %s", transport.ErrCommandLost, end.Error)
	case wire.CodeDiverged:
		return transport.ErrDiverged
	case wire.CodeElsewhere:
		return errElsewhere
	}
	return fmt.Errorf("%w: %s", transport.ErrInvalidCommand, end.Error)
}
