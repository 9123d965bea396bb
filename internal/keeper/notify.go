package keeper

import (
	"context"
	"database/sql"
	"net/url"
	"strings"

	"github.com/riverqueue/river"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/drift"
	"github.com/soulstack/soulstack/internal/notify"
	"github.com/soulstack/soulstack/internal/store"
)

// buildNotifier makes the keeper's webhook notifier from keeper.yml's
// notifications; its deliveries go through the run queue (set once the
// runner exists).
func (s *System) buildNotifier(c config.Config) {
	n := &notify.Notifier{Store: s.Store, Secrets: s.Secrets, Base: s.Named("notify")}
	for _, nc := range c.Notifications {
		name := nc.Name
		if name == "" {
			u, _ := url.Parse(nc.URL) // validated with the config
			name = u.Host
		}
		ref := nc.SecretRef
		n.Targets = append(n.Targets, notify.Target{Name: name, URL: nc.URL, Events: nc.Events, Secret: func(ctx context.Context) ([]byte, error) {
			v, err := s.resolver.Resolve(ctx, ref)
			return []byte(strings.TrimSpace(v)), err
		}})
	}
	n.Enqueue = func(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error {
		return s.Runs.Enqueue(ctx, args, opts)
	}
	names := make([]string, len(n.Targets))
	for i, t := range n.Targets {
		names[i] = t.Name
	}
	n.Metrics = notify.NewMetrics(names...)
	s.Notifier = n
}

// runFinished is what follows every finished run (runner.Config.Finished,
// at least once, after a crash too): a drift check's outcome is recorded,
// and run.succeeded / run.failed are notified (drift checks' own runs
// excepted: their outcome is the drift). An error has the queue try again.
func (s *System) runFinished(ctx context.Context, run store.Run) error {
	if err := s.Drift.Finished(ctx, run); err != nil {
		return err
	}
	if drift.IsCheck(run) {
		return nil
	}
	event := runEvent(run.Phase)
	if event == "" {
		return nil
	}
	data := map[string]any{"id": run.ID, "name": run.Name, "mode": run.Mode, "phase": run.Phase, "created_by": run.CreatedBy,
		"started_at": run.StartedAt, "finished_at": run.FinishedAt, "message": run.Message}
	if run.ErrorCode != "" {
		data["error"] = client.RunError{Code: run.ErrorCode, Message: run.ErrorMsg}
	}
	return s.Notifier.Send(ctx, run.Project, event, "run/"+run.ID, data)
}

// followsRun reports whether anything follows a run's end in phase: a
// drift check's record, or a run.succeeded / run.failed webhook a
// notification names.
func (s *System) followsRun(run store.Run, phase string) bool {
	if drift.IsCheck(run) {
		return true
	}
	event := runEvent(phase)
	return event != "" && s.Notifier.Wants(event)
}

// runEvent is the notification of a run that ended in phase: run.succeeded,
// run.failed, or none.
func runEvent(phase string) string {
	switch phase {
	case store.PhaseSucceeded:
		return "run.succeeded"
	case store.PhaseFailed:
		return "run.failed"
	}
	return ""
}

// driftChanged is the queue's worker for what follows a change of drift
// state (drift.ChangedArgs, queued with the change).
type driftChanged struct {
	river.WorkerDefaults[drift.ChangedArgs]
	s *System
}

func (w driftChanged) Work(ctx context.Context, job *river.Job[drift.ChangedArgs]) error {
	return w.s.Drift.Changed(ctx, job.Args)
}

// followUps is the store's outbox (sqlstore.WithFollowUps): a
// cloud.provisioned audit event (a create, a resize, a destroy or a failed
// one) queues its webhook in the transaction that writes it, when a
// notification names it.
func (s *System) followUps(ctx context.Context, tx *sql.Tx, e store.Audited) error {
	if e.Action != "cloud.provisioned" || !s.Notifier.Wants(e.Action) {
		return nil
	}
	return s.Runs.EnqueueTx(ctx, tx, notify.EventArgs{Project: e.Project, Event: e.Action, Object: e.Object, Data: e.Payload}, nil)
}
