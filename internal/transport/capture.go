package transport

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// Capture keeps the first Max bytes written to it and counts the rest: the
// output limit every transport applies to each of stdout and stderr.
type Capture struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int64
}

var _ io.Writer = (*Capture)(nil)

// NewCapture returns a Capture that keeps max bytes.
func NewCapture(max int) *Capture { return &Capture{max: max} }

// Write keeps what fits and counts the rest; it never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
		return len(p), nil
	}
	if room > 0 {
		c.buf.Write(p[:room])
	} else {
		room = 0
	}
	c.dropped += int64(len(p) - room)
	return len(p), nil
}

// Bytes returns a copy of what was kept, followed by a truncation marker
// ("\n[output truncated: N bytes over the M-byte limit dropped]\n") when
// anything was dropped, and whether it was.
func (c *Capture) Bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := bytes.Clone(c.buf.Bytes())
	if c.dropped == 0 {
		return out, false
	}
	out = fmt.Appendf(out, "\n[output truncated: %d bytes over the %d-byte limit dropped]\n", c.dropped, c.max)
	return out, true
}
