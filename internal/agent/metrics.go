package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/internal/agent/wire"
)

// Metrics count what the agent does: commands by kind and result with
// their time, and its connection to the bus. A nil *Metrics counts
// nothing. soul run serves them on --metrics-listen.
type Metrics struct {
	commands   *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	connected  prometheus.Gauge
	reconnects prometheus.Counter
}

// Command kinds and results the metrics count, from zero.
var (
	commandKinds   = []string{"plain", "durable", "probe"}
	commandResults = []string{"ok", "nonzero", "cancelled", "refused"}
)

// NewMetrics makes the agent's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_agent_commands_total", Help: "Commands the agent ran or answered, by kind (plain, durable, probe) and result (ok, nonzero: another exit status, cancelled, refused: not run, with a code).",
		}, []string{"kind", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_agent_command_duration_seconds", Help: "How long the agent's commands took, by kind.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60, 300, 1800},
		}, []string{"kind"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soulstack_agent_bus_connected", Help: "1 while the agent's connection to the keeper's bus is up.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "soulstack_agent_bus_reconnects_total", Help: "Times the agent's bus connection came back after a drop.",
		}),
	}
	for _, k := range commandKinds {
		for _, r := range commandResults {
			m.commands.WithLabelValues(k, r)
		}
		m.seconds.WithLabelValues(k)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.commands, m.seconds, m.connected, m.reconnects}
}

// command counts one command of req that ended with out after d.
func (m *Metrics) command(req wire.ExecRequest, out Outcome, d time.Duration) {
	if m == nil {
		return
	}
	kind := "plain"
	switch {
	case req.Probe != nil:
		kind = "probe"
	case req.Durable != nil:
		kind = "durable"
	}
	result := "ok"
	switch {
	case out.Code != "":
		result = "refused"
	case out.Cancelled:
		result = "cancelled"
	case out.ExitCode != 0:
		result = "nonzero"
	}
	m.commands.WithLabelValues(kind, result).Inc()
	m.seconds.WithLabelValues(kind).Observe(d.Seconds())
}

func (m *Metrics) setConnected(up bool) {
	if m == nil {
		return
	}
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

func (m *Metrics) reconnected() {
	if m != nil {
		m.reconnects.Inc()
	}
}
