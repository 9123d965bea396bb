// Package transport is the seam between the engine and the ways a command
// reaches a soul: SSH (transport/ssh) and the soul's agent over the message
// bus (internal/bus on the keeper, internal/agent on the soul). Both run a
// Command and report a Result with the same semantics, and both classify
// their failures with the sentinels and codes of this package, so that the
// engine neither imports a transport to decide whether a target was
// unreachable nor builds a transport's own types.
package transport

import (
	"context"
	"errors"
	"time"

	"github.com/soulstack/soulstack/internal/probe"
)

// Command is one program run on a soul: Argv or Script, not both.
type Command struct {
	// Argv is a program and its arguments, delivered byte for byte.
	Argv []string
	// Script is shell text run by /bin/sh -c.
	Script string
	// Stdin is sent to the command's standard input, then end of file.
	Stdin []byte
	// Env is set for the command, after LC_ALL=C (so an LC_ALL here
	// overrides it). Names must be shell identifiers not starting with
	// "__soulstack_"; values may hold any byte but NUL. No transport puts
	// the values on a command line.
	Env map[string]string
	// Dir is the working directory; empty means the login directory of
	// the transport's user (root's home for an agent running as root).
	Dir string
	// Sudo runs the command as root: a transport whose user is not root
	// wraps it in "sudo -n --", which fails at once instead of prompting.
	Sudo bool
	// Durable, when set, makes the command outlive the keeper and the
	// connection: the soul runs it detached, spools its output and exit
	// status by id, and answers a second Exec with the same id by
	// reattaching to it, never by starting it again.
	Durable *Durable
	// Probe is the question a read-only command's Argv answers (package
	// probe): a transport that reaches the soul's executor hands it over,
	// and the executor answers it natively or runs Argv.
	Probe *probe.Request
}

// Durable is what makes a command durable: its id, the run and lease
// epoch it belongs to, and a digest of what it runs.
type Durable struct {
	// ID names the command on the soul ([A-Za-z0-9_.-], at most 128
	// bytes): the same command of a resumed run has the same id.
	ID string
	// Run and Epoch fence the command: a soul refuses it (ErrFenced) when
	// it has seen a later epoch of the run.
	Run   string
	Epoch int64
	// Digest is a hash of the command: a second Exec with the same id and
	// another digest fails ErrDiverged instead of reattaching.
	Digest string
}

// ValidDurableID reports whether id can name a durable command.
func ValidDurableID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Result is how a command ended. A non-zero exit code is a result, not an
// error.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
	// Signal is the name of the signal that killed the command ("KILL"),
	// if one did; ExitCode is then 128 plus its number.
	Signal string
	// StdoutTruncated and StderrTruncated report that the stream went past
	// the transport's output limit: the captured bytes end with a
	// truncation marker (TruncationMarker).
	StdoutTruncated bool
	StderrTruncated bool
	// Reattached says a durable command was already running or finished
	// on the soul: this Exec attached to it rather than starting it.
	Reattached bool
}

// Conn runs commands on one soul. Exec returns the command's Result; its
// errors are transport failures classified by the sentinels below (and
// Code), or the context's error when ctx ends first, in which case the
// command's process group has been killed and the output captured so far
// is returned.
type Conn interface {
	Exec(ctx context.Context, cmd Command) (Result, error)
}

// ExecutorReporter is a Conn that says how it runs commands: "agent",
// "ssh: executor" (soul exec --stdio over the connection), "ssh: shell"
// or "ssh: shell (<why the executor cannot run>)"; empty while that is
// not decided yet (no command ran).
type ExecutorReporter interface {
	Executor() string
}

// Peer is one soul as a Dialer reaches it.
type Peer struct {
	// SID names the soul in pins, audit events and errors.
	SID     string
	Address string
	Port    int
	User    string
	// Key returns the client key (PEM or OpenSSH format) when a dialer
	// needs one: resolved only then, so that a soul reached through its
	// agent never has its key read.
	Key func(ctx context.Context) ([]byte, error)
	// HostKey is the soul's pinned host key (authorized_keys form); empty
	// on first contact, when the dialer pins the key the host presents
	// (HostKeys.Pin) and refuses any other later.
	HostKey string
	// Retry is the connect policy; zero means the transport's default, or
	// a longer one for a soul that AwaitsReady.
	Retry RetryPolicy
	// AwaitReady: the soul was just made by a cloud step and never
	// reached. The dialer retries key refusals (its cloud-init may not
	// have written the key yet) and waits until its cloud-init has
	// finished before it returns: bounded by ctx's deadline, else by
	// ReadyTimeout.
	AwaitReady   bool
	ReadyTimeout time.Duration
	// AgentUntil is how long to wait for the soul's agent to connect when
	// it has none now (a soul that just joined starts its agent right
	// after); zero: no wait.
	AgentUntil time.Time
	// HasAgent says the soul holds an agent identity (it joined): while the
	// keeper's bus is in its start-up grace (Agents that have WarmUntil),
	// its agent is waited for before SSH is tried.
	HasAgent bool
	// Via, when set, is the transport to use and no other: the one an
	// earlier execution sent a durable command through, whose spool is on
	// that side ("agent": wait for the agent until ctx ends; "ssh").
	Via string
}

// Dialer opens connections to souls for one run. Dial returns a Conn to
// p, set up as the transport requires (for SSH: a warm connection checked
// again for this run, the host key pinned or verified, the cloud-init of a
// soul just made waited for); its errors carry codes (Code) and the
// failure classes below.
type Dialer interface {
	Dial(ctx context.Context, p Peer) (Conn, error)
}

// HostKeys is where a Dialer pins and checks souls' host keys: the
// registry, with its audit log.
type HostKeys interface {
	// Pin records key as soul sid's host key on first contact and returns
	// the key pinned: key, or the one another contact pinned first.
	Pin(ctx context.Context, sid, key string) (pinned string, err error)
	// Mismatch records that the host at addr, reached as soul sid,
	// presented presented although pinned is pinned.
	Mismatch(ctx context.Context, sid, addr, pinned, presented string) error
}

// Agents are the souls whose agent is connected to the keeper's bus now.
// Agent returns a Conn to soul sid and true when its agent is connected
// (it sent a heartbeat recently); false means the caller uses SSH.
type Agents interface {
	Agent(sid string) (Conn, bool)
}

// RetryPolicy says how many times a connection is attempted and how long to
// wait between attempts; the zero value means the transport's default.
type RetryPolicy struct {
	Attempts int
	Interval time.Duration
}

// Classes of transport failure, matched with errors.Is on the errors of
// every transport (whose own sentinels wrap them).
var (
	// ErrUnreachable means no connection to the soul could be set up: the
	// step's target is "unreachable", not "failed".
	ErrUnreachable = errors.New("unreachable")
	// ErrDisconnected means the connection failed while a command ran, so
	// its outcome is unknown: such a step is never retried.
	ErrDisconnected = errors.New("disconnected")
	// ErrInvalidCommand means the command cannot be sent as given.
	ErrInvalidCommand = errors.New("invalid command")
)

// ErrDetach, as (or wrapped in) the cause of an Exec's context, means the
// keeper lets go of the command rather than cancelling it: the keeper is
// stopping or lost its lease. A durable command then keeps running on the
// soul for the next execution to reattach; any other is killed.
var ErrDetach = errors.New("detached from the command")

// Detached reports whether ctx ended with ErrDetach as its cause.
func Detached(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrDetach)
}

// Failures of durable commands, with the codes runs report.
var (
	// ErrFenced means the soul refused a durable command or a cancel of
	// an older lease epoch than one it has seen for the run: the sender
	// is a keeper that no longer holds the run.
	ErrFenced error = NewSentinel("refused: a later execution of the run holds it", "run.fenced", nil)
	// ErrCommandLost means the soul knows the durable command started but
	// it ended without an exit status: the soul rebooted, or the command
	// was killed with its supervisor.
	ErrCommandLost error = NewSentinel("the command started on the soul and was lost before it ended (reboot or kill)", "run.command_lost", nil)
	// ErrDiverged means a durable command's id names another command on
	// the soul: the resumed run would not send what the first sent.
	ErrDiverged error = NewSentinel("the command under this id on the soul is not the one sent now", "run.replay_diverged", nil)
)

// Forgetter is a Conn whose soul spools durable commands: Forget queues
// the removal of the spool entries of ids (ForgetQueue: done with a later
// command to the soul, or by the soul's expiry after SpoolTTL).
type Forgetter interface {
	Forget(ids []string)
}

// Via is implemented by a Conn that says which transport it is ("ssh",
// "agent").
type Via interface {
	Via() string
}

// ErrOutputLimit means a soul sent more output for a command than the
// keeper keeps (its per-stream limit, or too many reply parts): the
// command was cancelled on the soul and its output kept up to the limit,
// marked truncated. A soul that follows the protocol cuts its output
// itself and never causes it; the keeper does not trust it to.
var ErrOutputLimit error = NewSentinel("output over the keeper's limit", "transport.output_limit", nil)

// Coder is implemented by transport errors that carry a stable dotted code
// ("ssh.unreachable", "agent.disconnected").
type Coder interface {
	TransportCode() string
}

// Code returns the stable dotted code of the first transport error in
// err's chain, or "" when there is none.
func Code(err error) string {
	var c Coder
	if errors.As(err, &c) {
		return c.TransportCode()
	}
	return ""
}

// Sentinel is a transport's own sentinel error: it matches itself and, with
// errors.Is, the class it belongs to, and it carries its stable code.
type Sentinel struct {
	msg   string
	code  string
	class error
}

// NewSentinel returns a sentinel with message msg and code, of class (one
// of the Err* classes above, or nil for none).
func NewSentinel(msg, code string, class error) *Sentinel {
	return &Sentinel{msg: msg, code: code, class: class}
}

func (s *Sentinel) Error() string { return s.msg }

// TransportCode returns the sentinel's stable code.
func (s *Sentinel) TransportCode() string { return s.code }

// Is reports whether target is the sentinel's class.
func (s *Sentinel) Is(target error) bool { return s.class != nil && target == s.class }
