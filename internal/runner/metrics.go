package runner

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/store"
)

// Metrics counts what this keeper's executions did on their targets: each
// target's result by module and status, and how long each took. A nil
// *Metrics counts nothing.
type Metrics struct {
	targets  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics makes the runner's metrics, the statuses of a target
// counted from zero.
func NewMetrics() *Metrics {
	m := &Metrics{
		targets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_run_targets_total", Help: "Targets of steps this keeper ran, by module and result status.",
		}, []string{"module", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_run_target_duration_seconds", Help: "How long a step took on one target, by module.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"module"}),
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.targets, m.duration}
}

// Known starts the counters of module at zero: a rate is defined before
// its first target. (Its duration histogram appears with the first.)
func (m *Metrics) Known(module string) {
	if m == nil {
		return
	}
	for _, st := range client.TargetStatuses {
		m.targets.WithLabelValues(module, string(st))
	}
}

// target counts one target's result in a step of module.
func (m *Metrics) target(module string, t store.RunTarget) {
	if m == nil || module == "" {
		return
	}
	m.targets.WithLabelValues(module, t.Status).Inc()
	if t.Attempts > 0 {
		m.duration.WithLabelValues(module).Observe((time.Duration(t.DurationMS) * time.Millisecond).Seconds())
	}
}
