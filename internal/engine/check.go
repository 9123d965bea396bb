package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// A check run (client.RunCheck) changes nothing: each target's module
// runs its check path (module.Checker) instead of Run and says whether it
// would change the target, or that it cannot know and why. What cannot be
// known propagates: a step whose on, when or params use an earlier step's
// unknown outcome is unknown too, naming that step, and so is a
// changed_when that needs the module's result when the module cannot
// predict it. failed_when is not evaluated: a check predicts changes, and
// a failure it cannot see is the apply's to report.

// unknownUse returns why step s cannot be checked for the uses in where
// (on, or when and params): the first earlier step whose outcome it uses
// and that the check could not predict; "" when everything it uses is
// known.
func (r *run) unknownUse(s *scenario.PlanStep, where ...string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range s.Uses() {
		if u.Var != "steps" || !slices.Contains(where, u.Where) {
			continue
		}
		for name, st := range r.st.Done {
			if u.Step != "" && u.Step != name {
				continue
			}
			reason := st.OutputUnknown
			if u.Field == "changed" || u.Field == "status" {
				reason = st.Unknown
			}
			if reason == "" {
				continue
			}
			ref := "steps." + name
			if u.Step == "" {
				ref = "steps[…]"
			} else if u.Field != "" {
				ref += "." + u.Field
			}
			return fmt.Sprintf("%s uses %s, which the check cannot know (step %q: %s)", u.Where, ref, name, firstLine(reason))
		}
	}
	return ""
}

// firstLine is the first line of a reason, so that nested reasons stay
// short.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// predict runs the module's check path on target; a module without one is
// unknown.
func (r *run) predict(ctx context.Context, s *scenario.PlanStep, raw []byte, target module.Target) (module.Prediction, error) {
	c, ok := r.e.module(s).(module.Checker)
	if !ok {
		return module.Prediction{Unknown: fmt.Sprintf("%s has no check path: what it would change is known only when it runs", s.ID)}, nil
	}
	return c.Check(ctx, r.info(s), raw, target)
}

// judgeCheck decides a check target's status from the prediction and the
// step's changed_when: would_change, ok (nothing would change) or
// unknown.
func (r *run) judgeCheck(ctx context.Context, s *scenario.PlanStep, vars expr.Vars, res targetResult, p module.Prediction, err error) targetResult {
	if err != nil {
		return fail(res, err)
	}
	res.changes, res.output = p.Changes, p.Output
	res.outputUnknown = !p.OutputKnown
	unknown := p.Unknown
	if s.HasChangedWhen() {
		// changed_when decides in apply; it decides here too when what
		// it uses of the result is known.
		if why := resultUnknown(s, p); why != "" {
			if unknown == "" {
				unknown = why
			}
		} else {
			rv := vars
			rv.Result = expr.ResultValue(p.Output, p.WouldChange, false, "")
			changed, cerr := s.Changed(ctx, rv, p.WouldChange)
			if cerr != nil {
				return fail(res, cerr)
			}
			p.WouldChange, unknown = changed, ""
			if !changed {
				res.changes = nil
			}
		}
	}
	switch {
	case unknown != "":
		res.status, res.unknown = client.TargetUnknown, unknown
	case p.WouldChange:
		res.status, res.changed = client.TargetWouldChange, true
	default:
		res.status = client.TargetOK
	}
	return res
}

// resultUnknown says why changed_when cannot be evaluated on prediction p:
// it uses the module's output, which p does not know, or its changed
// verdict, which p leaves unknown. "" when it can.
func resultUnknown(s *scenario.PlanStep, p module.Prediction) string {
	for _, u := range s.Uses() {
		if u.Where != "changed_when" || u.Var != "result" {
			continue
		}
		switch u.Field {
		case "changed":
			if p.Unknown != "" {
				return p.Unknown
			}
		case "failed", "error":
			// A check does not fail where it predicts; an apply may.
			return "changed_when uses result." + u.Field + ", known only when the module runs"
		default:
			if !p.OutputKnown {
				return "changed_when uses the module's result (" + useName(u) + "), known only when it runs"
			}
		}
	}
	return ""
}

func useName(u scenario.Use) string {
	if u.Field == "" {
		return u.Var
	}
	return u.Var + "." + u.Field
}

// checkStep records what a check learned about step s for the steps after
// it: whether its changed and its output are known.
func checkStep(results []targetResult) (unknown, outputUnknown string) {
	would := false
	for _, t := range results {
		switch t.status {
		case client.TargetWouldChange:
			would = true
		case client.TargetUnknown:
			if unknown == "" {
				unknown = fmt.Sprintf("on %s: %s", t.sid, t.unknown)
			}
		}
		if t.status != client.TargetSkipped && !t.status.Bad() && t.outputUnknown && outputUnknown == "" {
			outputUnknown = fmt.Sprintf("on %s: its output is known only when it runs", t.sid)
			if t.unknown != "" {
				outputUnknown = fmt.Sprintf("on %s: %s", t.sid, t.unknown)
			}
		}
	}
	if would {
		unknown = "" // changed is true whatever the unknown targets do
	}
	return unknown, outputUnknown
}

// checkStatus is the status a check step shows later steps' expressions:
// the apply's words, so that status == "changed" reads the same in both.
func checkStatus(s client.StepStatus) client.StepStatus {
	if s == client.StepWouldChange {
		return client.StepChanged
	}
	return s
}

// checkMessage is a check run's message: how many targets would change,
// how many are unknown, and the first unknowns with their reasons.
func checkMessage(st *state) string {
	c := st.Check
	if c.WouldChange == 0 && c.Unknown == 0 {
		return "check: nothing would change"
	}
	msg := fmt.Sprintf("check: %d target(s) would change, %d unknown", c.WouldChange, c.Unknown)
	if len(c.Unknowns) > 0 {
		msg += " (" + strings.Join(c.Unknowns, "; ")
		if more := c.Unknown - len(c.Unknowns); more > 0 {
			msg += fmt.Sprintf("; and %d more", more)
		}
		msg += ")"
	}
	return msg
}

// unknownStep records step s as unknown as a whole: its targets come from
// an earlier step's outcome the check cannot know.
func (r *run) unknownStep(s *scenario.PlanStep, why string) error {
	idx := s.Index
	r.rec.Event(s.Name, "", client.StepStartedData{Index: idx, Module: string(s.ID), Targets: []string{}})
	r.rec.Event(s.Name, "", client.LogData{Message: "unknown: " + why})
	r.mu.Lock()
	r.st.Done[s.Name] = stepState{Index: idx, Status: client.StepUnknown, Unknown: why, OutputUnknown: why}
	r.st.InFlight = nil
	r.st.Check.Unknown++
	if len(r.st.Check.Unknowns) < maxRunErrors {
		r.st.Check.Unknowns = append(r.st.Check.Unknowns, fmt.Sprintf("%s: %s", s.Name, why))
	}
	r.mu.Unlock()
	if err := r.checkpoint(); err != nil {
		return err
	}
	r.rec.Step(store.RunStep{Index: idx, Name: s.Name, Module: string(s.ID), Status: string(client.StepUnknown), FinishedAt: r.e.now()})
	r.rec.Event(s.Name, "", client.StepFinishedData{Index: idx, Status: client.StepUnknown, Counts: map[client.TargetStatus]int{}})
	return nil
}

// countCheck adds a check step's targets to the run's counts; r.mu held.
func (r *run) countCheck(s *scenario.PlanStep, results []targetResult) {
	for _, t := range results {
		switch t.status {
		case client.TargetWouldChange:
			r.st.Check.WouldChange++
		case client.TargetUnknown:
			r.st.Check.Unknown++
			if len(r.st.Check.Unknowns) < maxRunErrors {
				r.st.Check.Unknowns = append(r.st.Check.Unknowns, fmt.Sprintf("%s on %s: %s", s.Name, t.sid, t.unknown))
			}
		}
	}
}
