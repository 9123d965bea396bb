package ssh

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// poolStats are the pool's counts for its metrics.
type poolStats struct {
	dialsOK  atomic.Int64
	dialsBad sync.Map // code -> *atomic.Int64
}

var (
	dialsDesc = prometheus.NewDesc("soulstack_ssh_dials_total",
		"SSH connections this keeper's pool dialled, by result: ok, or the failure's code (ssh.unreachable, ssh.auth_failed, ssh.host_key_mismatch, …).", []string{"result"}, nil)
	connsDesc = prometheus.NewDesc("soulstack_ssh_connections",
		"SSH connections the pool holds now (warm between runs while ssh.idle_timeout allows).", nil, nil)
)

// dialCodes are the results a dial has, counted from zero.
var dialCodes = []string{"ok", "ssh.unreachable", "ssh.auth_failed", "ssh.host_key_mismatch", "ssh.invalid_target"}

// Collector reports the pool's dials and the connections it holds.
func (p *Pool) Collector() prometheus.Collector { return poolCollector{p} }

type poolCollector struct{ p *Pool }

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dialsDesc
	ch <- connsDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, code := range dialCodes {
		seen[code] = true
		ch <- prometheus.MustNewConstMetric(dialsDesc, prometheus.CounterValue, float64(c.p.dials(code)), code)
	}
	c.p.stats.dialsBad.Range(func(k, v any) bool {
		if code := k.(string); !seen[code] {
			ch <- prometheus.MustNewConstMetric(dialsDesc, prometheus.CounterValue, float64(v.(*atomic.Int64).Load()), code)
		}
		return true
	})
	c.p.mu.Lock()
	conns := map[*poolEntry]bool{}
	for _, e := range c.p.entries {
		if isDone(e.done) && e.client != nil {
			conns[e] = true // aliases share an entry
		}
	}
	c.p.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(len(conns)))
}

// dialed counts one dial's result.
func (p *Pool) dialed(err error) {
	if err == nil {
		p.stats.dialsOK.Add(1)
		return
	}
	code := Code(err)
	if code == "" {
		code = "error"
	}
	n, _ := p.stats.dialsBad.LoadOrStore(code, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// dials is how many dials ended with result code ("ok" for the good ones).
func (p *Pool) dials(code string) int64 {
	if code == "ok" {
		return p.stats.dialsOK.Load()
	}
	if n, ok := p.stats.dialsBad.Load(code); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}
