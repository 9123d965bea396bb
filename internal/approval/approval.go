// Package approval holds runs' steps for a second person: approval
// policies, written in Cedar (a policy language with a formal
// specification, https://www.cedarpolicy.com), say which steps need one;
// the Gate holds such a step until a person other than the run's creator
// approves it, rejects it, or the approval expires.
//
// A policy is a forbid rule: what it forbids, a run does only once
// another person approves. Every step is a request
//
//	principal: Token::"<the run's creator>"
//	action:    Action::"<the step's module>", e.g. Action::"core.cloud.created"
//	resource:  Project::"<the run's project>"
//	context:   {step, run, mode, keeper, targets, params, role, person}
//
// where params are the step's params (keeper-side steps; {} for soul-side
// ones, whose params are per target), targets how many targets the step
// has, role the creator's role and person "issuer subject" ("" for a
// token minted by hand). For example
//
//	@id("big-create")
//	forbid (principal, action == Action::"core.cloud.created", resource)
//	when { context.params has count && context.params.count > 5 };
//
//	@id("prod-destroy")
//	forbid (principal, action == Action::"core.cloud.destroyed", resource == Project::"prod");
//
// A check run's steps are asked about with mode "check", and only the
// policies that read context.mode are asked: a policy that does not is
// about applies (a check changes nothing). A check step that runs the
// author's code (core.script.ran with check: true) is asked about as
// mode "apply", held as its apply is.
//
// Every other step is permitted: the keeper adds permit(principal,
// action, resource) below the policies. A policy that cannot be evaluated
// (an attribute missing, a type mismatch) holds the step too: the policy
// fails closed, and the approval names the error.
package approval

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go"
)

// Policy is a parsed set of approval policies; the zero Policy holds
// nothing.
type Policy struct {
	set *cedar.PolicySet
	// modal are the policies that read context.mode (with the baseline):
	// those a check run's steps are asked.
	modal *cedar.PolicySet
}

// baseline permits what no policy forbids.
const baseline = "soulstack-permit-the-rest"

// Parse reads Cedar policies; file names them in errors (file:line:col).
// Each policy's id is its @id annotation, else policy<n> in order.
func Parse(file, text string) (Policy, error) {
	if strings.TrimSpace(text) == "" {
		return Policy{}, nil
	}
	list, err := cedar.NewPolicyListFromBytes(file, []byte(text))
	if err != nil {
		return Policy{}, fmt.Errorf("approval policy: %w", err)
	}
	set := cedar.NewPolicySet()
	for i, p := range list {
		id := cedar.PolicyID(fmt.Sprintf("policy%d", i))
		if v, ok := p.Annotations()["id"]; ok && v != "" {
			id = cedar.PolicyID(v)
		}
		at := fmt.Sprintf("%s:%d:%d", file, p.Position().Line, p.Position().Column)
		if p.Effect() != cedar.Forbid {
			return Policy{}, fmt.Errorf("approval policy %s (%s): is a permit; approval policies are forbid rules (what they forbid needs a second person's approval)", id, at)
		}
		if !set.Add(id, p) {
			return Policy{}, fmt.Errorf("approval policy %s (%s): the id is used twice", id, at)
		}
	}
	var permit cedar.Policy
	if err := permit.UnmarshalCedar([]byte(`permit (principal, action, resource);`)); err != nil {
		return Policy{}, err
	}
	set.Add(baseline, &permit)
	return withModal(set), nil
}

// withModal is the policy of set, with its policies that read
// context.mode picked out.
func withModal(set *cedar.PolicySet) Policy {
	modal := cedar.NewPolicySet()
	for id, pol := range set.All() {
		text := string(pol.MarshalCedar())
		if id == baseline || strings.Contains(text, "context.mode") || strings.Contains(text, `context["mode"]`) {
			modal.Add(id, pol)
		}
	}
	return Policy{set: set, modal: modal}
}

// Join is the policies of p and q (their ids must differ).
func Join(p, q Policy) (Policy, error) {
	switch {
	case p.set == nil:
		return q, nil
	case q.set == nil:
		return p, nil
	}
	set := cedar.NewPolicySet()
	for id, pol := range p.set.All() {
		set.Add(id, pol)
	}
	for id, pol := range q.set.All() {
		if id != baseline && !set.Add(id, pol) {
			return Policy{}, fmt.Errorf("approval policy %s: the id is used in keeper.yml and in the policy set through the API", id)
		}
	}
	return withModal(set), nil
}

// Empty reports whether the policy holds no step.
func (p Policy) Empty() bool { return p.set == nil }

// Request is a step about to run.
type Request struct {
	Creator string // the API token that created the run
	Role    string
	Person  string // "issuer subject", empty for a token minted by hand
	Project string
	Module  string
	Step    string
	Run     string // the run's scenario name
	Mode    string
	Keeper  bool
	Targets int
	// Params are the step's params (JSON), for keeper-side steps.
	Params json.RawMessage
}

// Hold is why a step needs approval: the policies that hold it and, for
// people, why.
type Hold struct {
	Policies []string
	Why      string
}

// Check returns the hold on the step, or nil when it may run.
func (p Policy) Check(r Request) *Hold {
	if p.set == nil {
		return nil
	}
	var params map[string]any
	_ = json.Unmarshal(r.Params, &params)
	req := cedar.Request{
		Principal: cedar.NewEntityUID("Token", cedar.String(r.Creator)),
		Action:    cedar.NewEntityUID("Action", cedar.String(r.Module)),
		Resource:  cedar.NewEntityUID("Project", cedar.String(r.Project)),
		Context: cedar.NewRecord(cedar.RecordMap{
			"step":    cedar.String(r.Step),
			"run":     cedar.String(r.Run),
			"mode":    cedar.String(r.Mode),
			"keeper":  cedar.Boolean(r.Keeper),
			"targets": cedar.Long(r.Targets),
			"role":    cedar.String(r.Role),
			"person":  cedar.String(r.Person),
			"params":  record(params),
		}),
	}
	set := p.set
	if r.Mode == "check" {
		set = p.modal
	}
	decision, diag := cedar.Authorize(set, nil, req)
	h := &Hold{}
	var why []string
	for _, e := range diag.Errors {
		h.Policies = append(h.Policies, string(e.PolicyID))
		why = append(why, fmt.Sprintf("policy %s could not be evaluated (%s), so it holds the step", e.PolicyID, e.Message))
	}
	if decision == cedar.Deny {
		for _, d := range diag.Reasons {
			if d.PolicyID != baseline {
				h.Policies = append(h.Policies, string(d.PolicyID))
				why = append(why, fmt.Sprintf("policy %s forbids %s in project %s without a second person's approval", d.PolicyID, r.Module, r.Project))
			}
		}
	}
	if len(h.Policies) == 0 {
		return nil
	}
	slices.Sort(h.Policies)
	h.Policies = slices.Compact(h.Policies)
	h.Why = strings.Join(why, "; ")
	return h
}

// record turns a JSON object into a Cedar record: strings, booleans,
// whole numbers (longs), lists (sets) and objects (records); other
// numbers are left out.
func record(m map[string]any) cedar.Record {
	out := cedar.RecordMap{}
	for k, v := range m {
		if cv, ok := value(v); ok {
			out[cedar.String(k)] = cv
		}
	}
	return cedar.NewRecord(out)
}

func value(v any) (cedar.Value, bool) {
	switch x := v.(type) {
	case string:
		return cedar.String(x), true
	case bool:
		return cedar.Boolean(x), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return nil, false
		}
		return cedar.Long(int64(x)), true
	case []any:
		var vs []cedar.Value
		for _, e := range x {
			if cv, ok := value(e); ok {
				vs = append(vs, cv)
			}
		}
		return cedar.NewSet(vs...), true
	case map[string]any:
		return record(x), true
	}
	return nil, false
}
