package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/transport"
)

// Commands that outlive the keeper. Every command a soul-side step of an
// apply run sends is durable (transport.Durable), except the read-only
// probes modules mark (module.Command.ReadOnly), which are run again: it has an id made of the
// run, the step, the attempt, its place among the target's commands and
// the soul, so that the same command of a resumed run has the same id; its
// write-ahead record is stored before it is sent (Recorder.Command, fenced
// by the run's lease epoch); the soul runs it detached and spools its
// result. A resumed execution re-runs an interrupted step: modules send
// the same commands in the same order, each one already on the soul is
// reattached (its spooled result returned, or waited for), and only those
// that never reached the soul start. A connection cut mid-command is
// redialled and the command reattached. Once the step's results are stored
// (its checkpoint), the spool entries are forgotten.

// ReattachFor bounds how long a target whose soul went away mid-command
// keeps trying to reach it again, when its step has no timeout of its
// own; past it the target fails run.soul_unreachable.
const ReattachFor = 5 * time.Minute

// redialEvery is the pause between two attempts to reach a soul again.
const redialEvery = 500 * time.Millisecond

// durableTarget numbers one target's commands and records each before it
// is sent.
type durableTarget struct {
	r    *run
	step *stepRef
	sid  string
	// sentVia is the transport an earlier execution sent this target's
	// commands through ("" when none did).
	sentVia string

	mu      sync.Mutex
	attempt int
	n       int
	ids     []string // sent, to forget once the step's results are stored
}

// stepRef is what a durable target needs of its step.
type stepRef struct {
	index int
	name  string
}

// begin starts attempt (from 1) of the module on the target: its commands
// are numbered from 1 again.
func (d *durableTarget) begin(attempt int) {
	d.mu.Lock()
	d.attempt, d.n = attempt, 0
	d.mu.Unlock()
}

// next assigns cmd its id and stores its write-ahead record.
func (d *durableTarget) next(ctx context.Context, cmd transport.Command, via string) (*transport.Durable, error) {
	d.mu.Lock()
	if d.attempt == 0 {
		d.attempt = 1
	}
	d.n++
	attempt, n := d.attempt, d.n
	d.mu.Unlock()
	h := sha256.Sum256([]byte(d.sid))
	id := fmt.Sprintf("%s.%d.%d.%d.%s", d.r.id, d.step.index, attempt, n, hex.EncodeToString(h[:8]))
	digest := commandDigest(cmd)
	err := d.r.rec.Command(ctx, store.RunCommand{ID: id, StepIndex: d.step.index, SID: d.sid, Attempt: attempt, N: n, Digest: digest, Transport: via})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.ids = append(d.ids, id)
	d.mu.Unlock()
	return &transport.Durable{ID: id, Run: d.r.id, Epoch: d.r.epoch, Digest: digest}, nil
}

// sent returns the ids sent so far and forgets them.
func (d *durableTarget) sent() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := d.ids
	d.ids = nil
	return ids
}

// commandDigest is a hash of what a command runs: its program and
// arguments or script, directory, sudo, and the names of its environment.
// Its input and the values of its environment are left out: a module may
// put fresh random bytes there (a password's salt) when it builds the
// same command again, which is no reason to refuse reattaching it.
func commandDigest(cmd transport.Command) string {
	h := sha256.New()
	for _, a := range cmd.Argv {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	names := make([]string, 0, len(cmd.Env))
	for k := range cmd.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	fmt.Fprintf(h, "\x01%s\x01%s\x01%v\x01%s", cmd.Script, cmd.Dir, cmd.Sudo, strings.Join(names, "\x00"))
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// transportOf names the transport of conn ("ssh" when it does not say).
func transportOf(conn transport.Conn) string {
	if v, ok := conn.(transport.Via); ok {
		return v.Via()
	}
	return "ssh"
}

// execDurable runs cmd on the target's connection and, after a cut
// connection, redials (until the step's deadline, or ReattachFor) and
// sends it again. A command that may change the soul (readOnly false) is
// durable: recorded before it is sent, and reattached on the soul when
// sent again; a read-only one (a probe) is a plain command, simply run
// again.
func (t *soulTarget) execDurable(ctx context.Context, cmd transport.Command, readOnly bool) (transport.Result, error) {
	d := t.durable
	what := "a read-only command"
	if !readOnly {
		dur, err := d.next(ctx, cmd, transportOf(t.conn))
		if err != nil {
			return transport.Result{}, err
		}
		cmd.Durable, what = dur, "command "+dur.ID
	}
	why := "resumed"
	for {
		res, err := t.conn.Exec(ctx, cmd)
		switch {
		case err == nil:
			if res.Reattached {
				d.r.rec.Event(d.step.name, d.sid, client.CommandReattachedData{Command: cmd.Durable.ID, Transport: transportOf(t.conn), Epoch: d.r.epoch, Why: why})
			}
			return res, nil
		case errors.Is(err, transport.ErrFenced):
			d.r.fenced(ctx, d, cmd.Durable, err)
			return res, err
		case errors.Is(err, transport.ErrUnreachable) && ctx.Err() == nil && t.redial != nil:
			// Nothing took the command (an agent that was present has gone,
			// its soul rebooting, say): wait for the soul as for a cut.
			d.r.rec.Event(d.step.name, d.sid, client.LogData{Message: fmt.Sprintf("%s could not be sent to %s (%s); reconnecting to send it", what, d.sid, transport.Code(err))})
			// The bus may still count the agent present for a moment.
			select {
			case <-ctx.Done():
				return res, err
			case <-d.r.e.clock().After(redialEvery):
			}
		case !errors.Is(err, transport.ErrDisconnected) || ctx.Err() != nil || t.redial == nil:
			return res, err
		default:
			d.r.rec.Event(d.step.name, d.sid, client.LogData{Message: fmt.Sprintf("the connection to %s was cut while %s ran (%s); reconnecting to send it again", d.sid, what, transport.Code(err))})
		}
		conn, rerr := t.reconnect(ctx, err)
		if rerr != nil {
			return res, rerr
		}
		t.conn, why = conn, "redialled"
	}
}

// reconnect dials the target's soul again through the transport the
// command went by, until it answers, the step's context ends, or
// ReattachFor passes; then it fails run.soul_unreachable, or
// run.soul_gone when the soul was destroyed meanwhile.
func (t *soulTarget) reconnect(ctx context.Context, cut error) (transport.Conn, error) {
	clock := t.durable.r.e.clock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = clockwork.WithTimeout(ctx, clock, ReattachFor)
		defer cancel()
	}
	last := cut
	for {
		conn, err := t.redial(ctx)
		if err == nil {
			return conn, nil
		}
		var me *module.Error
		if errors.As(err, &me) && me.Code == "soul.destroyed" {
			return nil, &module.Error{Code: "run.soul_gone", Message: fmt.Sprintf("soul %s was destroyed while its command ran: what it did cannot be known", t.sid), Err: err}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, &module.Error{Code: "run.soul_unreachable", Message: fmt.Sprintf("soul %s went away while its command ran and could not be reached again before the step's deadline: %v", t.sid, last), Err: last}
		case <-clock.After(redialEvery):
		}
	}
}

// fenced audits a command the soul refused for an older epoch: this
// execution no longer holds the run (another keeper took it over).
func (r *run) fenced(ctx context.Context, d *durableTarget, dur *transport.Durable, err error) {
	r.log.Warn("a soul refused this execution's command: a later execution holds the run", "sid", d.sid, "command", dur.ID, "epoch", dur.Epoch, "err", err)
	payload := map[string]any{"run": r.id, "sid": d.sid, "command": dur.ID, "epoch": dur.Epoch, "error": err.Error()}
	_ = retryStore(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return r.souls.store.AuditRecord(ctx, store.AuditParams{Actor: store.ActorKeeper, Action: "command.fenced", Object: "run/" + r.id, Payload: payload})
	})
}

// forget tells each target's connection that the spool entries of the
// commands it sent can go: the step's results are stored.
func (r *run) forget(targets []*soulTarget) {
	for _, t := range targets {
		if t == nil || t.durable == nil {
			continue
		}
		ids := t.durable.sent()
		if f, ok := t.conn.(transport.Forgetter); ok && len(ids) > 0 {
			f.Forget(ids)
		}
	}
}

// sentVia maps (step, soul) (viaKey) to the transport earlier executions
// sent durable commands through.
func sentVia(cmds []store.RunCommand) map[string]string {
	m := make(map[string]string, len(cmds))
	for _, c := range cmds {
		m[viaKey(c.StepIndex, c.SID)] = c.Transport
	}
	return m
}

func viaKey(step int, sid string) string { return fmt.Sprintf("%d/%s", step, sid) }
