// Package drift keeps asking whether souls still carry their seeds: a
// drift check runs a seed as a check run (as its creator, through
// seeding), and when that run finishes the service judges it and records
// per soul and seed what it found — in sync, drifted (corrective or
// pending), unknown or unreachable. A seed with remediate: auto found
// drifted is applied again once per drift episode. Sweeps (keeper.yml
// drift.every) and seeds with their own schedule (drift_every) start
// checks by themselves; the API starts them on request.
package drift

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/riverqueue/river"
	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/crashpoint"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/seeding"
	"github.com/soulstack/soulstack/internal/store"
)

// KeyPrefix starts the key of a drift check run:
// drift:<sid>:<seed id>:<nonce>. Clients cannot use it.
const KeyPrefix = "drift:"

// RemediateKeyPrefix starts the key of a remediation run:
// remediate:<check run id>.
const RemediateKeyPrefix = "remediate:"

// Store is what the drift service reads and writes of the registry.
type Store interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	SoulSearch(ctx context.Context, p store.SoulListParams) ([]store.Soul, error)
	Seeds(ctx context.Context, sid string) ([]store.SoulSeed, error)
	RunSteps(ctx context.Context, id string) ([]store.RunStep, []store.RunTarget, error)
	RunByKey(ctx context.Context, createdBy, key string) (store.Run, error)
	ProjectList(ctx context.Context, p store.ListParams) ([]store.Project, error)
	DriftStart(ctx context.Context, sid string, seedID int64, runID string) error
	DriftRecord(ctx context.Context, p store.DriftRecordParams) (before string, err error)
	DriftList(ctx context.Context, p store.DriftListParams) ([]store.SoulDrift, error)
	DriftRemediated(ctx context.Context, sid string, seedID int64, checkRunID, runID string, actor store.Actor) error
	DriftDue(ctx context.Context, now time.Time) ([]store.SoulSeed, error)
	DriftAck(ctx context.Context, p store.DriftAckParams) (int, error)
}

// Notify queues an outgoing notification about an object of project
// (the keeper's webhook notifier); an error has the caller try again.
type Notify func(ctx context.Context, project, event, object string, data any) error

// EnqueueTx queues a job in tx (the run queue's outbox): it commits, and
// is worked, with tx.
type EnqueueTx func(ctx context.Context, tx *sql.Tx, args river.JobArgs, opts *river.InsertOpts) error

// Service is the drift subsystem.
type Service struct {
	store   Store
	seeds   *seeding.Service
	notify  Notify
	wants   func(event string) bool
	enqueue EnqueueTx
	base    base.Base
}

// Config is what the drift service is built with.
type Config struct {
	Store Store
	Seeds *seeding.Service
	// Notify may be nil: no notifications. Wants says which events a
	// notification names (nil: all of them): a change nothing follows
	// queues nothing.
	Notify Notify
	Wants  func(event string) bool
	// EnqueueTx queues ChangedArgs with a recorded change of state; the
	// queue's worker for them calls Changed.
	EnqueueTx EnqueueTx
	// Base is the service's logger and clock.
	base.Base
}

// New returns the drift service.
func New(c Config) *Service {
	c.Init()
	if c.Wants == nil {
		c.Wants = func(string) bool { return true }
	}
	return &Service{store: c.Store, seeds: c.Seeds, notify: c.Notify, wants: c.Wants, enqueue: c.EnqueueTx, base: c.Base}
}

// Target names the souls a check covers: SIDs, those with Label, or All;
// of Project alone when it is set (another project's soul is not found).
type Target struct {
	SIDs    []string
	All     bool
	Label   *store.Label
	Project string
}

// Check starts a check run of every active seed of the souls t names and
// returns them; seeds that could not be checked are listed with why.
func (s *Service) Check(ctx context.Context, t Target) (client.DriftCheckStarted, error) {
	return s.check(ctx, t, nil)
}

// Sweep checks every seed without a schedule of its own: the keeper-wide
// periodic drift check (drift.every).
func (s *Service) Sweep(ctx context.Context) error {
	started, err := s.check(ctx, Target{All: true}, func(sd store.SoulSeed) bool { return sd.DriftEvery == 0 })
	s.base.Log.Info("drift sweep", "checks", len(started.Checks), "skipped", len(started.Skipped), "err", err)
	return err
}

// Due checks the seeds with a schedule of their own that are due.
func (s *Service) Due(ctx context.Context) error {
	due, err := s.store.DriftDue(ctx, s.base.Now())
	if err != nil || len(due) == 0 {
		return err
	}
	want := map[string]map[int64]bool{}
	var sids []string
	for _, sd := range due {
		if want[sd.SID] == nil {
			want[sd.SID] = map[int64]bool{}
			sids = append(sids, sd.SID)
		}
		want[sd.SID][sd.ID] = true
	}
	started, err := s.check(ctx, Target{SIDs: sids}, func(sd store.SoulSeed) bool { return want[sd.SID][sd.ID] })
	s.base.Log.Info("drift checks due", "checks", len(started.Checks), "skipped", len(started.Skipped), "err", err)
	return err
}

// check is Check for the seeds keep accepts (all when nil).
func (s *Service) check(ctx context.Context, t Target, keep func(store.SoulSeed) bool) (client.DriftCheckStarted, error) {
	out := client.DriftCheckStarted{Checks: []client.DriftCheckRun{}, Skipped: []client.DriftSkipped{}}
	sids := t.SIDs
	if t.All || t.Label != nil {
		found, err := s.souls(ctx, t)
		if err != nil {
			return out, err
		}
		sids = append(sids, found...)
	}
	for _, sid := range sids {
		so, err := s.store.SoulGet(ctx, sid)
		if err == nil && !module.Visible(so.Project, nil, t.Project) {
			err = &store.Error{Err: store.ErrNotFound, Kind: "soul", Key: sid}
		}
		if err != nil {
			return out, err
		}
		if so.Status == store.SoulDestroyed {
			continue
		}
		if err := s.checkSoul(ctx, sid, keep, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// souls lists the SIDs of the souls of t's project (with t's label).
func (s *Service) souls(ctx context.Context, t Target) ([]string, error) {
	var sids []string
	after := ""
	for {
		page, err := s.store.SoulSearch(ctx, store.SoulListParams{ListParams: store.ListParams{After: after, Limit: 500, Project: t.Project}, Label: t.Label})
		if err != nil {
			return nil, err
		}
		for _, so := range page {
			sids = append(sids, so.SID)
		}
		if len(page) < 500 {
			return sids, nil
		}
		after = page[len(page)-1].SID
	}
}

// checkSoul starts the check runs of sid's active seeds keep accepts.
func (s *Service) checkSoul(ctx context.Context, sid string, keep func(store.SoulSeed) bool, out *client.DriftCheckStarted) error {
	seeds, err := s.store.Seeds(ctx, sid)
	if err != nil {
		return err
	}
	for _, sd := range seeds {
		if sd.Status != store.SeedActive || keep != nil && !keep(sd) {
			continue
		}
		key := fmt.Sprintf("%s%s:%d:%d", KeyPrefix, sid, sd.ID, s.base.Now().UnixNano())
		run, err := s.seeds.Submit(ctx, sd, client.RunCheck, key)
		if err != nil {
			out.Skipped = append(out.Skipped, client.DriftSkipped{SID: sid, SeedID: sd.ID, Reason: err.Error()})
			continue
		}
		if err := s.store.DriftStart(ctx, sid, sd.ID, run.ID); err != nil {
			return err
		}
		out.Checks = append(out.Checks, client.DriftCheckRun{SID: sid, SeedID: sd.ID, RunID: run.ID})
	}
	return nil
}

// parseKey reads a drift check run's key.
func parseKey(key string) (sid string, seedID int64, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", 0, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return "", 0, false
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	return parts[0], id, err == nil
}

// IsCheck reports whether run is a drift check run (its outcome is the
// drift, not a run notification).
func IsCheck(run store.Run) bool {
	_, _, ok := parseKey(run.Key)
	return ok && run.Mode == string(client.RunCheck)
}

// Finished records what a finished drift check run found; other runs are
// ignored. It is called at least once per finished run
// (runner.Config.Finished): a second call for the same run changes
// nothing. A change of state queues, in the transaction that records it,
// what follows it (Changed). An error is the registry's, worth trying
// again.
func (s *Service) Finished(ctx context.Context, run store.Run) error {
	sid, seedID, ok := parseKey(run.Key)
	if !ok || run.Mode != string(client.RunCheck) {
		return nil
	}
	d, err := s.judge(ctx, run, sid, seedID)
	if err != nil {
		return fmt.Errorf("judge drift check run %s: %w", run.ID, err)
	}
	remediates, err := s.remediates(ctx, sid, seedID, d.State)
	if err != nil {
		return err
	}
	_, err = s.store.DriftRecord(ctx, store.DriftRecordParams{Drift: d, Actor: store.Actor(run.CreatedBy),
		Changed: func(ctx context.Context, tx *sql.Tx, before string) error {
			c := ChangedArgs{RunID: run.ID, Project: run.Project, CreatedBy: run.CreatedBy, SID: sid, SeedID: seedID,
				From: before, To: d.State, DriftKind: d.Kind, Reason: d.Reason}
			if !s.follows(c, remediates) {
				return nil
			}
			return s.enqueue(ctx, tx, c, nil)
		}})
	if errors.Is(err, store.ErrNotFound) {
		// Not the check the seed waits for: a later one was started, or
		// the drift service never started this run (a key is no proof).
		s.base.Log.Info("drift check run not recorded", "sid", sid, "seed", seedID, "run", run.ID, "reason", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("record the drift of %s seed %d (run %s): %w", sid, seedID, run.ID, err)
	}
	crashpoint.Here(crashpoint.DriftRecorded)
	return nil
}

// remediates reports whether a seed found in state is one remediation
// would apply (drifted, remediate: auto, active).
func (s *Service) remediates(ctx context.Context, sid string, seedID int64, state string) (bool, error) {
	if state != store.DriftDrifted {
		return false, nil
	}
	seeds, err := s.store.Seeds(ctx, sid)
	if err != nil {
		return false, fmt.Errorf("seeds of %s: %w", sid, err)
	}
	for _, sd := range seeds {
		if sd.ID == seedID {
			return sd.Remediate == store.SeedRemediateAuto && sd.Status == store.SeedActive, nil
		}
	}
	return false, nil
}

// follows reports whether anything follows change c: a remediation, or a
// notification one names.
func (s *Service) follows(c ChangedArgs, remediates bool) bool {
	if remediates && c.From != store.DriftDrifted {
		return true
	}
	event := changeEvent(c)
	return s.notify != nil && event != "" && s.wants(event)
}

// changeEvent is the notification of change c: soul.drifted into drift,
// soul.in_sync back from it (not from a first check), or none.
func changeEvent(c ChangedArgs) string {
	switch {
	case c.To == store.DriftDrifted:
		return "soul.drifted"
	case c.To == store.DriftInSync && c.From != store.DriftChecking:
		return "soul.in_sync"
	}
	return ""
}

// ChangedArgs is the queue job of a seed's change of drift state, queued
// with it.
type ChangedArgs struct {
	RunID     string `json:"run_id"` // the check run
	Project   string `json:"project"`
	CreatedBy string `json:"created_by"`
	SID       string `json:"sid"`
	SeedID    int64  `json:"seed_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	DriftKind string `json:"kind,omitempty"` // corrective or pending
	Reason    string `json:"reason,omitempty"`
}

// Kind is the job's stable kind name.
func (ChangedArgs) Kind() string { return "soulstack.drift_changed" }

// Changed does what follows a change of a seed's drift state, at least
// once: a seed with remediate: auto found drifted at the start of a drift
// episode is applied again (once: the remediation's key is the check
// run's), and soul.drifted or soul.in_sync is notified.
func (s *Service) Changed(ctx context.Context, c ChangedArgs) error {
	if c.To == store.DriftDrifted && c.From != store.DriftDrifted {
		s.remediate(ctx, c.RunID, c.SID, c.SeedID)
	}
	event := changeEvent(c)
	if s.notify == nil || event == "" {
		return nil
	}
	data := map[string]any{"sid": c.SID, "seed_id": c.SeedID, "state": c.To, "from": c.From, "kind": c.DriftKind, "reason": c.Reason, "run_id": c.RunID}
	return s.notify(ctx, c.Project, event, "soul/"+c.SID, data)
}

// remediate starts, for a seed with remediate: auto, an apply run of the
// seed as its creator, keyed by the check run that found it drifted: once
// per drift episode, however often it is asked.
func (s *Service) remediate(ctx context.Context, checkRunID, sid string, seedID int64) {
	seeds, err := s.store.Seeds(ctx, sid)
	if err != nil {
		s.base.Log.Error("remediate drift", "sid", sid, "seed", seedID, "err", err)
		return
	}
	for _, sd := range seeds {
		if sd.ID != seedID || sd.Remediate != store.SeedRemediateAuto || sd.Status != store.SeedActive {
			continue
		}
		run, err := s.seeds.Submit(ctx, sd, client.RunApply, RemediateKeyPrefix+checkRunID)
		if err == nil {
			err = s.store.DriftRemediated(ctx, sid, seedID, checkRunID, run.ID, store.Actor(sd.CreatedBy))
		}
		if err != nil {
			s.base.Log.Error("remediate drift", "sid", sid, "seed", seedID, "check_run", checkRunID, "err", err)
		}
	}
}

// judge reads a finished check run of a seed on sid: unreachable when the
// soul could not be reached, drifted when a target would change, unknown
// when one is unknown or the check failed, in sync otherwise.
func (s *Service) judge(ctx context.Context, run store.Run, sid string, seedID int64) (store.SoulDrift, error) {
	d := store.SoulDrift{SID: sid, SeedID: seedID, RunID: run.ID, CheckedAt: run.FinishedAt}
	steps, targets, err := s.store.RunSteps(ctx, run.ID)
	if err != nil {
		return d, err
	}
	names := map[int]string{}
	for _, st := range steps {
		names[st.Index] = st.Name
		if st.Status == string(client.StepUnknown) && d.State == "" {
			d.State, d.Reason = store.DriftUnknown, "step "+st.Name+": its hosts are known only after an apply"
		}
	}
	var would, unknown, unreachable, failed []string
	for _, t := range targets {
		where := names[t.StepIndex]
		switch client.TargetStatus(t.Status) {
		case client.TargetWouldChange:
			would = append(would, where)
		case client.TargetUnknown:
			unknown = append(unknown, where+": "+t.Unknown)
		case client.TargetUnreachable:
			unreachable = append(unreachable, where+": "+t.ErrorCode+": "+t.ErrorMsg)
		case client.TargetFailed:
			failed = append(failed, where+": "+t.ErrorCode+": "+t.ErrorMsg)
		}
	}
	switch {
	case len(unreachable) > 0:
		d.State, d.Reason = store.DriftUnreachable, unreachable[0]
	case len(would) > 0:
		d.State, d.Reason = store.DriftDrifted, "would change: "+strings.Join(would, ", ")
		d.Kind = store.DriftPending
		applied, err := s.store.RunByKey(ctx, run.CreatedBy, seeding.RunKey(sid, seedID))
		if err == nil && applied.Phase == store.PhaseSucceeded {
			d.Kind = store.DriftCorrective
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return d, err
		}
	case len(failed) > 0 || run.Phase != store.PhaseSucceeded:
		why := run.ErrorCode + ": " + run.ErrorMsg
		if len(failed) > 0 {
			why = failed[0]
		}
		d.State, d.Reason = store.DriftUnknown, "the check failed: "+why
	case len(unknown) > 0:
		d.State, d.Reason = store.DriftUnknown, unknown[0]
	case d.State == "":
		d.State = store.DriftInSync
	}
	if len(d.Reason) > 1000 {
		d.Reason = d.Reason[:1000] + "…"
	}
	return d, nil
}
