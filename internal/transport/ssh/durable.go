package ssh

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/transport"
)

// A durable command (transport.Command.Durable) starts under a small
// supervisor, a POSIX shell script sent with the command in the same exec
// request as any other command: no extra round trip. The supervisor keeps
// a spool on the soul,
//
//	root:        /var/lib/soulstack/spool
//	other users: ${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/spool
//
// (a persistent directory, not the user's runtime dir, which logind
// empties when the user's last session ends and every boot), with, per
// command id, the command's digest, the boot it started in, its PID, its
// output (each stream cut at MaxOutput+1 bytes, the rest read and dropped)
// and, once it has ended, its exit status. The
// command runs in a session of its own (setsid), so it outlives the SSH
// session, the connection and the keeper.
//
// A second exec with the same id never starts the command again: it
// attaches, waits for the exit status if the command still runs, and
// returns the spooled result. The supervisor says what it did on the first
// lines of stderr, each led by the exec's marker word:
//
//	<marker> pid <pid> new|attached    the command's process group
//	<marker> end <status> [<signal>]   it ended; its stdout and stderr follow
//	<marker> fenced <epoch>            refused: a later epoch of the run was seen
//	<marker> lost <why>                started, and gone without an exit status
//	<marker> diverged                  the id names another command
//	<marker> nospool                   the spool cannot be written
//	<marker> elsewhere                 the id is in the executor's spool (Executor)
//
// The spool holds, per command id, the files <id>.meta (digest, boot id,
// the supervisor's PID), <id>.pid, <id>.out, <id>.err, <id>.rc ("<status>
// end") and the FIFOs <id>.o and <id>.e. The first exec claims the id by
// creating <id>.meta with noclobber (O_EXCL): of two execs of one id, one
// starts the command and the other attaches.
//
// Fencing: each exec leaves the run's epoch in the spool ("runs/<run>.e<N>",
// only ever added), and refuses to start, attach or kill for an older one.
// Spool entries are removed when the keeper says it stored their results
// (Forget, carried by a later command) and otherwise expire after
// transport.SpoolTTL, swept by the first durable command of each connection.
var supervisorScript = `mk=$1 S=$2 I=$3 R=$4 E=$5 G=$6 M=$7 F=$8 W=$9
shift 9
X=$1 CHILD=$2 IN=$3
shift 3
[ -n "$S" ] || S=${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/spool
[ -n "$X" ] || ` + executorSpool + `
umask 077
[ -d "$S/runs" ] || mkdir -p "$S/runs" 2>/dev/null || { echo "$mk nospool" >&2; exit 125; }
[ -z "$F" ] || (cd "$S" && for f in $F; do rm -rf -- "$f" "$f".*; done)
if [ "$W" = 1 ]; then
find "$S" -mindepth 1 -maxdepth 1 ! -name runs -mmin +` + spoolTTLMinutes + ` -exec rm -rf {} + 2>/dev/null
find "$S/runs" -mindepth 1 -maxdepth 1 -mmin +` + spoolTTLMinutes + ` -exec rm -f {} + 2>/dev/null
fi
` + fenceCheck(`echo "$mk fenced ${ep##*.e}" >&2`) + `
[ -e "$S/runs/$R.e$E" ] || : >"$S/runs/$R.e$E"
read boot 2>/dev/null </proc/sys/kernel/random/boot_id || boot=unknown
D=$S/$I T=/dev/null
if [ "$IN" = 1 ]; then T=$S/.in.$$; cat >"$T" || { rm -f "$T"; echo "$mk nospool" >&2; exit 125; }; fi
while :; do
set -C
if { true >"$D.meta"; } 2>/dev/null; then
set +C
if [ -e "$X/$I" ]; then rm -f "$D.meta"; [ "$T" = /dev/null ] || rm -f "$T"; echo "$mk elsewhere" >&2; exit 125; fi
echo "$G $boot $$" >"$D.meta"
mkfifo "$D.o" "$D.e" || { echo "$mk nospool" >&2; exit 125; }
exec 3<"$T"
[ "$T" = /dev/null ] || rm -f "$T"
setsid /bin/sh -c "$CHILD" sh "$D" "$M" "$1" <&3 3<&- >/dev/null 2>&1 &
c=$!
exec 3<&-
echo "$mk pid $c new" >&2
wait $c
break
fi
set +C
[ "$T" = /dev/null ] || rm -f "$T"
read g b o 2>/dev/null <"$D.meta" || g=
if [ -n "$g" ] && [ "$g" != "$G" ]; then echo "$mk diverged" >&2; exit 125; fi
n=0 c=
while :; do
read c 2>/dev/null <"$D.pid" || c=
[ -n "$c" ] && break
read g b o 2>/dev/null <"$D.meta" || o=
if [ -z "$o" ] || ! kill -0 "$o" 2>/dev/null; then n=$((n+1)); fi
if [ $n -gt 20 ]; then rm -f "$D".*; echo "$mk lost unstarted" >&2; exit 125; fi
sleep 0.1
done
rc=
read rc fin 2>/dev/null <"$D.rc" || fin=
if [ "$fin" != end ] && [ "$b" != "$boot" ]; then echo "$mk lost reboot" >&2; exit 125; fi
echo "$mk pid $c attached" >&2
while :; do
read rc fin 2>/dev/null <"$D.rc" || fin=
[ "$fin" = end ] && break
if ! kill -0 "$c" 2>/dev/null; then
sleep 0.2
read rc fin 2>/dev/null <"$D.rc" || fin=
[ "$fin" = end ] && break
echo "$mk lost killed" >&2; exit 125
fi
sleep 0.2
done
break
done
read rc fin 2>/dev/null <"$D.rc" || fin=
[ "$fin" = end ] || { echo "$mk lost killed" >&2; exit 125; }
sig=
[ "$rc" -gt 128 ] && sig=$(kill -l $((rc - 128)) 2>/dev/null)
echo "$mk end $rc $sig" >&2
[ ! -s "$D.out" ] || cat "$D.out"
[ ! -s "$D.err" ] || cat "$D.err" >&2
exit $rc`

// fenceCheck is the shell that refuses what it guards (onRefuse, then exit
// 125) when the spool $S has seen a later epoch of run $R than $E: the
// supervisor's start or attach, and a kill.
func fenceCheck(onRefuse string) string {
	return `for ep in "$S/runs/$R".e*; do [ -e "$ep" ] || continue; [ "${ep##*.e}" -gt "$E" ] && { ` + onRefuse + `; exit 125; }; done`
}

// childScript is the detached command under the supervisor: it writes its
// own PID, runs the command line with its output through the spool's
// FIFOs into files cut at max+1 bytes (what comes past that is read and
// dropped, so the command goes on as it would over a plain session), and
// writes "<status> end" last, in one write: a reader that does not see
// "end" knows the command has not ended.
const childScript = `D=$1 M=$2
echo $$ >"$D.pid"
{ head -c $((M + 1)) >"$D.out"; exec cat >/dev/null; } <"$D.o" &
{ head -c $((M + 1)) >"$D.err"; exec cat >/dev/null; } <"$D.e" &
eval "$3" >"$D.o" 2>"$D.e"
rc=$?
wait
echo "$rc end" >"$D.rc"`

// spoolTTLMinutes is transport.SpoolTTL for find -mmin.
var spoolTTLMinutes = strconv.Itoa(int(transport.SpoolTTL / time.Minute))

// rootSpool is the spool of a root login.
const rootSpool = "/var/lib/soulstack/spool"

// spoolDir is the spool the supervisor uses for the client's user: empty
// means the user's own state directory.
func (c *Client) spoolDir() string {
	if c.opts.Spool != "" {
		return c.opts.Spool
	}
	if c.target.User == "root" {
		return rootSpool
	}
	return ""
}

// durableState is what a client keeps for durable commands: the spool
// entries to forget with its next durable command, and whether its spool
// was swept on this connection.
type durableState struct {
	forget transport.ForgetQueue // under the client's one soul, key ""
	swept  atomic.Bool
}

// Forget queues the removal of the spool entries of ids with the client's
// next durable command.
func (c *Client) Forget(ids []string) { c.durable.forget.Add("", ids) }

// Via says the client is the SSH transport.
func (c *Client) Via() string { return "ssh" }

// durableLine is the command line of a durable command: the supervisor,
// its arguments (forget: the spool entries to remove), and the command's
// own line as one word.
func (c *Client) durableLine(marker, line string, hasStdin bool, d *transport.Durable, forget []string) (string, error) {
	if !transport.ValidDurableID(d.ID) || !transport.ValidDurableID(d.Run) || strings.ContainsAny(d.Digest, " \t\n'\"\\") {
		return "", fmt.Errorf("%w: durable command id %q, run %q or digest is not one the spool takes", ErrInvalidCommand, d.ID, d.Run)
	}
	w, in := "0", "0"
	if !c.durable.swept.Swap(true) {
		w = "1"
	}
	if hasStdin {
		in = "1"
	}
	max := c.opts.MaxOutput
	args := []string{"/bin/sh", "-c", supervisorScript, "sh", marker, c.spoolDir(), d.ID, d.Run, strconv.FormatInt(d.Epoch, 10), d.Digest,
		strconv.Itoa(max), strings.Join(forget, " "), w, c.opts.Executor.spoolDir(), childScript, in, line}
	out := "exec " + quoteArgs(args)
	if len(out) > maxCommandLine {
		return "", fmt.Errorf("%w: command line is %d bytes with its supervisor, over the %d a remote shell accepts", ErrInvalidCommand, len(out), maxCommandLine)
	}
	return out, nil
}

// supervised is what the supervisor said on its marker lines.
type supervised struct {
	pid      int
	attached bool
	ended    bool
	status   int
	signal   string
	refusal  string // fenced, lost, diverged, nospool: the whole line after the marker
}

// parse reads one marker line (without the marker).
func (s *supervised) parse(line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	switch f[0] {
	case "pid":
		if len(f) >= 2 {
			s.pid, _ = strconv.Atoi(f[1])
		}
		s.attached = len(f) >= 3 && f[2] == "attached"
	case "end":
		s.ended = true
		if len(f) >= 2 {
			s.status, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 3 {
			s.signal = f[2]
		}
	default:
		if pid, err := strconv.Atoi(f[0]); err == nil { // a plain command's "<marker> <pid>"
			s.pid = pid
			return
		}
		s.refusal = line
	}
}

// refused turns the supervisor's refusal into the transport error.
func (s *supervised) refused() error {
	f := strings.Fields(s.refusal)
	if len(f) == 0 {
		return nil
	}
	switch f[0] {
	case "fenced":
		return fmt.Errorf("%w (the soul has seen epoch %s of the run)", transport.ErrFenced, strings.Join(f[1:], " "))
	case "lost":
		why := map[string]string{"reboot": "the soul rebooted since it started", "killed": "it was killed without an exit status", "unstarted": "its supervisor died before it started"}[strings.Join(f[1:], " ")]
		return fmt.Errorf("%w: %s", transport.ErrCommandLost, why)
	case "diverged":
		return transport.ErrDiverged
	case "elsewhere":
		return errElsewhere
	case "nospool":
		return fmt.Errorf("%w: the soul's command spool cannot be written (%s for root, ~/.local/state/soulstack/spool otherwise)", ErrInvalidCommand, rootSpool)
	}
	return fmt.Errorf("%w: the supervisor said %q", ErrDisconnected, s.refusal)
}

// runDurable runs a durable command line (durableLine) and reads the
// supervisor's account of it. When ctx ends because the keeper lets go
// (transport.Detached), the session is closed and the command keeps
// running; any other end of ctx kills its process group, fenced by the
// run's epoch.
func (c *Client) runDurable(ctx context.Context, marker, line string, stdin []byte, sudo bool, d *transport.Durable) (Result, error) {
	st, err := c.start(ctx, marker, line, stdin)
	if err != nil {
		return Result{}, err
	}
	defer st.sess.Close()
	var waitErr error
	select {
	case waitErr = <-st.done:
	case <-ctx.Done():
		if !transport.Detached(ctx) {
			select {
			case <-st.sniffer.found:
				c.killDurable(ctx, st.sniffer.get(), sudo, d)
			case <-st.done:
			case <-time.After(cancelGrace):
			}
		}
		st.sess.Close()
		return st.result(), context.Cause(ctx)
	}
	res := st.result()
	sv := st.sniffer.supervised()
	if err := sv.refused(); err != nil {
		return res, err
	}
	if !sv.ended {
		var exitErr *gossh.ExitError
		if waitErr != nil && !errors.As(waitErr, &exitErr) {
			return res, fmt.Errorf("%w: %v", ErrDisconnected, waitErr)
		}
		// The session ended without the supervisor's end line: it was cut
		// on the soul's side (sshd killed the session).
		return res, fmt.Errorf("%w: the session ended before the command's end was read", ErrDisconnected)
	}
	res.ExitCode, res.Signal, res.Reattached = sv.status, sv.signal, sv.attached
	return res, nil
}

// killDurable sends SIGKILL to the durable command's process group unless
// the soul has seen a later epoch of its run, with sudo when the command
// ran under sudo; best effort, bounded by cancelGrace.
func (c *Client) killDurable(ctx context.Context, pid int, sudo bool, d *transport.Durable) {
	if pid <= 1 {
		return
	}
	kill := "kill -s KILL -- -" + strconv.Itoa(pid)
	if sudo {
		kill = "exec env LC_ALL=C sudo -n -- " + kill
	}
	script := `S=$1 R=$2 E=$3
[ -n "$S" ] || S=${XDG_STATE_HOME:-$HOME/.local/state}/soulstack/spool
` + fenceCheck(":") + "\n" + kill
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	sess, err := c.conn.NewSession()
	if err != nil {
		return
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	sess.Run("exec " + quoteArgs([]string{"/bin/sh", "-c", script, "sh", c.spoolDir(), d.Run, strconv.FormatInt(d.Epoch, 10)}))
}
