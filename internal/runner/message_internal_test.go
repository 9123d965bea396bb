package runner

import (
	"testing"

	"github.com/soulstack/soulstack/internal/store"
)

// TestRunMessage covers what a finished run stores as its message.
func TestRunMessage(t *testing.T) {
	t.Parallel()
	outputs := []byte(`{"a":{"h":{"rc":0}}}`)
	tests := []struct {
		name, phase, code, errMsg, message, want string
		check                                    bool
	}{
		{"succeeded", store.PhaseSucceeded, "", "", "", string(outputs), false},
		{"succeeded ignores a message", store.PhaseSucceeded, "", "", "x on h: c: m", string(outputs), false},
		{"failed targets", store.PhaseFailed, "run.targets_failed", "1 target(s) failed: x on h: c: m", "x on h: c: m", "x on h: c: m", false},
		{"run-level error", store.PhaseFailed, "run.timeout", "the run did not finish within its timeout of 1s", "", "run.timeout: the run did not finish within its timeout of 1s", false},
		{"cancelled", store.PhaseCancelled, "run.cancelled", "cancelled by request", "", "run.cancelled: cancelled by request", false},
		{"code alone", store.PhaseFailed, "run.too_many_secrets", "", "", "run.too_many_secrets", false},
		{"a check run's summary", store.PhaseSucceeded, "", "", "check: 1 target(s) would change, 0 unknown", "check: 1 target(s) would change, 0 unknown", true},
		{"a failed check run's targets", store.PhaseFailed, "run.targets_failed", "1 target(s) failed: x on h: c: m", "x on h: c: m", "x on h: c: m", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := runMessage(tt.phase, tt.code, tt.errMsg, tt.message, outputs, tt.check); got != tt.want {
				t.Errorf("runMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
