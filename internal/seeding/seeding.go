// Package seeding runs a soul's seeds: the scenarios a soul should carry,
// each run as its seed's creator, whose permissions are checked again
// each time. The join path starts a soul's seeds when it joins, the API
// applies one on request, and drift checks them (mode check) and
// remediates them (mode apply) through the same Submit.
package seeding

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/store"
)

// Store is what seeding reads of the registry.
type Store interface {
	Seeds(ctx context.Context, sid string) ([]store.SoulSeed, error)
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	auth.TokenGetter
}

// Submitter accepts runs; *runner.Runner is one.
type Submitter interface {
	Submit(ctx context.Context, p runner.SubmitParams) (store.Run, bool, error)
}

// Service submits seeds' runs.
type Service struct {
	store Store
	runs  Submitter
	check runner.Checker
	now   func() time.Time
	log   *slog.Logger
}

// New returns the seeding service, logging and reading the time with b.
func New(st Store, runs Submitter, check runner.Checker, b base.Base) *Service {
	b.Init()
	return &Service{store: st, runs: runs, check: check, now: b.Clock.Now, log: b.Log}
}

// RunKey is the re-run key of a seed's apply run: one run per soul and
// seed, so that a second join (or a second keeper) does not run it twice.
func RunKey(sid string, seedID int64) string { return fmt.Sprintf("seed:%s:%d", sid, seedID) }

// Input is a seed's input with the soul's SID as input.sid.
func Input(raw json.RawMessage, sid string) (map[string]any, error) {
	in := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		if in == nil {
			in = map[string]any{}
		}
	}
	in["sid"] = sid
	return in, nil
}

// Submit submits a seed's run in mode with key, as its creator, in its
// soul's project. The creator must still be allowed to start runs: a
// revoked or expired token's seeds neither run nor are checked.
func (s *Service) Submit(ctx context.Context, sd store.SoulSeed, mode client.RunMode, key string) (store.Run, error) {
	input, err := Input(sd.Input, sd.SID)
	if err != nil {
		return store.Run{}, fmt.Errorf("seed %d input: %w", sd.ID, err)
	}
	if err := (auth.Checker{Tokens: s.store, Now: s.now}).Authorize(ctx, sd.CreatedBy, auth.RunCreate); err != nil {
		return store.Run{}, fmt.Errorf("seed %d: its creator %w", sd.ID, err)
	}
	so, err := s.store.SoulGet(ctx, sd.SID)
	if err != nil {
		return store.Run{}, fmt.Errorf("seed %d: %w", sd.ID, err)
	}
	checked, problems := s.check(so.Project, fmt.Sprintf("seed-%d.yaml", sd.ID), sd.Scenario, input)
	if len(problems) > 0 {
		return store.Run{}, fmt.Errorf("seed %d: %s: %s", sd.ID, problems[0].Location, problems[0].Message)
	}
	run, _, err := s.runs.Submit(ctx, runner.SubmitParams{
		Name: checked.Name, Scenario: sd.Scenario, Input: checked.Input, Secret: checked.Secret,
		Key: key, Actor: store.Actor(sd.CreatedBy), Mode: mode, Project: so.Project,
	})
	return run, err
}

// Apply submits a seed's apply run under its one key (RunKey).
func (s *Service) Apply(ctx context.Context, sd store.SoulSeed) (store.Run, error) {
	return s.Submit(ctx, sd, client.RunApply, RunKey(sd.SID, sd.ID))
}

// Joined starts one apply run per active seed of a soul that just joined.
// Failures are logged: the join itself stands.
func (s *Service) Joined(ctx context.Context, sid string) {
	seeds, err := s.store.Seeds(ctx, sid)
	if err != nil {
		s.log.Error("list seeds of a joined soul", "sid", sid, "err", err)
		return
	}
	for _, sd := range seeds {
		if sd.Status != store.SeedActive {
			continue
		}
		if _, err := s.Apply(context.WithoutCancel(ctx), sd); err != nil {
			s.log.Error("start seed run", "sid", sid, "seed", sd.ID, "err", err)
		}
	}
}
