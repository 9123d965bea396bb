package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/approval"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

func approvalWire(a store.Approval) client.RunApproval {
	return client.RunApproval{Step: a.Step, Module: a.Module, Policies: a.Policies, Why: a.Why, Status: a.Status, RequestedAt: a.RequestedAt,
		ExpiresAt: a.ExpiresAt, DecidedBy: a.DecidedBy, Person: a.DecidedPerson, DecidedAt: a.DecidedAt, Reason: a.Reason}
}

// registerApprovals registers the decisions on held steps and the
// approval policy routes.
func (s *Server) registerApprovals() {
	for _, approve := range []bool{true, false} {
		verb, summary, desc := "reject", "Reject the step a run waits on", "The step does not run and the run ends Rejected. Audit run.rejected."
		if approve {
			verb, summary, desc = "approve", "Approve the step a run waits on", "The step runs and the run goes on. Audit run.approved."
		}
		register(s, huma.Operation{
			OperationID: "run-" + verb, Method: http.MethodPost, Path: "/v1/runs/{id}/" + verb, Tags: runTags,
			Summary: summary,
			Description: desc + " Needs run.approve in the run's project, and a person other than the run's creator: " +
				"403 run.self_approval for the creator's own token or another token of the same person. " +
				"409 run.not_awaiting_approval when no step waits (decided already, or expired).",
			Errors: []int{http.StatusNotFound, http.StatusConflict},
		}, auth.RunApprove, false, func(ctx context.Context, in *struct {
			ID   string `path:"id"`
			Body client.RunDecision
		}) (*runOutput, error) {
			r, err := s.runOf(ctx, in.ID)
			if err != nil {
				return nil, err
			}
			caller := principal(ctx)
			if err := s.notCreator(ctx, caller, r); err != nil {
				return nil, err
			}
			person := ""
			if caller.Person != nil {
				person = personSubject(*caller.Person)
			}
			_, err = s.store.ApprovalDecide(ctx, store.ApprovalDecision{RunID: r.ID, Approve: approve, Reason: strings.TrimSpace(in.Body.Reason), Actor: caller.Actor(), Person: person})
			if errors.Is(err, store.ErrNotPending) {
				return nil, problem(http.StatusConflict, "run.not_awaiting_approval", "run "+r.ID+" has no step waiting for approval (decided already, expired, or never held)")
			}
			if err != nil {
				return nil, err
			}
			if s.runs != nil {
				s.runs.Hub().Notify(r.ID)
			}
			if r, err = s.store.RunGet(ctx, r.ID); err != nil {
				return nil, err
			}
			w, err := s.runWire(ctx, r, true)
			if err != nil {
				return nil, err
			}
			return &runOutput{Body: w}, nil
		})
	}

	register(s, huma.Operation{
		OperationID: "approval-policy-get", Method: http.MethodGet, Path: "/v1/approvals/policy", Tags: []string{"approvals"},
		Summary: "Read the approval policies",
	}, auth.PolicyManage, false, func(ctx context.Context, _ *struct{}) (*struct{ Body client.ApprovalPolicy }, error) {
		p, err := s.store.ApprovalPolicy(ctx)
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.ApprovalPolicy }{Body: client.ApprovalPolicy{Policy: p, Config: s.approvalConfig}}, nil
	})
	register(s, huma.Operation{
		OperationID: "approval-policy-set", Method: http.MethodPut, Path: "/v1/approvals/policy", Tags: []string{"approvals"},
		Summary: "Set the approval policies",
		Description: "Cedar forbid rules, each with an @id: what one forbids, a run does only once another person approves it (docs/approvals.md). " +
			"They apply from the next step of every run, beside keeper.yml's. 422 approval.policy_invalid says where the text is wrong. Audit approval.policy_set.",
		Errors: []int{http.StatusUnprocessableEntity},
	}, auth.PolicyManage, false, func(ctx context.Context, in *struct{ Body client.ApprovalPolicy }) (*struct{ Body client.ApprovalPolicy }, error) {
		p, err := approval.Parse("policy", in.Body.Policy)
		if err == nil {
			_, err = approval.Join(s.approvalPolicy, p)
		}
		if err != nil {
			return nil, invalid("approval.policy_invalid", "body.policy", "%v", err)
		}
		if err := s.store.ApprovalPolicySet(ctx, in.Body.Policy, principal(ctx).Actor()); err != nil {
			return nil, err
		}
		return &struct{ Body client.ApprovalPolicy }{Body: client.ApprovalPolicy{Policy: in.Body.Policy, Config: s.approvalConfig}}, nil
	})
}

// notCreator refuses the run's creator: approvals follow people, not
// tokens. The caller may not be the creator's token, a token the creator's
// minted (directly or through others), nor a token that minted the
// creator's (its holder saw the creator's token when minting it); nor may
// a person be at both ends of the two chains.
func (s *Server) notCreator(ctx context.Context, caller auth.Principal, r store.Run) error {
	refuse := problem(http.StatusForbidden, "run.self_approval", "the run's creator cannot decide on their own run, with this token or one minted from the same chain; another person with run.approve must")
	if caller.TokenID == r.CreatedBy {
		return refuse
	}
	mine, err := s.lineage(ctx, caller.TokenID)
	if err != nil {
		return err
	}
	theirs, err := s.lineage(ctx, r.CreatedBy)
	if err != nil {
		return err
	}
	if mine.tokens[r.CreatedBy] || theirs.tokens[caller.TokenID] {
		return refuse
	}
	for p := range mine.persons {
		if theirs.persons[p] {
			return refuse
		}
	}
	return nil
}

// tokenLine is a token and the tokens that minted it, up to the first
// one nobody minted (the keeper's, or a sign-in's), with the people any of
// them were minted for.
type tokenLine struct {
	tokens  map[string]bool
	persons map[string]bool
}

// lineage walks id's chain of minters (created_by) in the registry.
func (s *Server) lineage(ctx context.Context, id string) (tokenLine, error) {
	l := tokenLine{tokens: map[string]bool{}, persons: map[string]bool{}}
	for i := 0; i < 64 && strings.HasPrefix(id, "tok_") && !l.tokens[id]; i++ {
		t, err := s.store.TokenGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return l, err
		}
		l.tokens[id] = true
		if t.Person != nil {
			l.persons[personSubject(*t.Person)] = true
		}
		id = t.CreatedBy
	}
	return l, nil
}

// destroyHeld refuses, with 409 approval.required, what would destroy a
// project's VMs outside a run when an approval policy holds
// core.cloud.destroyed there: deleting a cloud-made soul (its VM becomes
// an orphan) and destroying orphans. Such a destroy goes through a run,
// whose step the policy holds for another person's approval.
func (s *Server) destroyHeld(ctx context.Context, project, provider string, vmIDs []string, what string) error {
	pol, hold, err := approval.Effective(ctx, s.store, s.approvalPolicy)
	if err != nil {
		return err
	}
	if hold == nil {
		caller := principal(ctx)
		person := ""
		if caller.Person != nil {
			person = personSubject(*caller.Person)
		}
		params, _ := json.Marshal(map[string]any{"provider": provider, "vm_ids": vmIDs})
		hold = pol.Check(approval.Request{Creator: caller.TokenID, Role: caller.Grant.Role, Person: person, Project: project,
			Module: "core.cloud.destroyed", Step: what, Mode: "apply", Keeper: true, Targets: 1, Params: params})
	}
	if hold == nil {
		return nil
	}
	return problem(http.StatusConflict, "approval.required", fmt.Sprintf("%s would destroy VMs of project %s outside a run, and %s; "+
		"destroy them with a run (a core.cloud.destroyed step), which waits for another person's approval", what, project, hold.Why))
}
