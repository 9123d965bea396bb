package runner

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/store"
)

// leaseLoop runs keepLease on a fake clock with renew answering from
// answers, one per heartbeat; it reports each renewal and the stop.
type leaseLoop struct {
	clock   *clockwork.FakeClock
	renewed chan time.Time // fake time of each renewal attempt
	stopped chan error
	done    chan struct{}
	cancel  context.CancelFunc
}

func startLease(t *testing.T, answer func(n int) (bool, error)) *leaseLoop {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &leaseLoop{clock: clockwork.NewFakeClock(), renewed: make(chan time.Time, 100), stopped: make(chan error, 1), done: make(chan struct{}), cancel: cancel}
	n := 0
	renew := func(context.Context) (bool, error) {
		n++
		l.renewed <- l.clock.Now()
		return answer(n)
	}
	stop := func(cause error) { l.stopped <- cause; cancel() }
	go func() {
		defer close(l.done)
		keepLease(ctx, l.clock, Lease{}.withDefaults(), renew, stop, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	if err := l.clock.BlockUntilContext(t.Context(), 1); err != nil { // the heartbeat ticker
		t.Fatal(err)
	}
	return l
}

// beat moves the fake clock one heartbeat on and waits for the renewal it
// causes.
func (l *leaseLoop) beat(t *testing.T) {
	t.Helper()
	l.clock.Advance(HeartbeatEvery)
	select {
	case <-l.renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal after a heartbeat interval")
	}
}

// stop waits for the loop to stop the execution and returns the cause.
// A loop that stopped earlier fails the beat after its stop instead: it
// never renews again.
func (l *leaseLoop) stop(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.stopped:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the lease loop did not stop the execution")
		return nil
	}
}

// TestLeaseHeartbeatThatStops: when the database stops answering the
// heartbeats, the execution is stopped (errLeaseLost) at the first
// heartbeat LeaseGiveUp after the last renewal, not before: before the
// lease goes stale and another keeper may claim the run. The clock is
// fake; nothing sleeps.
func TestLeaseHeartbeatThatStops(t *testing.T) {
	t.Parallel()
	outage := errors.New("connection refused")
	l := startLease(t, func(n int) (bool, error) {
		if n <= 2 {
			return false, nil
		}
		return false, outage
	})
	l.beat(t)
	l.beat(t) // last renewal, at 2 heartbeats
	lastOK := l.clock.Now()
	// Every heartbeat before the give-up renews again: a loop that had
	// stopped the execution would not.
	for l.clock.Now().Add(HeartbeatEvery).Before(lastOK.Add(LeaseGiveUp)) {
		l.beat(t)
	}
	l.beat(t)
	if err := l.stop(t); !errors.Is(err, errLeaseLost) {
		t.Fatalf("%s after the last renewal: stop = %v, want errLeaseLost", l.clock.Since(lastOK), err)
	}
	if since := l.clock.Since(lastOK); since < LeaseGiveUp || since >= StaleAfter {
		t.Fatalf("gave up %s after the last renewal, want within [%s, %s)", since, LeaseGiveUp, StaleAfter)
	}
}

// TestLeaseAnswers: a heartbeat that finds the lease taken by another
// keeper stops the execution at once (errLeaseLost); one that brings a
// cancel request stops it with errCancelRequested; healthy heartbeats
// never stop it (each renews again).
func TestLeaseAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(n int) (bool, error)
		beats  int
		want   error
	}{
		{"lease lost", func(n int) (bool, error) { return false, store.ErrLeaseLost }, 1, errLeaseLost},
		{"cancel requested", func(n int) (bool, error) { return n == 3, nil }, 3, errCancelRequested},
		{"healthy", func(int) (bool, error) { return false, nil }, 20, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := startLease(t, tc.answer)
			for range tc.beats {
				l.beat(t)
			}
			if tc.want == nil {
				return
			}
			if err := l.stop(t); !errors.Is(err, tc.want) {
				t.Fatalf("after %d heartbeats: stop = %v, want %v", tc.beats, err, tc.want)
			}
		})
	}
}

// TestRecoveryFollowsTheClock: a run whose keeper stopped heartbeating is
// re-enqueued by the recovery pass once the runner's clock is StaleAfter
// past its last heartbeat, and not before: the lease expires on the clock
// the runner is given.
func TestRecoveryFollowsTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Now())
	// Claimed by another keeper, which heartbeated just now and then died.
	r, _, _, jobs := deadKeepersRun(t, clock)
	before := jobs()
	clock.Advance(StaleAfter - HeartbeatEvery)
	r.recover(ctx, "")
	if n := jobs() - before; n != 0 {
		t.Fatalf("a run heartbeated %s ago was re-enqueued (%d jobs)", StaleAfter-HeartbeatEvery, n)
	}
	clock.Advance(2 * HeartbeatEvery)
	r.recover(ctx, "")
	if n := jobs() - before; n != 1 {
		t.Fatalf("a run heartbeated %s ago: %d jobs enqueued, want 1", StaleAfter+HeartbeatEvery, n)
	}
}
