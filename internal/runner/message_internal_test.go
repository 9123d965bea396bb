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
	}{
		{"succeeded", store.PhaseSucceeded, "", "", "", string(outputs)},
		{"succeeded ignores a message", store.PhaseSucceeded, "", "", "x on h: c: m", string(outputs)},
		{"failed targets", store.PhaseFailed, "run.targets_failed", "1 target(s) failed: x on h: c: m", "x on h: c: m", "x on h: c: m"},
		{"run-level error", store.PhaseFailed, "run.timeout", "the run did not finish within its timeout of 1s", "", "run.timeout: the run did not finish within its timeout of 1s"},
		{"cancelled", store.PhaseCancelled, "run.cancelled", "cancelled by request", "", "run.cancelled: cancelled by request"},
		{"code alone", store.PhaseFailed, "run.too_many_secrets", "", "", "run.too_many_secrets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := runMessage(tt.phase, tt.code, tt.errMsg, tt.message, outputs); got != tt.want {
				t.Errorf("runMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
