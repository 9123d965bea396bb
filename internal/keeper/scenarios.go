package keeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
	_ "github.com/soulstack/soulstack/internal/modules/standard" // the module catalog
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// loadPlan plans a stored run's scenario with its input.
func loadPlan(text string, input map[string]any) (*scenario.Plan, error) {
	return scenario.Load("scenario.yaml", []byte(text), input)
}

// scenarioChecker validates a scenario and its input before a run is
// accepted: every problem of the scenario and the input, plus literal
// targets that are not registered souls.
func scenarioChecker(st soulGetter) runner.Checker {
	return func(project, file, text string, input map[string]any) (runner.Checked, []client.ProblemError) {
		plan, err := scenario.Load(file, []byte(text), input)
		if err != nil {
			var se *scenario.Error
			if errors.As(err, &se) {
				out := make([]client.ProblemError, len(se.Problems))
				for i, p := range se.Problems {
					out[i] = client.ProblemError{Location: p.Pos.String(), Code: p.Code, Message: p.Message}
				}
				return runner.Checked{}, out
			}
			return runner.Checked{}, []client.ProblemError{{Location: file, Code: "scenario.invalid", Message: err.Error()}}
		}
		var problems []client.ProblemError
		ctx := context.Background()
		for _, s := range plan.Steps {
			if s.Keeper {
				continue
			}
			// Targets that depend only on the input are known now.
			sids, err := s.Targets(ctx, expr.Vars{Input: plan.Input})
			if err != nil {
				continue
			}
			for _, sid := range sids {
				if sid == module.Keeper {
					continue
				}
				// Another project's soul is as unknown as one not
				// registered: the message does not tell them apart.
				if so, err := st.SoulGet(ctx, sid); errors.Is(err, store.ErrNotFound) || err == nil && project != "" && so.Project != project {
					problems = append(problems, client.ProblemError{
						Location: s.Pos.String(), Code: "scenario.unknown_soul",
						Message: fmt.Sprintf("step %q targets %q, which is not a registered soul (soulctl soul add)", s.Name, sid),
					})
				}
			}
		}
		if len(problems) > 0 {
			return runner.Checked{}, problems
		}
		var needs []runner.StepPermission
		for _, s := range plan.Steps {
			if perm := s.Module.Info().Permission; perm != "" {
				needs = append(needs, runner.StepPermission{Step: s.Name, Module: string(s.ID), Permission: auth.Permission(perm)})
			}
		}
		return runner.Checked{Name: plan.Name, Input: plan.Input, Secret: plan.Secret(), Needs: needs}, nil
	}
}
