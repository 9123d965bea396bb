package runner

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/soulstack/soulstack/internal/store"
)

// stuckJobs finds the queue jobs that a keeper took and died with before
// it claimed their run: the job stays "running" in the queue, which hands
// it to nobody else, and the run stays Pending with no lease for the lease
// recovery to notice. A job that has been running for StaleAfter while its
// run is still Pending is such a job (a live keeper claims the run a few
// milliseconds after it takes the job): the run gets a fresh job. Each
// stuck job is re-enqueued once per keeper; the extra jobs of several
// keepers find the run claimed and do nothing.
func (r *Runner) stuckJobs(ctx context.Context) {
	staleBefore := r.clock.Now().Add(-r.cfg.Lease.StaleAfter)
	seen := map[int64]bool{}
	params := river.NewJobListParams().Kinds(RunArgs{}.Kind()).States(rivertype.JobStateRunning).First(500)
	for {
		res, err := r.river.JobList(ctx, params)
		if err != nil {
			r.log.Error("look for stuck queue jobs", "err", err)
			return
		}
		for _, j := range res.Jobs {
			seen[j.ID] = true
			if j.AttemptedAt == nil || j.AttemptedAt.After(staleBefore) || r.requeued[j.ID] {
				continue
			}
			var args RunArgs
			if err := json.Unmarshal(j.EncodedArgs, &args); err != nil || args.RunID == "" {
				continue
			}
			run, err := r.cfg.Store.RunGet(ctx, args.RunID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				r.log.Error("look for stuck queue jobs", "run", args.RunID, "err", err)
				return
			}
			if run.Phase != store.PhasePending {
				continue
			}
			if _, err := r.river.Insert(ctx, RunArgs{RunID: run.ID}, nil); err != nil {
				r.log.Error("re-enqueue a run whose queue job is stuck", "run", run.ID, "err", err)
				continue
			}
			r.requeued[j.ID] = true
			r.log.Warn("re-enqueued a pending run whose queue job was taken by a keeper that stopped before it claimed the run", "run", run.ID, "job", j.ID)
		}
		if len(res.Jobs) < 500 || res.LastCursor == nil {
			break
		}
		params = params.After(res.LastCursor)
	}
	for id := range r.requeued {
		if !seen[id] {
			delete(r.requeued, id)
		}
	}
}
