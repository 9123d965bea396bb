package engine

import (
	"fmt"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/jsoncut"
	"github.com/soulstack/soulstack/internal/scenario"
)

// What a run keeps of its souls' outputs when the keeper's configuration
// says nothing (runs.max_target_output_bytes, runs.max_output_bytes).
const (
	DefaultMaxTargetOutput = 1 << 20
	DefaultMaxRunOutput    = 64 << 20
	// MinTargetOutput is what each target keeps once its run's budget is
	// spent: enough for a shape and the start of each stream.
	MinTargetOutput = 4 << 10
)

// OutputLimits bound the output a run keeps of each soul target (a
// soul's module result comes from outside the keeper: its stdout and
// stderr are whatever the soul sent, up to the transport's limit) and of
// all of them together. A cut output keeps its shape: its longest strings
// end with jsoncut's marker. Keeper-side outputs (a cloud step's hosts)
// are the keeper's own and not bounded here.
type OutputLimits struct {
	// Target is the bytes of JSON kept of one target's output; 0 means
	// DefaultMaxTargetOutput.
	Target int
	// Run is the bytes kept of all of a run's soul targets together; past
	// it each further target keeps MinTargetOutput. 0 means
	// DefaultMaxRunOutput.
	Run int
}

func (l OutputLimits) target() int {
	if l.Target <= 0 {
		return DefaultMaxTargetOutput
	}
	return l.Target
}

func (l OutputLimits) run() int64 {
	if l.Run <= 0 {
		return DefaultMaxRunOutput
	}
	return int64(l.Run)
}

// bound is what the run keeps of one soul target's output, and a log line
// saying what was cut when it was.
func (r *run) bound(output any) (any, string) {
	limit := r.e.Limits.target()
	left := r.outputLeft.Load()
	if int64(limit) > left {
		limit = max(int(left), MinTargetOutput)
	}
	c := jsoncut.Value(output, limit)
	r.outputLeft.Add(-int64(len(c.JSON)))
	if !c.Cut {
		return output, ""
	}
	why := fmt.Sprintf("the keeper keeps %d bytes of a target's output (runs.max_target_output_bytes)", r.e.Limits.target())
	if limit < r.e.Limits.target() {
		why = fmt.Sprintf("the run has kept %d bytes of output (runs.max_output_bytes)", r.e.Limits.run())
	}
	return c.Value, fmt.Sprintf("output cut from %d to %d bytes: %s", c.Bytes, len(c.JSON), why)
}

// maxErrorMessage is the bytes kept of a target's error message: modules
// quote the soul's stderr in them.
const maxErrorMessage = 8 << 10

// boundTarget applies bound to a soul target's result and cuts its error
// message to maxErrorMessage.
func (r *run) boundTarget(s *scenario.PlanStep, res *targetResult) {
	if s.Keeper {
		return
	}
	if len(res.msg) > maxErrorMessage {
		res.msg = jsoncut.String(res.msg, maxErrorMessage)
	}
	if res.output == nil {
		return
	}
	out, note := r.bound(res.output)
	res.output = out
	if note != "" {
		r.rec.Event(s.Name, res.sid, client.LogData{Message: note})
	}
}
