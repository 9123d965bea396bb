package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/soulstack/soulstack/internal/module"
)

// TestStoppedNamesTheRunsReason: a target whose context ended fails with
// the run's reason — run.cancelled for a cancel whatever its cause (the
// runner's is neither context error), run.timeout for the deadline —
// rather than with what the interrupted dial or command said; a target
// whose context goes on keeps its own error.
func TestStoppedNamesTheRunsReason(t *testing.T) {
	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("cancel requested"))
	dial := fmt.Errorf("ssh connect root@h:22: %w", context.Cause(cancelled))
	if got := module.Code(stopped(cancelled, dial)); got != "run.cancelled" {
		t.Errorf("a dial cut by the run's cancel: %q, want run.cancelled", got)
	}
	late, stop := context.WithTimeout(context.Background(), 0)
	defer stop()
	<-late.Done()
	if got := module.Code(stopped(late, errors.New("exit status 143"))); got != "run.timeout" {
		t.Errorf("a command cut by the run's timeout: %q, want run.timeout", got)
	}
	own := &module.Error{Code: "command.failed", Message: "exit status 3"}
	if got := stopped(context.Background(), own); got != own {
		t.Errorf("a target whose context goes on: %v, want its own error", got)
	}
	if stopped(cancelled, nil) != nil {
		t.Error("no error became one")
	}
}
