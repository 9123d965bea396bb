package notify

import "github.com/prometheus/client_golang/prometheus"

// Delivery outcomes counted by Metrics.
const (
	outcomeDelivered = "delivered"
	outcomeRetried   = "retried" // failed, tried again later
	outcomeFailed    = "failed"  // failed for the last time
)

// Metrics counts webhook delivery attempts by notification and outcome.
// A nil *Metrics counts nothing.
type Metrics struct{ attempts *prometheus.CounterVec }

// NewMetrics makes the notifications' metrics, each of names' outcomes
// counted from zero.
func NewMetrics(names ...string) *Metrics {
	m := &Metrics{attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "soulstack_notification_attempts_total", Help: "Webhook delivery attempts, by notification and outcome (delivered, retried, failed: the last attempt failed).",
	}, []string{"notification", "outcome"})}
	for _, n := range names {
		for _, o := range []string{outcomeDelivered, outcomeRetried, outcomeFailed} {
			m.attempts.WithLabelValues(n, o)
		}
	}
	return m
}

// Collector is the metrics to register.
func (m *Metrics) Collector() prometheus.Collector { return m.attempts }

func (m *Metrics) attempt(notification, outcome string) {
	if m != nil {
		m.attempts.WithLabelValues(notification, outcome).Inc()
	}
}
