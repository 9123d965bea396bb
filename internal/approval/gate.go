package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// Store is what the Gate keeps approvals in and reads tokens from.
type Store interface {
	ApprovalRequest(ctx context.Context, a store.Approval, actor store.Actor) (store.Approval, error)
	ApprovalGet(ctx context.Context, runID string, stepIndex int) (store.Approval, error)
	ApprovalExpire(ctx context.Context, runID string, stepIndex int) (store.Approval, error)
	ApprovalPolicy(ctx context.Context) (string, error)
	TokenGet(ctx context.Context, id string) (store.APIToken, error)
}

// Gate holds the steps the policies hold: keeper.yml's (Config) and the
// one set through the API, read at every step so that a change applies
// to the next step of every run.
type Gate struct {
	Store  Store
	Config Policy
	// ExpiresIn is how long an approval waits (default 24h); never past
	// the run's own deadline.
	ExpiresIn time.Duration
	// Poll is how often a held step looks for the decision (default 1s).
	Poll time.Duration
	Now  func() time.Time
}

// Step is a step about to run.
type Step struct {
	RunID, RunName, Mode, Project, Creator string
	Index                                  int
	Name, Module                           string
	Keeper                                 bool
	Targets                                int
	Params                                 json.RawMessage
	// Deadline is the run's (zero: none).
	Deadline time.Time
	// Waiting is told when the step starts and stops waiting for a
	// decision (the run's AwaitingApproval phase event).
	Waiting func(waiting bool)
	// Drain closes when the keeper stops: the held step hands the run
	// back, to wait on the next keeper.
	Drain <-chan struct{}
}

// ErrHandBack: the keeper is draining while a step waits for approval;
// the run is handed back and waits again where it resumes.
var ErrHandBack = errors.New("the keeper is stopping while the step waits for approval")

// RejectedError ends a run Rejected (stored Failed with Code): the step's
// approval was rejected or expired, and the step did not run.
type RejectedError struct {
	Code string // run.rejected or run.approval_expired
	Msg  string
}

func (e *RejectedError) Error() string { return e.Code + ": " + e.Msg }

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// policy is keeper.yml's policies with the API's (Effective).
func (g *Gate) policy(ctx context.Context) (Policy, *Hold, error) {
	return Effective(ctx, g.Store, g.Config)
}

// PolicyReader reads the policy set through the API.
type PolicyReader interface {
	ApprovalPolicy(ctx context.Context) (string, error)
}

// Effective is the policies in force: config (keeper.yml's) with the one
// set through the API, read now. An API policy that no longer parses, or
// clashes with config, holds everything: the Hold says why (fails closed).
func Effective(ctx context.Context, st PolicyReader, config Policy) (Policy, *Hold, error) {
	text, err := st.ApprovalPolicy(ctx)
	if err != nil {
		return Policy{}, nil, err
	}
	api, err := Parse("api-policy.cedar", text)
	if err == nil {
		api, err = Join(config, api)
	}
	if err != nil {
		return Policy{}, &Hold{Policies: []string{"api-policy"}, Why: "the approval policy set through the API cannot be used (" + err.Error() + "), so it holds every step"}, nil
	}
	return api, nil, nil
}

// Hold returns nil when the step may run: no policy holds it, or another
// person approved it. A held step waits for the decision: a
// *RejectedError when it is rejected or expires, ErrHandBack when the
// keeper drains, the context's error when the run stops. A resumed run
// finds its step's approval where it left it.
func (g *Gate) Hold(ctx context.Context, s Step) error {
	a, err := g.Store.ApprovalGet(ctx, s.RunID, s.Index)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if a, err = g.request(ctx, s); err != nil || a.RunID == "" {
			return err
		}
	case err != nil:
		return err
	}
	poll := g.Poll
	if poll <= 0 {
		poll = time.Second
	}
	waiting := false
	defer func() {
		if waiting && s.Waiting != nil {
			s.Waiting(false)
		}
	}()
	for {
		switch a.Status {
		case store.ApprovalApproved:
			return nil
		case store.ApprovalRejected:
			return &RejectedError{Code: store.CodeRejected, Msg: fmt.Sprintf("step %q was rejected by %s: %s", a.Step, decider(a), a.Reason)}
		case store.ApprovalExpired:
			return &RejectedError{Code: store.CodeApprovalExpired, Msg: fmt.Sprintf("step %q waited for approval until %s and nobody decided; it did not run", a.Step, a.ExpiresAt.Format(time.RFC3339))}
		}
		if !g.now().Before(a.ExpiresAt) {
			if a, err = g.Store.ApprovalExpire(ctx, s.RunID, s.Index); err != nil {
				return err
			}
			continue
		}
		if !waiting && s.Waiting != nil {
			s.Waiting(true)
		}
		waiting = true
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-s.Drain:
			t.Stop()
			return ErrHandBack
		case <-t.C:
		}
		if a, err = g.Store.ApprovalGet(ctx, s.RunID, s.Index); err != nil {
			return err
		}
	}
}

// request checks the policies and, when they hold the step, stores its
// pending approval; a zero Approval when nothing holds it.
func (g *Gate) request(ctx context.Context, s Step) (store.Approval, error) {
	pol, hold, err := g.policy(ctx)
	if err != nil {
		return store.Approval{}, err
	}
	if hold == nil {
		if pol.Empty() {
			return store.Approval{}, nil
		}
		t, err := g.Store.TokenGet(ctx, s.Creator)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Approval{}, err
		}
		person := ""
		if t.Person != nil {
			person = t.Person.Issuer + " " + t.Person.Subject
		}
		hold = pol.Check(Request{Creator: s.Creator, Role: t.Role, Person: person, Project: s.Project, Module: s.Module, Step: s.Name,
			Run: s.RunName, Mode: s.Mode, Keeper: s.Keeper, Targets: s.Targets, Params: s.Params})
		if hold == nil {
			return store.Approval{}, nil
		}
	}
	in := g.ExpiresIn
	if in <= 0 {
		in = 24 * time.Hour
	}
	expires := g.now().Add(in)
	if !s.Deadline.IsZero() && s.Deadline.Before(expires) {
		expires = s.Deadline
	}
	return g.Store.ApprovalRequest(ctx, store.Approval{RunID: s.RunID, StepIndex: s.Index, Step: s.Name, Module: s.Module, Project: s.Project,
		Policies: hold.Policies, Why: hold.Why, ExpiresAt: expires}, store.Actor(s.Creator))
}

func decider(a store.Approval) string {
	if a.DecidedPerson != "" {
		return a.DecidedPerson + " (" + a.DecidedBy + ")"
	}
	return a.DecidedBy
}
