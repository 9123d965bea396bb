package plugin

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/driversdk"
)

// hostMetrics count the drivers' calls and time them.
type hostMetrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

func newHostMetrics() hostMetrics {
	return hostMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_driver_calls_total", Help: "Calls to cloud driver plugins, by driver, method and result (ok, or the error's code: driver.crashed, driver.timeout, cloud.quota_exceeded, …).",
		}, []string{"driver", "method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_driver_call_duration_seconds", Help: "How long calls to cloud driver plugins took, by driver and method.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"driver", "method"}),
	}
}

// Collectors are the host's metrics to register.
func (h *Host) Collectors() []prometheus.Collector {
	return []prometheus.Collector{h.metrics.calls, h.metrics.seconds}
}

// observe counts one call of method on driver that took d and ended with
// err.
func (m hostMetrics) observe(driver, method string, d time.Duration, err error) {
	code := "ok"
	if err != nil {
		code = "error"
		var de *driversdk.Error
		if errors.As(err, &de) && de.Code != "" {
			code = de.Code
		}
	}
	m.calls.WithLabelValues(driver, method, code).Inc()
	m.seconds.WithLabelValues(driver, method).Observe(d.Seconds())
}
