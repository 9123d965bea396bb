// Package base is what the keeper hands each of its parts once, when it
// builds them: the logger the part writes to and the clock it reads
// (river's baseservice.Archetype). A part embeds Base in its Config (or
// takes one), calls Init in its constructor, and from then on logs to
// b.Log and asks b.Clock (or b.Now) what time it is; a test hands it a
// fake clock (clockwork.NewFakeClock) and a log it reads.
package base

import (
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
)

// Base is a part's logger and clock.
type Base struct {
	Log   *slog.Logger    // nil: discarded
	Clock clockwork.Clock // nil: the real clock
}

// Init fills what is unset: a logger that discards, the real clock.
func (b *Base) Init() {
	if b.Log == nil {
		b.Log = slog.New(slog.DiscardHandler)
	}
	if b.Clock == nil {
		b.Clock = clockwork.NewRealClock()
	}
}

// Now is the clock's time.
func (b Base) Now() time.Time { return b.Clock.Now() }

// Named is b logging with component=name.
func (b Base) Named(component string) Base {
	b.Init()
	b.Log = b.Log.With("component", component)
	return b
}
