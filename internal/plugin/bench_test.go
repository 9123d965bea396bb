package plugin_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/plugin"
)

// BenchmarkCapabilities measures the keeper's overhead per plugin call: a
// no-op call (Capabilities) through the host, over gRPC, to a real plugin
// process. It reports the median and the 99th percentile of single calls.
func BenchmarkCapabilities(b *testing.B) {
	h, err := plugin.New(plugin.Config{PluginDir: drivertest.PluginDir(b), Base: base.Base{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	d, err := h.Driver(ctx, "fake")
	if err != nil {
		b.Fatal(err)
	}
	for range 100 { // warm up the connection
		if _, err := d.Capabilities(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := d.Capabilities(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
}
