package approval

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/soulstack/soulstack/internal/store"
)

// ServiceStore is what deciding on held steps and keeping the API's
// policy read and write.
type ServiceStore interface {
	PolicyReader
	TokenGet(ctx context.Context, id string) (store.APIToken, error)
	ApprovalDecide(ctx context.Context, d store.ApprovalDecision) (store.Approval, error)
	ApprovalPolicySet(ctx context.Context, policy string, actor store.Actor) error
}

// Service owns the approval rules outside a step: who may decide on a
// held step (never its run's creator), the policy set through the API
// beside keeper.yml's, and whether a destroy outside a run is held.
type Service struct {
	store      ServiceStore
	config     Policy
	configText string
}

// NewService returns the approval service over keeper.yml's policies
// (config, parsed; configText, as written).
func NewService(st ServiceStore, config Policy, configText string) *Service {
	return &Service{store: st, config: config, configText: configText}
}

// ErrSelfApproval: the decider is the run's creator, by token, by a token
// of the same minting chain, or as the same person.
var ErrSelfApproval = errors.New("the run's creator cannot decide on their own run, with this token or one minted from the same chain; another person with run.approve must")

// Decider is who decides: their token and, signed in with OIDC, the person.
type Decider struct {
	Token  string
	Person *store.Person
	Actor  store.Actor
}

// Decide approves or rejects the step run waits on (audit run.approved or
// run.rejected): ErrSelfApproval for its creator, store.ErrNotPending
// when no step waits.
func (s *Service) Decide(ctx context.Context, run store.Run, by Decider, approve bool, reason string) error {
	if err := s.notCreator(ctx, by.Token, run.CreatedBy); err != nil {
		return err
	}
	person := ""
	if by.Person != nil {
		person = by.Person.Key()
	}
	_, err := s.store.ApprovalDecide(ctx, store.ApprovalDecision{RunID: run.ID, Approve: approve, Reason: strings.TrimSpace(reason), Actor: by.Actor, Person: person})
	return err
}

// notCreator refuses the run's creator: approvals follow people, not
// tokens. The caller may not be the creator's token, a token the
// creator's minted (directly or through others), nor a token that minted
// the creator's (its holder saw the creator's token when minting it); nor
// may a person be at both ends of the two chains.
func (s *Service) notCreator(ctx context.Context, caller, creator string) error {
	if caller == creator {
		return ErrSelfApproval
	}
	mine, err := s.lineage(ctx, caller)
	if err != nil {
		return err
	}
	theirs, err := s.lineage(ctx, creator)
	if err != nil {
		return err
	}
	if mine.tokens[creator] || theirs.tokens[caller] {
		return ErrSelfApproval
	}
	for p := range mine.persons {
		if theirs.persons[p] {
			return ErrSelfApproval
		}
	}
	return nil
}

// tokenLine is a token and the tokens that minted it, up to the first
// one nobody minted (the keeper's, or a sign-in's), with the people any
// of them were minted for.
type tokenLine struct {
	tokens  map[string]bool
	persons map[string]bool
}

// lineage walks id's chain of minters (created_by) in the registry.
func (s *Service) lineage(ctx context.Context, id string) (tokenLine, error) {
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
			l.persons[t.Person.Key()] = true
		}
		id = t.CreatedBy
	}
	return l, nil
}

// Policies returns the policy text set through the API and keeper.yml's.
func (s *Service) Policies(ctx context.Context) (api, config string, err error) {
	api, err = s.store.ApprovalPolicy(ctx)
	return api, s.configText, err
}

// PolicyError: a policy text that does not parse, or clashes with
// keeper.yml's; nothing was stored.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// SetPolicy replaces the policy set through the API (audit
// approval.policy_set); it applies from the next step of every run.
func (s *Service) SetPolicy(ctx context.Context, text string, actor store.Actor) error {
	p, err := Parse("policy", text)
	if err == nil {
		_, err = Join(s.config, p)
	}
	if err != nil {
		return &PolicyError{Err: err}
	}
	return s.store.ApprovalPolicySet(ctx, text, actor)
}

// Destroy is a destroy of a project's VMs outside a run, asked by Decider.
type Destroy struct {
	By       Decider
	Role     string
	Project  string
	Provider string
	VMIDs    []string
	// What names it, as a step would be named (soul delete, orphans destroy).
	What string
}

// DestroyHeld returns the hold the policies put on d as they would on a
// core.cloud.destroyed step (nil: not held). Such a destroy is refused
// where it is asked and goes through a run, whose step waits for another
// person's approval.
func (s *Service) DestroyHeld(ctx context.Context, d Destroy) (*Hold, error) {
	pol, hold, err := Effective(ctx, s.store, s.config)
	if err != nil || hold != nil {
		return hold, err
	}
	person := ""
	if d.By.Person != nil {
		person = d.By.Person.Key()
	}
	params, _ := json.Marshal(map[string]any{"provider": d.Provider, "vm_ids": d.VMIDs})
	return pol.Check(Request{Creator: d.By.Token, Role: d.Role, Person: person, Project: d.Project,
		Module: "core.cloud.destroyed", Step: d.What, Mode: "apply", Keeper: true, Targets: 1, Params: params}), nil
}
