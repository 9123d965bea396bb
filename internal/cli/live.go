package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/soulstack/soulstack/client"
)

// terminal is an output stream that is a terminal.
type terminal struct {
	w io.Writer
	// size returns the terminal's width and height in characters.
	size func() (width, height int)
}

// terminalOf returns w as a terminal when it is one (and TERM is not
// "dumb"), nil otherwise.
func terminalOf(w io.Writer, getenv func(string) string) *terminal {
	f, ok := w.(*os.File)
	if !ok || getenv("TERM") == "dumb" || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	fd := int(f.Fd())
	return &terminal{w: w, size: func() (int, int) {
		width, height, err := term.GetSize(fd)
		if err != nil || width <= 0 || height <= 0 {
			return 80, 24
		}
		return width, height
	}}
}

// Timing of the live view's redraws.
const (
	redrawEvery = 250 * time.Millisecond // keeps elapsed times moving
	redrawAfter = 50 * time.Millisecond  // at most this often on events
)

// liveView draws a progress in place on a terminal: the block of lines is
// redrawn over itself as events arrive and as time passes; log lines are
// printed above it and stay.
type liveView struct {
	mu    sync.Mutex
	t     *terminal
	p     *progress
	now   func() time.Time
	shown int // lines of the block on the screen
	drawn time.Time
}

func newLiveView(t *terminal, p *progress) *liveView {
	return &liveView{t: t, p: p, now: time.Now}
}

// start draws the view and keeps redrawing it until the returned stop is
// called; stop draws it a last time.
func (v *liveView) start() (stop func()) {
	v.mu.Lock()
	v.draw()
	v.mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(redrawEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				v.mu.Lock()
				v.draw()
				v.mu.Unlock()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		v.mu.Lock()
		defer v.mu.Unlock()
		v.draw()
	}
}

// event takes one event into the view.
func (v *liveView) event(ev client.RunEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.p.apply(ev)
	if ev.Kind == client.EventLog {
		width, _ := v.t.size()
		io.WriteString(v.t.w, v.erase()+fit(eventLine(ev), width-1)+"\n")
		v.shown = 0
		v.draw()
		return
	}
	if v.now().Sub(v.drawn) >= redrawAfter || ev.Kind == client.EventRunFinished {
		v.draw()
	}
}

// erase returns what moves the cursor to the top of the block and clears
// the screen from there.
func (v *liveView) erase() string {
	if v.shown == 0 {
		return ""
	}
	return fmt.Sprintf("\x1b[%dA\r\x1b[J", v.shown)
}

// draw replaces the block on the screen with the current view, cut to the
// terminal's width and height so that it never wraps or scrolls away.
func (v *liveView) draw() {
	width, height := v.t.size()
	lines := v.p.lines(v.now(), width-1)
	if keep := height - 3; keep > 0 && len(lines) > height-1 {
		hidden := len(lines) - 1 - keep
		lines = append([]string{lines[0], fit(fmt.Sprintf("  … %d more line(s) above", hidden), width-1)}, lines[len(lines)-keep:]...)
	}
	var b strings.Builder
	b.WriteString(v.erase())
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	io.WriteString(v.t.w, b.String())
	v.shown = len(lines)
	v.drawn = v.now()
}
