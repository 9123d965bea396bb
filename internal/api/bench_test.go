package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/bench/cputime"
	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// benchKeeper is a real listening Operator API over a fresh database, with
// an admin token and an HTTP client that keeps its connections alive.
type benchKeeper struct {
	url    string
	admin  string
	client *http.Client
	store  *sqlstore.Store
}

// startBench is start for benchmarks: no log capture and no clock, just the
// server, a bootstrapped admin token and a keep-alive client.
func startBench(tb testing.TB, b testdb.Backend) *benchKeeper {
	tb.Helper()
	return startBenchWith(tb, b, nil)
}

// startBenchWith is startBench with the keeper's secrets.
func startBenchWith(tb testing.TB, b testdb.Backend, secrets *secret.Keeper) *benchKeeper {
	tb.Helper()
	st := b.Open(tb)
	srv := httptest.NewServer(api.New(withStore(st, api.Config{Version: "bench", Secrets: secrets})))
	tb.Cleanup(srv.Close)
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.TokenBootstrap(context.Background(), store.TokenCreateParams{Token: store.APIToken{ID: id, Name: "admin", Role: "admin", Hash: hash}, Actor: store.ActorKeeper}); err != nil {
		tb.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	tb.Cleanup(tr.CloseIdleConnections)
	return &benchKeeper{url: srv.URL, admin: plain, client: &http.Client{Transport: tr}, store: st}
}

// do sends one request and returns an error unless the status is want. It
// reads the whole body, as a real client would.
func (k *benchKeeper) do(method, path, body string, want int) error {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, k.url+path, r)
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+k.admin)
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d", method, path, resp.StatusCode, want)
	}
	return nil
}

// must fails the benchmark on err; only from the benchmark's own goroutine.
func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func providerBody(name string) string {
	return `{"name":"` + name + `","driver":"local","region":"here","credentials_ref":"env:CLOUD_TOKEN","fqdn_suffix":"local.test","config":{"subnet":"10.213.0.0/24"}}`
}

// cpuMeter measures the metric cpu-ns/op: CPU time of the whole process
// (client and server) per operation. On a shared machine it is steadier
// than ns/op.
type cpuMeter time.Duration

func startCPU() cpuMeter {
	d, _ := cputime.Process()
	return cpuMeter(d)
}

func (m cpuMeter) report(b *testing.B) {
	if end, ok := cputime.Process(); ok && b.N > 0 {
		b.ReportMetric(float64(end-time.Duration(m))/float64(b.N), "cpu-ns/op")
	}
}

// listSize is how many providers the list benchmark reads: one default page.
const listSize = 100

// parallelism is get-parallel's goroutines per GOMAXPROCS: with one, the two
// requests in flight on two CPUs leave them idle while each waits for the
// other side of its connection; 32 keeps them busy.
const parallelism = 32

// BenchmarkProviders measures the provider routes end to end, through a
// listening server and real HTTP requests over keep-alive connections, on
// each backend: create (POST, one audited transaction), get (GET by name),
// list (GET a page of listSize providers) and get-parallel (GET by name with
// b.RunParallel, parallelism×GOMAXPROCS requests in flight). cpu-ns/op is
// the CPU time of client and server together per request.
//
//	SOULSTACK_TEST_POSTGRES=postgres://… go test ./internal/api -run '^$' -bench BenchmarkProviders -benchmem
func BenchmarkProviders(b *testing.B) {
	for _, backend := range testdb.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			b.Run("create", func(b *testing.B) {
				k := startBench(b, backend)
				n := 0
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					n++
					must(b, k.do(http.MethodPost, "/v1/providers", providerBody(fmt.Sprintf("p-%d", n)), http.StatusCreated))
				}
				cpu.report(b)
			})
			b.Run("get", func(b *testing.B) {
				k := startBench(b, backend)
				must(b, k.do(http.MethodPost, "/v1/providers", providerBody("local"), http.StatusCreated))
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					must(b, k.do(http.MethodGet, "/v1/providers/local", "", http.StatusOK))
				}
				cpu.report(b)
			})
			b.Run("list", func(b *testing.B) {
				k := startBench(b, backend)
				for i := range listSize {
					must(b, k.do(http.MethodPost, "/v1/providers", providerBody(fmt.Sprintf("p-%03d", i)), http.StatusCreated))
				}
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					must(b, k.do(http.MethodGet, "/v1/providers", "", http.StatusOK))
				}
				cpu.report(b)
			})
			b.Run("get-parallel", func(b *testing.B) {
				k := startBench(b, backend)
				must(b, k.do(http.MethodPost, "/v1/providers", providerBody("local"), http.StatusCreated))
				b.ReportAllocs()
				b.SetParallelism(parallelism)
				b.ResetTimer()
				cpu := startCPU()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := k.do(http.MethodGet, "/v1/providers/local", "", http.StatusOK); err != nil {
							b.Error(err)
							return
						}
					}
				})
				cpu.report(b)
			})
		})
	}
}

// TestResponseIsEncodedMask keeps the fast masking of response bodies
// honest: a body is byte for byte the encoding of secret.Mask applied to the
// wire value, key order, escapes and masked values included, even for a
// config the API itself would never write (duplicate keys, escapes, HTML
// characters, nested secrets, a registered secret's text).
func TestResponseIsEncodedMask(t *testing.T) {
	t.Parallel()
	const registered = "registered-canary-5e1f"
	keeper := secret.NewKeeper()
	keeper.Register(registered)
	k := startBenchWith(t, testdb.SQLite, keeper)
	ctx := context.Background()
	config := `{"zone":"a<b>&c \u0041 \u2028 é","password":"p","password":null,"nested":[{"client_secret":{"x":1}},1.50,-0,1e3,"` + registered + `!"],"b":{"api_token":null},"\u0061":"escaped key"}`
	for _, p := range []store.Provider{
		{Name: "tricky", Driver: "local", Region: "<eu> & \"west\"", CredentialsRef: "env:" + registered, FQDNSuffix: "local.test", Config: json.RawMessage(config)},
		{Name: "plain", Driver: "local"},
	} {
		if _, err := k.store.ProviderCreate(ctx, store.ProviderCreateParams{Provider: p, Actor: store.ActorKeeper}); err != nil {
			t.Fatal(err)
		}
	}
	wire := func(p store.Provider) client.Provider {
		return client.Provider{Name: p.Name, Driver: p.Driver, Region: p.Region, CredentialsRef: p.CredentialsRef,
			FQDNSuffix: p.FQDNSuffix, Config: p.Config, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy, Project: p.Project}
	}
	encode := func(v any) string {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(keeper.Mask(v)); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, k.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+k.admin)
		resp, err := k.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var list client.ProviderList
	for _, name := range []string{"plain", "tricky"} {
		p, err := k.store.ProviderGet(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		list.Items = append(list.Items, wire(p))
		if got, want := get("/v1/providers/"+name), encode(wire(p)); got != want {
			t.Errorf("GET %s:\n got %s\nwant %s", name, got, want)
		}
	}
	got, want := get("/v1/providers"), encode(list)
	if got != want {
		t.Errorf("GET /v1/providers:\n got %s\nwant %s", got, want)
	}
	for _, leak := range []string{registered, `"p"`, `"x"`} {
		if strings.Contains(got, leak) {
			t.Errorf("response leaks %s: %s", leak, got)
		}
	}
}
