package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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
	if s.approvals == nil {
		return
	}
	s.registerDecisions()
	s.registerApprovalPolicy()
}

// registerDecisions registers approving and rejecting the step a run
// waits on.
func (s *Server) registerDecisions() {
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
			err = s.approvals.Decide(ctx, r, decider(caller), approve, in.Body.Reason)
			if errors.Is(err, approval.ErrSelfApproval) {
				return nil, problem(http.StatusForbidden, "run.self_approval", err.Error())
			}
			if errors.Is(err, store.ErrNotPending) {
				return nil, problem(http.StatusConflict, "run.not_awaiting_approval", "run "+r.ID+" has no step waiting for approval (decided already, expired, or never held)")
			}
			if err != nil {
				return nil, err
			}
			if s.runs != nil {
				s.runs.Hub().Notify(r.ID)
			}
			if r, err = s.runStore.RunGet(ctx, r.ID); err != nil {
				return nil, err
			}
			w, err := s.runWire(ctx, r, true)
			if err != nil {
				return nil, err
			}
			return &runOutput{Body: w}, nil
		})
	}
}

// registerApprovalPolicy registers reading and setting the approval
// policy set through the API.
func (s *Server) registerApprovalPolicy() {
	register(s, huma.Operation{
		OperationID: "approval-policy-get", Method: http.MethodGet, Path: "/v1/approvals/policy", Tags: []string{"approvals"},
		Summary: "Read the approval policies",
	}, auth.PolicyManage, false, func(ctx context.Context, _ *struct{}) (*struct{ Body client.ApprovalPolicy }, error) {
		p, config, err := s.approvals.Policies(ctx)
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.ApprovalPolicy }{Body: client.ApprovalPolicy{Policy: p, Config: config}}, nil
	})
	register(s, huma.Operation{
		OperationID: "approval-policy-set", Method: http.MethodPut, Path: "/v1/approvals/policy", Tags: []string{"approvals"},
		Summary: "Set the approval policies",
		Description: "Cedar forbid rules, each with an @id: what one forbids, a run does only once another person approves it (docs/approvals.md). " +
			"They apply from the next step of every run, beside keeper.yml's. 422 approval.policy_invalid says where the text is wrong. Audit approval.policy_set.",
		Errors: []int{http.StatusUnprocessableEntity},
	}, auth.PolicyManage, false, func(ctx context.Context, in *struct{ Body client.ApprovalPolicy }) (*struct{ Body client.ApprovalPolicy }, error) {
		err := s.approvals.SetPolicy(ctx, in.Body.Policy, principal(ctx).Actor())
		var bad *approval.PolicyError
		if errors.As(err, &bad) {
			return nil, invalid("approval.policy_invalid", "body.policy", "%v", bad.Err)
		}
		if err != nil {
			return nil, err
		}
		_, config, err := s.approvals.Policies(ctx)
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.ApprovalPolicy }{Body: client.ApprovalPolicy{Policy: in.Body.Policy, Config: config}}, nil
	})
}

// decider is the caller as the approval service sees them.
func decider(p auth.Principal) approval.Decider {
	return approval.Decider{Token: p.TokenID, Person: p.Person, Actor: p.Actor()}
}

// destroyHeld refuses, with 409 approval.required, what would destroy a
// project's VMs outside a run when an approval policy holds
// core.cloud.destroyed there: deleting a cloud-made soul (its VM becomes
// an orphan) and destroying orphans. Such a destroy goes through a run,
// whose step the policy holds for another person's approval.
func (s *Server) destroyHeld(ctx context.Context, project, provider string, vmIDs []string, what string) error {
	if s.approvals == nil {
		return errors.New("no approval service: a destroy outside a run cannot be asked of the policies")
	}
	caller := principal(ctx)
	hold, err := s.approvals.DestroyHeld(ctx, approval.Destroy{By: decider(caller), Role: caller.Grant.Role, Project: project,
		Provider: provider, VMIDs: vmIDs, What: what})
	if err != nil || hold == nil {
		return err
	}
	return problem(http.StatusConflict, "approval.required", fmt.Sprintf("%s would destroy VMs of project %s outside a run, and %s; "+
		"destroy them with a run (a core.cloud.destroyed step), which waits for another person's approval", what, project, hold.Why))
}
