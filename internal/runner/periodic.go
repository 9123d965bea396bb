package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
)

// Periodic is a task the keepers run every Every, once across all keepers
// sharing the database: River's periodic jobs are enqueued by its elected
// leader only, and each job is unique per period. Each job is scheduled
// up to Jitter (a fraction of Every) late, so that fleets of keepers do not
// all sweep at the same instant.
type Periodic struct {
	// Name is the task's stable name (its job's args).
	Name   string
	Every  time.Duration
	Jitter float64
	Run    func(ctx context.Context) error
}

// PeriodicArgs are a periodic task's job args.
type PeriodicArgs struct {
	Name string `json:"name"`
}

// Kind is the job's stable kind name.
func (PeriodicArgs) Kind() string { return "soulstack.periodic" }

type periodicWorker struct {
	river.WorkerDefaults[PeriodicArgs]
	tasks map[string]Periodic
}

func (w *periodicWorker) Work(ctx context.Context, job *river.Job[PeriodicArgs]) error {
	t, ok := w.tasks[job.Args.Name]
	if !ok {
		return river.JobCancel(fmt.Errorf("no periodic task %q in this keeper", job.Args.Name))
	}
	return t.Run(ctx)
}

// periodicJobs are River's periodic jobs for tasks.
func periodicJobs(tasks []Periodic) []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for _, t := range tasks {
		out = append(out, river.NewPeriodicJob(river.PeriodicInterval(t.Every), func() (river.JobArgs, *river.InsertOpts) {
			opts := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: t.Every}} // one per task and period
			if t.Jitter > 0 {
				opts.ScheduledAt = time.Now().Add(time.Duration(rand.Float64() * t.Jitter * float64(t.Every)))
			}
			return PeriodicArgs{Name: t.Name}, opts
		}, nil))
	}
	return out
}
