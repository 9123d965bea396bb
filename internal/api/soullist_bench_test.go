package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// fleetSize is how many souls BenchmarkSoulList registers.
const fleetSize = 10_000

// seedFleet registers fleetSize souls through the store (each an audited
// transaction, as POST /v1/souls does): 70% active, 20% unreachable, 8%
// pending, 2% destroyed; a third each on providers p-0, p-1 and none;
// attributes role (10 values), dc (5 values) and rack (one of 1,000).
func seedFleet(b *testing.B, k *benchKeeper) {
	ctx := context.Background()
	for _, p := range []string{"p-0", "p-1"} {
		must(b, k.do(http.MethodPost, "/v1/providers", providerBody(p), http.StatusCreated))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < fleetSize; i += 4 {
				status := store.SoulActive
				switch m := i % 50; {
				case m < 10:
					status = store.SoulUnreachable
				case m < 14:
					status = store.SoulPending
				case m == 14:
					status = store.SoulDestroyed
				}
				provider := []string{"p-0", "p-1", ""}[i%3]
				attrs, _ := json.Marshal(map[string]string{"role": fmt.Sprintf("role-%d", i%10), "dc": fmt.Sprintf("dc-%d", i%5), "rack": fmt.Sprintf("r-%03d", i%1000)})
				if _, err := k.store.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{
					SID: fmt.Sprintf("host-%05d.fleet.test", i), Status: status, Provider: provider, Address: "10.1.0.1", Attributes: attrs,
					Connection: store.Connection{Transport: "ssh", User: "deploy", Port: 22, KeyRef: "file:/etc/soulstack/id_ed25519"},
				}, Actor: store.ActorKeeper}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkSoulList measures GET /v1/souls at 10,000 registered souls,
// through a listening server and real HTTP requests, on each backend: a
// default page (100 souls) unfiltered and filtered by status, provider,
// label, all three, and a rare label (10 matches, the whole table
// scanned on SQLite). Each reports p50-ms and p99-ms, the latency of one
// request as the client sees it (the body read).
//
//	SOULSTACK_TEST_POSTGRES=postgres://… go test ./internal/api -run '^$' -bench BenchmarkSoulList -benchtime 300x
func BenchmarkSoulList(b *testing.B) {
	queries := []struct{ name, query string }{
		{"all", ""},
		{"status", "status=unreachable"},
		{"provider", "provider=p-1"},
		{"label", "label=role=role-3"},
		{"combined", "status=active&provider=p-0&label=dc=dc-2"},
		{"rare-label", "label=rack=r-042"},
		{"last-page", "status=active&after=host-09900.fleet.test"},
	}
	for _, backend := range testdb.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			k := startBench(b, backend)
			t0 := time.Now()
			seedFleet(b, k)
			b.Logf("%s: %d souls registered in %s", backend.Name, fleetSize, time.Since(t0).Round(time.Millisecond))
			for _, q := range queries {
				path := "/v1/souls"
				if q.query != "" {
					v, err := url.ParseQuery(q.query)
					must(b, err)
					path += "?" + v.Encode()
				}
				b.Run(q.name, func(b *testing.B) {
					var lat []time.Duration
					cpu := startCPU()
					for b.Loop() {
						t := time.Now()
						must(b, k.do(http.MethodGet, path, "", http.StatusOK))
						lat = append(lat, time.Since(t))
					}
					cpu.report(b)
					slices.Sort(lat)
					pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
					b.ReportMetric(pct(0.5), "p50-ms")
					b.ReportMetric(pct(0.99), "p99-ms")
				})
			}
		})
	}
}
