// Package crashpoint lets the chaos suite kill a keeper at one exact point
// of its work, where a random kill -9 would land once in a thousand: a
// keeper started with SOULSTACK_TEST_CRASH_AT=<point> sends itself SIGKILL
// when it reaches that point. Unset (always, outside the chaos suite),
// Here costs one environment lookup.
package crashpoint

import (
	"os"
	"syscall"
)

// Env names the point a keeper kills itself at.
const Env = "SOULSTACK_TEST_CRASH_AT"

// The points.
const (
	// RunFinished: a run's end has committed (with what follows it
	// queued) and nothing after it has happened yet.
	RunFinished = "run-finished"
	// DriftRecorded: a seed's change of drift state has committed (with
	// what follows it queued) and nothing after it has happened yet.
	DriftRecorded = "drift-recorded"
)

// Here kills the process with SIGKILL when Env names point.
func Here(point string) {
	if os.Getenv(Env) == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
