package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/atomicfile"
	"github.com/soulstack/soulstack/internal/transport"
)

// spool keeps the agent's durable commands (wire.Durable): those running in
// this process, and on disk, by command id, each one's digest and boot and,
// once it ended, its result (its output is bounded by the request's
// MaxOutput, so an entry is at most twice that). A command runs under the
// agent's own context, not the request's: it goes on when the keeper or the
// bus connection goes away, and its result waits in the spool for the
// request that attaches to it. The spool also keeps the highest lease epoch
// seen of each run ("runs/<run>.e<N>", only ever added), which fences
// commands and cancels of older executions.
type spool struct {
	dir  string
	boot string

	mu      sync.Mutex
	running map[string]*durableRun // by command id
	epochs  map[string]int64       // by run: the highest epoch seen
}

// durableRun is a durable command running in this process.
type durableRun struct {
	digest  string
	done    chan struct{} // closed once it ended and its result is spooled
	cancel  context.CancelFunc
	replies []replyFunc // of the requests waiting for it, the starter's first
	// attached: no request of this process started it (it runs under an
	// earlier executor's supervisor).
	attached bool
}

// meta is what the spool keeps of a command from its start.
type meta struct {
	Digest string `json:"digest"`
	Boot   string `json:"boot"`
	Run    string `json:"run"`
	Epoch  int64  `json:"epoch"`
}

func newSpool(dir string) (*spool, error) {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o700); err != nil {
		return nil, fmt.Errorf("agent spool: %w", err)
	}
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return &spool{dir: dir, boot: strings.TrimSpace(string(b)), running: map[string]*durableRun{}, epochs: map[string]int64{}}, nil
}

// sweep removes entries older than transport.SpoolTTL that no command of this
// process holds.
func (s *spool) sweep(now time.Time) {
	for _, sub := range []string{"", "runs"} {
		entries, _ := os.ReadDir(filepath.Join(s.dir, sub))
		for _, e := range entries {
			if sub == "" && e.Name() == "runs" {
				continue
			}
			info, err := e.Info()
			if err != nil || now.Sub(info.ModTime()) < transport.SpoolTTL {
				continue
			}
			s.mu.Lock()
			_, live := s.running[e.Name()]
			s.mu.Unlock()
			if !live {
				_ = os.RemoveAll(filepath.Join(s.dir, sub, e.Name()))
			}
		}
	}
}

// fence records epoch for run unless a later one was seen, which it
// returns with false.
func (s *spool) fence(run string, epoch int64) (int64, bool) {
	if !transport.ValidDurableID(run) {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, ok := s.epochs[run]
	if !ok {
		matches, _ := filepath.Glob(filepath.Join(s.dir, "runs", run+".e*"))
		for _, m := range matches {
			if n, err := strconv.ParseInt(m[strings.LastIndex(m, ".e")+2:], 10, 64); err == nil && n > seen {
				seen = n
			}
		}
	}
	if seen > epoch {
		s.epochs[run] = seen
		return seen, false
	}
	if epoch > seen || !ok {
		if f, err := os.OpenFile(filepath.Join(s.dir, "runs", run+".e"+strconv.FormatInt(epoch, 10)), os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		}
	}
	s.epochs[run] = max(seen, epoch)
	return epoch, true
}

// forget removes the spool entries of ids, unless their command still runs.
func (s *spool) forget(ids []string) {
	for _, id := range ids {
		if !transport.ValidDurableID(id) {
			continue
		}
		s.mu.Lock()
		_, live := s.running[id]
		s.mu.Unlock()
		if !live {
			_ = os.RemoveAll(filepath.Join(s.dir, id))
		}
	}
}

// durable runs req (which has Durable) or attaches to it. An outcome it
// can give at once (refused, or spooled by an earlier run) is returned;
// otherwise the command runs (or already runs, under a supervisor an
// earlier executor started) and a goroutine replies with reply and to
// every request that attached meanwhile once it ended; durable returns
// its cancel and a channel closed once it has ended.
func (e *executor) durable(req wire.ExecRequest, reply replyFunc) (*Outcome, context.CancelFunc, <-chan struct{}) {
	s, d := e.spool, req.Durable
	if !transport.ValidDurableID(d.ID) {
		return refused("agent.invalid_command", fmt.Sprintf("durable command id %q is not one the spool takes", d.ID))
	}
	s.forget(d.Forget)
	e.forgetShell(d.Forget)
	if seen, ok := s.fence(d.Run, d.Epoch); !ok {
		return refused(wire.CodeFenced, fmt.Sprintf("refused: the agent has seen epoch %d of run %s, this command is of epoch %d", seen, d.Run, d.Epoch))
	}
	if r, ok := s.attach(d, reply); r != nil || !ok {
		if !ok {
			return refused(wire.CodeDiverged, errDivergedText)
		}
		return nil, r.cancel, r.done
	}
	entry := filepath.Join(s.dir, d.ID)
	if b, err := os.ReadFile(filepath.Join(entry, "meta.json")); err == nil {
		return e.attachSpooled(d, entry, b, reply)
	}
	if err := e.claimEntry(d, entry); err != nil {
		return err.answer()
	}
	return e.start(req, entry, reply)
}

// errDivergedText is the refusal of another command under a known id.
const errDivergedText = "the command under this id is not the one sent now"

// refused is durable's answer for a command it does not run.
func refused(code, msg string) (*Outcome, context.CancelFunc, <-chan struct{}) {
	return &Outcome{ExecEnd: wire.ExecEnd{Code: code, Error: msg}}, nil, nil
}

// attachSpooled answers a command whose entry (its meta.json metaJSON)
// an earlier executor made: from its spooled outcome, by waiting for the
// supervisor still running it, or as lost.
func (e *executor) attachSpooled(d *wire.Durable, entry string, metaJSON []byte, reply replyFunc) (*Outcome, context.CancelFunc, <-chan struct{}) {
	s := e.spool
	var m meta
	_ = json.Unmarshal(metaJSON, &m)
	if m.Digest != d.Digest {
		return refused(wire.CodeDiverged, errDivergedText)
	}
	if out, err := readResult(entry); err == nil {
		out.Reattached = true
		return &out, nil, nil
	}
	// Still running under the supervisor an earlier executor started.
	if sup, ok := readSupervisorID(entry); ok && sup.alive() {
		r := &durableRun{digest: d.Digest, done: make(chan struct{}), cancel: func() { sup.cancel(entry) }, replies: []replyFunc{reply}, attached: true}
		if other, ok := s.claim(d.ID, r, reply); other != nil || !ok {
			if !ok {
				return refused(wire.CodeDiverged, errDivergedText)
			}
			return nil, other.cancel, other.done
		}
		// (Not `go e.finish(…, awaitSupervisor(…))`: that waits here, in
		// the reader of the executor's requests, until the command ends.)
		go func() { e.finish(d.ID, r, awaitSupervisor(e.ctx, entry, sup)) }()
		return nil, r.cancel, r.done
	}
	why := "the agent restarted since it started"
	if m.Boot != s.boot {
		why = "the soul rebooted since it started"
	}
	return refused(wire.CodeLost, "the command started and was lost before it ended: "+why)
}

// refusal is why claimEntry did not claim a command's entry.
type refusal struct{ code, msg string }

func (r *refusal) answer() (*Outcome, context.CancelFunc, <-chan struct{}) {
	return refused(r.code, r.msg)
}

// claimEntry makes the spool entry of a command no execution sent here
// before, with its meta.json, unless the shell supervisor's spool has the
// id: the supervisor claims first and looks here next, and this side
// looks there again once it claimed, so of two executions racing on both
// paths neither starts it twice.
func (e *executor) claimEntry(d *wire.Durable, entry string) *refusal {
	elsewhere := func() bool {
		_, err := os.Lstat(filepath.Join(e.shellSpool, d.ID+".meta"))
		return e.shellSpool != "" && err == nil
	}
	inShell := &refusal{wire.CodeElsewhere, "an earlier execution sent the command through a shell: its spool is the shell supervisor's"}
	if elsewhere() {
		return inShell
	}
	if err := os.Mkdir(entry, 0o700); err != nil {
		return &refusal{"agent.invalid_command", "agent spool: " + err.Error()}
	}
	if elsewhere() {
		_ = os.RemoveAll(entry)
		return inShell
	}
	mb, _ := json.Marshal(meta{Digest: d.Digest, Boot: e.spool.boot, Run: d.Run, Epoch: d.Epoch})
	if err := atomicfile.Replace(filepath.Join(entry, "meta.json"), mb, 0o600); err != nil {
		_ = os.RemoveAll(entry)
		return &refusal{"agent.invalid_command", "agent spool: " + err.Error()}
	}
	return nil
}

// start runs a claimed command: under a supervisor of its own, or, with
// a test's own Exec (no supervisor), in this process, ending with it.
func (e *executor) start(req wire.ExecRequest, entry string, reply replyFunc) (*Outcome, context.CancelFunc, <-chan struct{}) {
	s, d := e.spool, req.Durable
	r := &durableRun{digest: d.Digest, done: make(chan struct{}), replies: []replyFunc{reply}}
	if e.supervisor != nil {
		sup, spooled, err := e.supervise(entry, req)
		if err != nil {
			_ = os.RemoveAll(entry)
			return refused("agent.invalid_command", "start the command's supervisor: "+err.Error())
		}
		r.cancel = func() { sup.id.cancel(entry) }
		s.mu.Lock()
		s.running[d.ID] = r
		s.mu.Unlock()
		go func() {
			select {
			case <-spooled:
			case <-sup.exited:
			}
			out, err := readResult(entry)
			if err != nil {
				out = Outcome{ExecEnd: wire.ExecEnd{Code: wire.CodeLost, Error: "the command's supervisor ended without its outcome"}}
			}
			e.finish(d.ID, r, out)
		}()
		return nil, r.cancel, r.done
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r.cancel = cancel
	s.mu.Lock()
	s.running[d.ID] = r
	s.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer cancel()
		out := e.run(ctx, req)
		if b, err := json.Marshal(out); err == nil {
			if err := atomicfile.Replace(filepath.Join(entry, resultFile), b, 0o600); err != nil {
				e.log.Warn("spool a command's result", "command", d.ID, "err", err)
			}
		}
		e.finish(d.ID, r, out)
	}()
	return nil, cancel, r.done
}

// forgetShell removes the shell supervisor's spool entries of ids (the
// keeper forgets a command whichever way it went), unless one's command
// still runs there.
func (e *executor) forgetShell(ids []string) {
	if e.shellSpool == "" {
		return
	}
	for _, id := range ids {
		if !transport.ValidDurableID(id) {
			continue
		}
		base := filepath.Join(e.shellSpool, id)
		if b, err := os.ReadFile(base + ".rc"); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), " end") {
			continue // running, or not there
		}
		for _, ext := range []string{".meta", ".pid", ".out", ".err", ".rc", ".o", ".e"} {
			_ = os.Remove(base + ext)
		}
	}
}

// attach adds reply to the command of d running in this process: nil when
// none runs, false when the one running is another command.
func (s *spool) attach(d *wire.Durable, reply replyFunc) (*durableRun, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.running[d.ID]
	if r == nil {
		return nil, true
	}
	if r.digest != d.Digest {
		return nil, false
	}
	r.replies = append(r.replies, reply)
	return r, true
}

// claim records r as the command of id unless another request of this
// process got there first: that one is returned, reply added to it (false
// when it is another command).
func (s *spool) claim(id string, r *durableRun, reply replyFunc) (*durableRun, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other := s.running[id]; other != nil {
		if other.digest != r.digest {
			return nil, false
		}
		other.replies = append(other.replies, reply)
		return other, true
	}
	s.running[id] = r
	return nil, true
}

// finish ends the command id of r with out: every request waiting for it
// gets it (Reattached but for the one that started it).
func (e *executor) finish(id string, r *durableRun, out Outcome) {
	s := e.spool
	s.mu.Lock()
	replies := r.replies
	delete(s.running, id)
	s.mu.Unlock()
	close(r.done)
	for i, to := range replies {
		o := out
		o.Reattached = r.attached || i > 0
		to(o)
	}
}

// readSupervisorID reads the supervisor an entry records.
func readSupervisorID(entry string) (supervisorID, bool) {
	b, err := os.ReadFile(filepath.Join(entry, supervisorFile))
	if err != nil {
		return supervisorID{}, false
	}
	var sup supervisorID
	return sup, json.Unmarshal(b, &sup) == nil
}
