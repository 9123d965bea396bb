package bus

import "github.com/prometheus/client_golang/prometheus"

var (
	agentsDesc = prometheus.NewDesc("soulstack_bus_agents",
		"Agents connected to the bus now, as this keeper sees them (their heartbeats arrive).", nil, nil)
	heartbeatsDesc = prometheus.NewDesc("soulstack_bus_heartbeats_total",
		"Agent heartbeats this keeper received.", nil, nil)
	refusedDesc = prometheus.NewDesc("soulstack_bus_connections_refused_total",
		"Connections the bus's auth callout refused (no valid identity, revoked, or flooding), or turned away while admission was saturated (reason busy).", []string{"reason"}, nil)
	backlogDesc = prometheus.NewDesc("soulstack_bus_callout_backlog",
		"Auth callout requests waiting for a worker.", nil, nil)
)

// Collector reports the bus: agents present, heartbeats, refused
// connections and the admission backlog.
func (s *Server) Collector() prometheus.Collector { return busCollector{s} }

type busCollector struct{ s *Server }

func (busCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{agentsDesc, heartbeatsDesc, refusedDesc, backlogDesc} {
		ch <- d
	}
}

func (c busCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	present := len(c.s.present)
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(present))
	ch <- prometheus.MustNewConstMetric(heartbeatsDesc, prometheus.CounterValue, float64(c.s.heartbeats.Load()))
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(c.s.Refused()), "refused")
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(c.s.Busy()), "busy")
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(c.s.CalloutBacklog()))
}
