// Package wire is the protocol between the keeper's bus (internal/bus) and
// a soul's agent (internal/agent) over NATS: the subjects, how a SID
// becomes one subject token, and the messages. Both sides import it; it
// depends on nothing but the standard library.
//
// Subjects, with <tok> = Token(sid):
//
//	soulstack.soul.<tok>.exec        keeper -> soul, ExecRequest
//	soulstack.soul.<tok>.cancel      keeper -> soul, CancelRequest
//	soulstack.reply.<tok>.<id>       soul -> keeper, the output parts and
//	                                 the end of command <id>
//	soulstack.hb.<tok>               soul -> keeper, Heartbeat
//
// Replies go to a subject of the soul's own rather than to an inbox (NATS
// allow_responses), so that a reply still goes through after the soul
// reconnects to another node of a cluster, and a soul may publish only
// under its own token: it can never answer for another soul.
package wire

import (
	"encoding/base32"
	"errors"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/probe"
)

// Subject prefixes.
const (
	SoulPrefix      = "soulstack.soul."
	ReplyPrefix     = "soulstack.reply."
	HeartbeatPrefix = "soulstack.hb."
	// HeartbeatWildcard is what the keeper subscribes to.
	HeartbeatWildcard = HeartbeatPrefix + "*"
)

// DefaultHeartbeat is how often an agent sends a heartbeat; the keeper
// counts an agent gone after MissedHeartbeats intervals without one.
const (
	DefaultHeartbeat = 5 * time.Second
	MissedHeartbeats = 3
)

// ChunkSize bounds one output part, well under NATS's default 1 MiB
// max_payload.
const ChunkSize = 512 << 10

// MaxPartSize is the largest reply part a keeper takes (an output part
// is at most ChunkSize); MaxHeartbeatSize the largest heartbeat. The
// server's max_payload is higher (the keeper's commands carry their
// stdin), so the keeper checks these itself: a soul that sends more
// fails its command or is cut off.
const (
	MaxPartSize      = ChunkSize + 16<<10
	MaxHeartbeatSize = 4 << 10
)

// MaxReplies bounds the reply messages of one command (output parts and
// the end) a keeper buffers.
const MaxReplies = 256

// DefaultMaxOutput is the bytes kept of each of stdout and stderr when a
// request sets no MaxOutput: the SSH transport's default too.
const DefaultMaxOutput = 16 << 20

// MarkerSlack is how many bytes past MaxOutput a stream may carry: the
// truncation marker an agent appends to output it cut
// (transport.Capture).
const MarkerSlack = 1 << 10

// tokenEncoding spells a SID as one subject token: base32 with the
// extended-hex alphabet, lower case, no padding ([0-9a-v]+). SIDs hold
// dots (FQDNs), which NATS reads as token separators, so they are never
// put in a subject as they are.
var tokenEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// Token returns the subject token of sid.
func Token(sid string) string { return tokenEncoding.EncodeToString([]byte(sid)) }

// ErrBadToken means a subject token is not one Token made.
var ErrBadToken = errors.New("not a soul subject token")

// SID returns the SID a subject token stands for.
func SID(token string) (string, error) {
	b, err := tokenEncoding.DecodeString(token)
	if err != nil || len(b) == 0 || Token(string(b)) != token {
		return "", ErrBadToken
	}
	return string(b), nil
}

// TraceHeader is the message header that carries a command's W3C trace
// context (traceparent) from the keeper to the agent, when tracing is on.
const TraceHeader = "traceparent"

// ExecSubject is where commands for sid are sent.
func ExecSubject(sid string) string { return SoulPrefix + Token(sid) + ".exec" }

// CancelSubject is where cancellations for sid are sent.
func CancelSubject(sid string) string { return SoulPrefix + Token(sid) + ".cancel" }

// ReplySubject is where sid's agent sends the output of command id (a
// NATS token: no dots or wildcards).
func ReplySubject(sid, id string) string { return ReplyPrefix + Token(sid) + "." + id }

// ReplyWildcard is every reply subject of sid: what its user may publish.
func ReplyWildcard(sid string) string { return ReplyPrefix + Token(sid) + ".>" }

// ValidID reports whether id can be the last token of a reply subject.
func ValidID(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsAny(id, ". *>\t\r\n")
}

// HeartbeatSubject is where sid's agent sends heartbeats.
func HeartbeatSubject(sid string) string { return HeartbeatPrefix + Token(sid) }

// HeartbeatSID returns the SID of a heartbeat subject.
func HeartbeatSID(subject string) (string, error) {
	tok, ok := strings.CutPrefix(subject, HeartbeatPrefix)
	if !ok || strings.Contains(tok, ".") {
		return "", ErrBadToken
	}
	return SID(tok)
}

// ExecRequest is one command (transport.Command) for an agent.
type ExecRequest struct {
	// ID names the command for CancelRequest.
	ID     string            `json:"id"`
	Argv   []string          `json:"argv,omitempty"`
	Script string            `json:"script,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Dir    string            `json:"dir,omitempty"`
	Stdin  []byte            `json:"stdin,omitempty"`
	Sudo   bool              `json:"sudo,omitempty"`
	// MaxOutput caps the bytes kept of each of stdout and stderr.
	MaxOutput int `json:"max_output"`
	// TimeoutMS, when positive, is how long the command may run: the
	// agent kills it after that even if the keeper's cancel never comes.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Durable makes the command outlive the keeper and the connection:
	// the agent spools its result under Durable.ID and answers a request
	// with an id it knows by attaching, never by starting it again.
	Durable *Durable `json:"durable,omitempty"`
	// Probe is the question Argv answers (transport.Command.Probe).
	Probe *probe.Request `json:"probe,omitempty"`
}

// Durable is a durable command's identity (transport.Durable).
type Durable struct {
	ID     string   `json:"id"`
	Run    string   `json:"run"`
	Epoch  int64    `json:"epoch"`
	Digest string   `json:"digest"`
	Forget []string `json:"forget,omitempty"`
}

// Codes an agent ends a durable command with when it did not run it.
const (
	CodeFenced   = "run.fenced"
	CodeLost     = "run.command_lost"
	CodeDiverged = "run.replay_diverged"
	// CodeElsewhere: the id is in the SSH supervisor's spool on this host
	// (an earlier execution sent it through a shell); the keeper sends it
	// there to attach.
	CodeElsewhere = "run.command_elsewhere"
)

// Reply parts: the header PartHeader of each reply message says what it
// holds. Output parts carry raw bytes, in order; the last message is
// PartEnd with an ExecEnd.
const (
	PartHeader = "Soulstack-Part"
	PartStdout = "stdout"
	PartStderr = "stderr"
	PartEnd    = "end"
)

// ExecEnd is how a command ended.
type ExecEnd struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// Cancelled is set when the command was killed by a CancelRequest or
	// its timeout.
	Cancelled bool `json:"cancelled,omitempty"`
	// Code and Error report a command the agent could not run at all
	// ("agent.invalid_command", or for a durable one CodeFenced, CodeLost,
	// CodeDiverged).
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Reattached says a durable command was already running or finished:
	// this request attached to it.
	Reattached bool `json:"reattached,omitempty"`
}

// CancelRequest asks an agent to kill command ID's process group. For a
// durable command, Run and Epoch fence it: refused when the agent has seen
// a later epoch of the run.
type CancelRequest struct {
	ID    string `json:"id"`
	Run   string `json:"run,omitempty"`
	Epoch int64  `json:"epoch,omitempty"`
}

// Heartbeat is what an agent sends every IntervalMS milliseconds.
type Heartbeat struct {
	SID        string `json:"sid"`
	IntervalMS int64  `json:"interval_ms"`
	Version    string `json:"version,omitempty"`
	// Instance is random per agent process: a heartbeat with another
	// instance than the last says the agent restarted, so the keeper ends
	// the commands it sent the one before (they are reattached through
	// the new one) without waiting for missed heartbeats.
	Instance string `json:"instance,omitempty"`
}
