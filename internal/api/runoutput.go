package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/jsoncut"
	"github.com/soulstack/soulstack/internal/store"
)

// What a run's answer holds of its outputs: a run stores up to
// runs.max_output_bytes of them (several copies: each target's, the
// steps', the message), and an answer, a list of them most of all, must
// not carry that to every viewer. What does not fit is cut (jsoncut: the
// same shape, the longest strings marked) and said so; GET
// /v1/runs/{id}/outputs has it whole.
const (
	// answerTargets is the bytes of target outputs one run's answer
	// holds, shared among its targets, each keeping at least
	// answerTargetMin and at most answerTargetMax.
	answerTargets   = 1 << 20
	answerTargetMax = 64 << 10
	answerTargetMin = 1 << 10
	// answerOutputs is the bytes of a run's outputs and of its message in
	// its own answer; listOutputs in a list's.
	answerOutputs = 256 << 10
	listOutputs   = 8 << 10
)

// boundRun cuts the outputs and message of run w to limit bytes each.
func boundRun(w *client.Run, limit int) {
	if c := jsoncut.Raw(w.Outputs, limit); c.Cut {
		w.Outputs, w.OutputsTruncated = c.JSON, true
	}
	if len(w.Message) > limit {
		w.Message, w.OutputsTruncated = jsoncut.String(w.Message, limit), true
	}
}

// targetAnswerLimit is what each of n targets keeps in a run's answer.
func targetAnswerLimit(n int) int {
	if n == 0 {
		return answerTargetMax
	}
	return min(answerTargetMax, max(answerTargetMin, answerTargets/n))
}

// boundTarget cuts target w's output to limit bytes.
func boundTarget(w *client.RunTarget, limit int) {
	if c := jsoncut.Raw(w.Output, limit); c.Cut {
		w.Output, w.OutputTruncated, w.OutputBytes = c.JSON, true, c.Bytes
	}
}

// runOutputsInput names a run and, optionally, one step and one target.
type runOutputsInput struct {
	ID   string `path:"id" doc:"The run's id (run_…)."`
	Step string `query:"step" maxLength:"200" doc:"Only this step's output (by step name)."`
	SID  string `query:"sid" maxLength:"253" doc:"With step: only this target's output, as its run stored it."`
}

// registerRunOutputs registers GET /v1/runs/{id}/outputs.
func (s *Server) registerRunOutputs() {
	register(s, huma.Operation{
		OperationID: "run-outputs", Method: http.MethodGet, Path: "/v1/runs/{id}/outputs", Tags: runTags,
		Summary: "Get a run's outputs whole",
		Description: "The outputs as the run stored them (masked), which a run's answer cuts to fit: all steps' by step name, " +
			"one step's with step, one target's with step and sid. What a run stores is bounded by runs.max_target_output_bytes " +
			"and runs.max_output_bytes. 404 run.output_not_found when the run has no such step or target.",
		Errors: []int{http.StatusNotFound},
	}, auth.RunRead, false, func(ctx context.Context, in *runOutputsInput) (*struct{ Body json.RawMessage }, error) {
		r, err := s.runOf(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		out, err := s.runOutput(ctx, r, in.Step, in.SID)
		if err != nil {
			return nil, err
		}
		return &struct{ Body json.RawMessage }{Body: out}, nil
	})
}

// runOutput is run r's stored outputs, one step's, or one target's.
func (s *Server) runOutput(ctx context.Context, r store.Run, step, sid string) (json.RawMessage, error) {
	notFound := func(format string, args ...any) error {
		return problem(http.StatusNotFound, "run.output_not_found", fmt.Sprintf(format, args...))
	}
	switch {
	case step == "" && sid != "":
		return nil, invalid("run.output_invalid", "query.sid", "sid needs step: a target's output is that of one step")
	case step == "":
		if len(r.Outputs) == 0 {
			return json.RawMessage("{}"), nil
		}
		return r.Outputs, nil
	case sid == "":
		var steps map[string]json.RawMessage
		if err := json.Unmarshal(r.Outputs, &steps); err == nil {
			if out, ok := steps[step]; ok {
				return out, nil
			}
		}
		return nil, notFound("run %s has no output of step %q (yet)", r.ID, step)
	}
	steps, targets, err := s.runStore.RunSteps(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	for _, st := range steps {
		if st.Name != step {
			continue
		}
		for _, t := range targets {
			if t.StepIndex == st.Index && t.SID == sid {
				return t.Output, nil
			}
		}
	}
	return nil, notFound("run %s has no target %q in step %q", r.ID, sid, step)
}
