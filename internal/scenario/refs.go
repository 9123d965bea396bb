package scenario

import "github.com/soulstack/soulstack/internal/expr"

// A Use is where a step's expression refers to another step or to the
// module's result: the part of the step (on, when, params,
// changed_when, failed_when) and what it selects.
type Use struct {
	// Where is on, when, params, changed_when or failed_when.
	Where string
	// Var is steps or result.
	Var string
	// Step is the step referred to (steps.<Step>); empty when the
	// expression names it only at run time (steps[x]) or for result.
	Step string
	// Field is what is selected: output, changed, status for steps;
	// output, changed, failed, error, rc, stdout… for result; empty
	// when the whole value is used.
	Field string
}

// Uses lists the step's references to other steps and to the module's
// result, in on, when, params, changed_when and failed_when: what a check
// run needs known before it can say what the step would do.
func (st *PlanStep) Uses() []Use {
	var out []Use
	add := func(where string, refs []expr.Ref) {
		for _, r := range refs {
			if r.Var != "steps" && r.Var != "result" {
				continue
			}
			u := Use{Where: where, Var: r.Var}
			path := r.Path
			if r.Var == "steps" && len(path) > 0 {
				u.Step, path = path[0], path[1:]
			}
			if len(path) > 0 {
				u.Field = path[0]
			}
			out = append(out, u)
		}
	}
	st.on.refs(func(refs []expr.Ref) { add("on", refs) })
	st.params.refs(func(refs []expr.Ref) { add("params", refs) })
	for _, c := range []struct {
		where string
		c     *condition
	}{{"when", st.when}, {"changed_when", st.changedWhen}, {"failed_when", st.failedWhen}} {
		if c.c != nil && c.c.prog != nil {
			add(c.where, c.c.prog.Refs())
		}
	}
	return out
}

// refs calls f with the references of every expression in v.
func (v *value) refs(f func([]expr.Ref)) {
	if v == nil || !v.dyn {
		return
	}
	if v.tpl != nil {
		f(v.tpl.Refs())
		return
	}
	for _, it := range v.items {
		it.refs(f)
	}
	for _, it := range v.vals {
		it.refs(f)
	}
}
