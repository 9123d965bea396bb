package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// testSSH is an SSH transport over a pool of the test's own with opts,
// closed when the test ends.
func testSSH(t *testing.T, opts ssh.Options) func(transport.HostKeys) transport.Dialer {
	t.Helper()
	pool := ssh.NewPool(opts)
	t.Cleanup(func() { pool.Close() })
	return pool.Dialer
}

// TestAwaitsReady: only a cloud-made soul never reached waits; hand-made,
// joined (active) and already-seen souls do not, so they pay no round
// trip.
func TestAwaitsReady(t *testing.T) {
	t.Parallel()
	seen := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		so   store.Soul
		want bool
	}{
		{"cloud-made, pending", store.Soul{Provider: "local", Status: store.SoulPending}, true},
		{"cloud-made, unreachable so far", store.Soul{Provider: "local", Status: store.SoulUnreachable}, true},
		{"cloud-made, unreachable after a contact", store.Soul{Provider: "local", Status: store.SoulUnreachable, LastSeenAt: &seen}, false},
		{"cloud-made, active", store.Soul{Provider: "local", Status: store.SoulActive, LastSeenAt: &seen}, false},
		{"joined through the agent", store.Soul{Provider: "local", Status: store.SoulActive}, false},
		{"hand-registered", store.Soul{Status: store.SoulActive}, false},
		{"hand-registered, pending", store.Soul{Status: store.SoulPending}, false},
		{"destroyed", store.Soul{Provider: "local", Status: store.SoulDestroyed}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := awaitsReady(tc.so); got != tc.want {
				t.Fatalf("awaitsReady(%+v) = %v, want %v", tc.so, got, tc.want)
			}
		})
	}
}

// TestFailCodesOfContextEnds: a target that ends with the step's deadline
// is run.timeout, one cancelled run.cancelled, whatever transport or wait
// (the cloud-init one included) it was in.
func TestFailCodesOfContextEnds(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		fmt.Errorf("the cloud-init of vm-1 had not finished by the step's deadline: %w", context.DeadlineExceeded): "run.timeout",
		fmt.Errorf("wait for the cloud-init of vm-1: %w", context.Canceled):                                        "run.cancelled",
	} {
		if got := fail(targetResult{}, err).code; got != want {
			t.Errorf("fail(%v).code = %q, want %q", err, got, want)
		}
	}
}
