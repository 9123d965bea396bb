package runner

import "sync"

// Hub tells waiting readers (SSE streams) that a run has new events. It is
// a hint: readers also poll, so a keeper serving a run executed by another
// keeper still streams it.
type Hub struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{waiters: map[string][]chan struct{}{}} }

// Wait returns a channel closed at the next Notify for runID.
func (h *Hub) Wait(runID string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan struct{})
	h.waiters[runID] = append(h.waiters[runID], ch)
	return ch
}

// Notify wakes every reader waiting on runID.
func (h *Hub) Notify(runID string) {
	h.mu.Lock()
	ws := h.waiters[runID]
	delete(h.waiters, runID)
	h.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}
