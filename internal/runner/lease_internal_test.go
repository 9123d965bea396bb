package runner

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// leaseLoop runs keepAlive on a fake clock with renew answering from
// answers, one per heartbeat; it reports each renewal and each judgement
// that stops an execution.
type leaseLoop struct {
	clock   *clockwork.FakeClock
	renewed chan time.Time // fake time of each renewal attempt
	stopped chan error
	done    chan struct{}
	cancel  context.CancelFunc
}

// startLease runs the loop for one execution of run "run_1", registered
// before any heartbeat.
func startLease(t *testing.T, answer func(n int) (map[string]bool, error)) *leaseLoop {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &leaseLoop{clock: clockwork.NewFakeClock(), renewed: make(chan time.Time, 100), stopped: make(chan error, 100), done: make(chan struct{}), cancel: cancel}
	r := &Runner{clock: l.clock, execs: map[string]*held{}}
	r.hold("run_1", func(cause error) { l.stopped <- cause })
	n := 0
	renew := func(context.Context) (map[string]bool, error) {
		n++
		l.renewed <- l.clock.Now()
		return answer(n)
	}
	go func() {
		defer close(l.done)
		keepAlive(ctx, l.clock, Lease{}.withDefaults(), renew, r.judgeHeld, slog.New(slog.DiscardHandler))
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

// notStopped checks that no judgement stopped the execution so far.
func (l *leaseLoop) notStopped(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.stopped:
		t.Fatalf("the execution was stopped (%v) %s after the start", err, l.clock.Since(time.Time{}))
	default:
	}
}

var holdsRun1 = map[string]bool{"run_1": false}

// TestLeaseHeartbeatThatStops: when the database stops answering the
// keeper's heartbeats, its executions are stopped (errLeaseLost) at the
// first heartbeat LeaseGiveUp after the last renewal, not before: before
// the keeper's row goes stale and another keeper may claim its runs. The
// clock is fake; nothing sleeps.
func TestLeaseHeartbeatThatStops(t *testing.T) {
	t.Parallel()
	outage := errors.New("connection refused")
	l := startLease(t, func(n int) (map[string]bool, error) {
		if n <= 2 {
			return holdsRun1, nil
		}
		return nil, outage
	})
	l.beat(t)
	l.beat(t) // last renewal, at 2 heartbeats
	lastOK := l.clock.Now()
	for l.clock.Now().Add(HeartbeatEvery).Before(lastOK.Add(LeaseGiveUp)) {
		l.beat(t)
		l.notStopped(t)
	}
	l.beat(t)
	if err := l.stop(t); !errors.Is(err, errLeaseLost) {
		t.Fatalf("%s after the last renewal: stop = %v, want errLeaseLost", l.clock.Since(lastOK), err)
	}
	if since := l.clock.Since(lastOK); since < LeaseGiveUp || since >= StaleAfter {
		t.Fatalf("gave up %s after the last renewal, want within [%s, %s)", since, LeaseGiveUp, StaleAfter)
	}
}

// TestLeaseAnswers: a heartbeat whose held runs lack the execution's run
// (another keeper took it) stops it at once (errLeaseLost); one that
// brings a cancel request stops it with errCancelRequested; healthy
// heartbeats never stop it.
func TestLeaseAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(n int) (map[string]bool, error)
		beats  int
		want   error
	}{
		{"lease lost", func(n int) (map[string]bool, error) { return map[string]bool{}, nil }, 1, errLeaseLost},
		{"cancel requested", func(n int) (map[string]bool, error) { return map[string]bool{"run_1": n == 3}, nil }, 3, errCancelRequested},
		{"healthy", func(int) (map[string]bool, error) { return holdsRun1, nil }, 20, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := startLease(t, tc.answer)
			for range tc.beats {
				l.beat(t)
			}
			if tc.want == nil {
				l.notStopped(t)
				return
			}
			if err := l.stop(t); !errors.Is(err, tc.want) {
				t.Fatalf("after %d heartbeats: stop = %v, want %v", tc.beats, err, tc.want)
			}
		})
	}
}

// TestLeaseIgnoresClaimsAfterTheQuestion: an execution registered after
// the heartbeat asked which runs the keeper holds is not judged by that
// answer, which cannot know its claim yet.
func TestLeaseIgnoresClaimsAfterTheQuestion(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &Runner{clock: clock, execs: map[string]*held{}}
	asked := clock.Now()
	clock.Advance(time.Millisecond)
	stopped := false
	r.hold("run_new", func(error) { stopped = true })
	r.judgeHeld(map[string]bool{}, asked)
	if stopped {
		t.Fatal("a run claimed after the question was stopped as lost")
	}
	r.judgeHeld(map[string]bool{}, clock.Now())
	if !stopped {
		t.Fatal("a run the keeper no longer holds was not stopped")
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
