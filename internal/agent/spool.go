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
// otherwise the command runs (or already ran) in a goroutine that replies
// with reply and to every request that attached meanwhile, and durable
// returns its cancel and a channel closed once it has ended.
func (e *executor) durable(req wire.ExecRequest, reply replyFunc) (*Outcome, context.CancelFunc, <-chan struct{}) {
	s, d := e.spool, req.Durable
	refuse := func(code, msg string) (*Outcome, context.CancelFunc, <-chan struct{}) {
		return &Outcome{ExecEnd: wire.ExecEnd{Code: code, Error: msg}}, nil, nil
	}
	if !transport.ValidDurableID(d.ID) {
		return refuse("agent.invalid_command", fmt.Sprintf("durable command id %q is not one the spool takes", d.ID))
	}
	s.forget(d.Forget)
	if seen, ok := s.fence(d.Run, d.Epoch); !ok {
		return refuse(wire.CodeFenced, fmt.Sprintf("refused: the agent has seen epoch %d of run %s, this command is of epoch %d", seen, d.Run, d.Epoch))
	}
	entry := filepath.Join(s.dir, d.ID)
	s.mu.Lock()
	if r := s.running[d.ID]; r != nil {
		defer s.mu.Unlock()
		if r.digest != d.Digest {
			return refuse(wire.CodeDiverged, "the command under this id is not the one sent now")
		}
		r.replies = append(r.replies, reply)
		return nil, r.cancel, r.done
	}
	s.mu.Unlock()
	if b, err := os.ReadFile(filepath.Join(entry, "meta.json")); err == nil {
		var m meta
		_ = json.Unmarshal(b, &m)
		if m.Digest != d.Digest {
			return refuse(wire.CodeDiverged, "the command under this id is not the one sent now")
		}
		b, err := os.ReadFile(filepath.Join(entry, "result.json"))
		if err != nil {
			why := "the agent restarted since it started"
			if m.Boot != s.boot {
				why = "the soul rebooted since it started"
			}
			return refuse(wire.CodeLost, "the command started and was lost before it ended: "+why)
		}
		var out Outcome
		if err := json.Unmarshal(b, &out); err != nil {
			return refuse(wire.CodeLost, "the command's spooled result cannot be read: "+err.Error())
		}
		out.Reattached = true
		return &out, nil, nil
	}
	if err := os.Mkdir(entry, 0o700); err != nil {
		return refuse("agent.invalid_command", "agent spool: "+err.Error())
	}
	mb, _ := json.Marshal(meta{Digest: d.Digest, Boot: s.boot, Run: d.Run, Epoch: d.Epoch})
	if err := atomicfile.Write(filepath.Join(entry, "meta.json"), mb, 0o600); err != nil {
		_ = os.RemoveAll(entry)
		return refuse("agent.invalid_command", "agent spool: "+err.Error())
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r := &durableRun{digest: d.Digest, done: make(chan struct{}), cancel: cancel, replies: []replyFunc{reply}}
	s.mu.Lock()
	s.running[d.ID] = r
	s.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer cancel()
		out := e.run(ctx, req)
		if b, err := json.Marshal(out); err == nil {
			if err := atomicfile.Write(filepath.Join(entry, "result.json"), b, 0o600); err != nil {
				e.log.Warn("spool a command's result", "command", d.ID, "err", err)
			}
		}
		s.mu.Lock()
		replies := r.replies
		delete(s.running, d.ID)
		s.mu.Unlock()
		close(r.done)
		for i, to := range replies {
			o := out
			o.Reattached = i > 0
			to(o)
		}
	}()
	return nil, cancel, r.done
}
