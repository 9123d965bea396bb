package keeper

import (
	"context"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/version"
)

// changeMetrics counts the committed changes this keeper made, as the
// bus (store.Changes) tells them: runs accepted and ended (by mode and
// phase, with their wait in the queue and their work timed), VMs made
// and destroyed, souls joined, drift changes by the state reached.
// Counters start at zero for every label the keeper knows of, so that a
// rate is defined before the first change.
type changeMetrics struct {
	created   *prometheus.CounterVec
	runs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	vms       *prometheus.CounterVec
	joined    prometheus.Counter
	drift     *prometheus.CounterVec
	collected []prometheus.Collector
}

// runModes are the modes a run has.
var runModes = []string{"apply", "check"}

func newChangeMetrics(c *store.Changes) *changeMetrics {
	m := &changeMetrics{
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_runs_created_total", Help: "Runs this keeper accepted, by mode (apply or check).",
		}, []string{"mode"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_runs_finished_total", Help: "Runs this keeper ended, by phase and mode.",
		}, []string{"phase", "mode"}), // a rejected run is Rejected here, as it is shown
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_run_duration_seconds", Help: "How long runs worked, from their start to their end, by mode and phase.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"mode", "phase"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_run_queue_wait_seconds", Help: "How long runs waited in the queue, from their creation to their start, by mode.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"mode"}),
		vms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_cloud_vms_total", Help: "VMs this keeper registered (created) or saw destroyed (destroyed: now or found already gone), by provider.",
		}, []string{"provider", "op"}),
		joined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "soulstack_souls_joined_total", Help: "Souls that joined through this keeper with their bootstrap token.",
		}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_drift_changes_total", Help: "Changes of a seed's drift state this keeper recorded, by the state reached.",
		}, []string{"to"}),
	}
	for _, mode := range runModes {
		m.created.WithLabelValues(mode)
		m.wait.WithLabelValues(mode)
		for _, p := range []string{store.PhaseSucceeded, store.PhaseFailed, store.PhaseCancelled, store.PhaseRejected} {
			m.runs.WithLabelValues(p, mode)
			m.duration.WithLabelValues(mode, p)
		}
	}
	for _, st := range []string{store.DriftInSync, store.DriftDrifted, store.DriftUnknown, store.DriftUnreachable} {
		m.drift.WithLabelValues(st)
	}
	m.collected = []prometheus.Collector{m.created, m.runs, m.duration, m.wait, m.vms, m.joined, m.drift, buildInfo()}
	store.On(c, func(_ context.Context, r store.RunCreated) { m.created.WithLabelValues(r.Mode).Inc() })
	store.On(c, func(_ context.Context, r store.RunFinished) {
		phase := r.Phase
		if phase == store.PhaseFailed && store.RejectedCode(r.ErrorCode) {
			phase = store.PhaseRejected
		}
		m.runs.WithLabelValues(phase, r.Mode).Inc()
		if !r.StartedAt.IsZero() {
			m.wait.WithLabelValues(r.Mode).Observe(r.StartedAt.Sub(r.CreatedAt).Seconds())
			m.duration.WithLabelValues(r.Mode, phase).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
		}
	})
	store.On(c, func(_ context.Context, p store.CloudProvisioned) {
		m.vms.WithLabelValues(p.Provider, "created").Add(float64(len(p.SIDs)))
	})
	store.On(c, func(_ context.Context, d store.CloudDestroyed) {
		m.vms.WithLabelValues(d.Provider, "destroyed").Add(float64(len(d.Destroyed) + len(d.AlreadyGone)))
	})
	store.On(c, func(context.Context, store.SoulJoined) { m.joined.Inc() })
	store.On(c, func(_ context.Context, d store.DriftChanged) { m.drift.WithLabelValues(d.To).Inc() })
	return m
}

// buildInfo is soulstack_build_info: 1, labelled with what this keeper is.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "soulstack_build_info", Help: "Always 1: the keeper's version, release and Go version as labels.",
	}, []string{"version", "release", "goversion"})
	g.WithLabelValues(version.String(), version.Release, runtime.Version()).Set(1)
	return g
}

// counter is the one store method stateMetrics needs.
type counter interface {
	Counts(ctx context.Context) (store.Counts, error)
}

// stateMetrics reports what the registries hold when scraped: runs not
// finished by phase (the queue's depth is the Pending ones) and souls by
// project and status; one grouped read each, bounded in time.
type stateMetrics struct{ store counter }

var (
	runsDesc  = prometheus.NewDesc("soulstack_runs", "Runs not finished, by phase (Pending: waiting in the queue).", []string{"phase"}, nil)
	soulsDesc = prometheus.NewDesc("soulstack_souls", "Souls in the registry, by project and status.", []string{"project", "status"}, nil)
	upDesc    = prometheus.NewDesc("soulstack_registry_up", "1 when the registries could be counted for this scrape, else 0.", nil, nil)
)

// stateScrapeTimeout bounds the reads of one scrape.
const stateScrapeTimeout = 2 * time.Second

func (stateMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- soulsDesc
	ch <- upDesc
}

func (m stateMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateScrapeTimeout)
	defer cancel()
	c, err := m.store.Counts(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
	for _, phase := range []string{store.PhasePending, store.PhaseRunning, store.PhaseAwaitingApproval} {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(c.Runs[phase]), phase)
	}
	// Every status of every project that has souls (and of the default
	// one), zero when none is in it: an alert on a status has a series.
	projects := map[string]bool{store.DefaultProject: true}
	for k := range c.Souls {
		projects[k.Project] = true
	}
	for p := range projects {
		for _, st := range []string{store.SoulPending, store.SoulActive, store.SoulUnreachable, store.SoulDestroyed} {
			ch <- prometheus.MustNewConstMetric(soulsDesc, prometheus.GaugeValue, float64(c.Souls[store.SoulCountKey{Project: p, Status: st}]), p, st)
		}
	}
}

// collectors are every metric of the keeper's parts, served at /metrics
// beside the API's own.
func (s *System) collectors() []prometheus.Collector {
	out := append(newChangeMetrics(s.Changes).collected, stateMetrics{s.Store}, s.SSH.Collector(), s.Notifier.Metrics.Collector())
	out = append(out, s.runMetrics.Collectors()...)
	out = append(out, s.Store.Collectors()...)
	if s.Bus != nil {
		out = append(out, s.Bus.Collector())
	}
	return append(out, s.Plugins.Collectors()...)
}
