package transport

import (
	"sync"
	"time"
)

// SpoolTTL is how long a soul keeps a durable command's spool entry that
// the keeper never said it stored the result of: longer than a run may
// last (24 h), so that an entry is there for as long as its run can be
// resumed. Both the SSH supervisor and the agent expire entries after it.
const SpoolTTL = 26 * time.Hour

// Forget bounds: a command carries at most MaxForget ids to forget, and
// a keeper holds at most 4×MaxForget per soul; past that they expire on
// the soul (SpoolTTL).
const MaxForget = 256

// ForgetQueue holds, per soul, the ids of durable commands whose results
// the keeper has stored, until a later command to that soul carries them.
// The zero value is ready to use; it is safe for concurrent use.
type ForgetQueue struct {
	mu   sync.Mutex
	held map[string][]string // by SID
}

// Add queues ids for soul sid; ids that cannot name a durable command,
// and those past the bound, are dropped.
func (q *ForgetQueue) Add(sid string, ids []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held == nil {
		q.held = map[string][]string{}
	}
	held := q.held[sid]
	for _, id := range ids {
		if ValidDurableID(id) && len(held) < 4*MaxForget {
			held = append(held, id)
		}
	}
	q.held[sid] = held
}

// Take returns up to MaxForget of the ids queued for sid and removes them.
func (q *ForgetQueue) Take(sid string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	held := q.held[sid]
	n := min(len(held), MaxForget)
	out := append([]string(nil), held[:n]...)
	if n == len(held) {
		delete(q.held, sid)
	} else {
		q.held[sid] = held[n:]
	}
	return out
}
