package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/soulstack/soulstack/internal/agent"
	"github.com/soulstack/soulstack/internal/version"
)

// serveMetrics serves the agent's metrics at addr until ctx ends: plain
// HTTP without a token, so bind it to loopback or to a network only the
// scraper reaches. It returns the address it listens at.
func serveMetrics(ctx context.Context, addr string, m *agent.Metrics, log *slog.Logger) (net.Addr, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "soulstack_agent_build_info", Help: "Always 1: the agent's version and Go version as labels.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version.String(), runtime.Version()).Set(1)
	reg.MustRegister(build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("metrics listening (no token needed here)", "addr", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr(), nil
}
