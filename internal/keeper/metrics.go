package keeper

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/internal/store"
)

// changeMetrics counts the committed changes this keeper made, as the
// bus (store.Changes) tells them: runs by how they ended, VMs made and
// destroyed, souls joined, drift changes by the state reached. Counters
// start at zero for every label the keeper knows of, so that a rate is
// defined before the first change.
type changeMetrics struct {
	runs      *prometheus.CounterVec
	vms       *prometheus.CounterVec
	joined    prometheus.Counter
	drift     *prometheus.CounterVec
	collected []prometheus.Collector
}

func newChangeMetrics(c *store.Changes) *changeMetrics {
	m := &changeMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_runs_finished_total", Help: "Runs this keeper ended, by phase.",
		}, []string{"phase"}), // a rejected run is Rejected here, as it is shown
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
	for _, p := range []string{store.PhaseSucceeded, store.PhaseFailed, store.PhaseCancelled, store.PhaseRejected} {
		m.runs.WithLabelValues(p)
	}
	for _, st := range []string{store.DriftInSync, store.DriftDrifted, store.DriftUnknown, store.DriftUnreachable} {
		m.drift.WithLabelValues(st)
	}
	m.collected = []prometheus.Collector{m.runs, m.vms, m.joined, m.drift}
	store.On(c, func(_ context.Context, r store.RunFinished) {
		phase := r.Phase
		if phase == store.PhaseFailed && store.RejectedCode(r.ErrorCode) {
			phase = store.PhaseRejected
		}
		m.runs.WithLabelValues(phase).Inc()
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
