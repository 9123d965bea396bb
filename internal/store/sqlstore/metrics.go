package sqlstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// writeMetrics time the store's audited writes (each a transaction with
// its audit event) and count the events by action.
type writeMetrics struct {
	seconds prometheus.Histogram
	events  *prometheus.CounterVec
}

func newWriteMetrics() *writeMetrics {
	return &writeMetrics{
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "soulstack_audited_write_duration_seconds", Help: "How long a committed registry write took with its audit event, from its transaction's start to its commit.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_audit_events_total", Help: "Audit events this keeper wrote, by action.",
		}, []string{"action"}),
	}
}

// Collectors are the store's metrics to register.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.seconds, s.metrics.events}
}

// wrote counts one committed audited write of action that began at start.
func (m *writeMetrics) wrote(action string, start time.Time) {
	m.seconds.Observe(time.Since(start).Seconds())
	m.events.WithLabelValues(action).Inc()
}
