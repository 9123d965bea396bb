package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/soulstack/soulstack/internal/store"
)

// FinishedArgs is the queue job of what follows a run's end (Config.Finished),
// inserted in the transaction that ends the run.
type FinishedArgs struct {
	RunID string `json:"run_id"`
}

// Kind is the job's stable kind name.
func (FinishedArgs) Kind() string { return "soulstack.run_finished" }

type finishedWorker struct {
	river.WorkerDefaults[FinishedArgs]
	r *Runner
}

func (w *finishedWorker) Work(ctx context.Context, job *river.Job[FinishedArgs]) error {
	if w.r.cfg.Finished == nil {
		return nil
	}
	run, err := w.r.cfg.Store.RunGet(ctx, job.Args.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("run %s is gone", job.Args.RunID))
	}
	if err != nil {
		return err
	}
	return w.r.cfg.Finished(ctx, run)
}
