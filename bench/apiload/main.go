// Command apiload is a load generator for the keeper's Operator API. It runs
// in its own process, against a keeper started separately, and records the
// latency of every request.
//
// By default it is a closed loop: -c workers each send a request, wait for
// the response and send the next, for -d. With -rate it is an open loop:
// requests are scheduled at a fixed total rate, whether or not earlier ones
// have finished, and each latency is measured from the time its request was
// due, so that time spent queued behind a slow server counts (no coordinated
// omission). If all -c workers are busy, due requests wait for one.
//
// Connections are kept alive; the transport holds up to -c connections to
// the keeper, so that every worker keeps its own.
//
// Usage:
//
//	apiload -url http://127.0.0.1:8420 -token-file .keeper/admin.token [flags]
//
// Flags:
//
//	-url URL           the keeper (default http://127.0.0.1:8420)
//	-token TOKEN       API token sent as "Authorization: Bearer TOKEN"
//	-token-file PATH   read the token from PATH instead (e.g. <data-dir>/admin.token)
//	-c N               concurrent workers, and connections (default 200)
//	-d DURATION        how long to send requests (default 60s)
//	-warmup DURATION   send requests for this long first, recording nothing (default 0)
//	-rate R            open loop: R requests per second in total; 0 is a closed loop (default 0)
//	-provider NAME     the provider that get requests read (default "local"); it must exist
//	-mix SPEC          weighted operations, op:weight,… of get (GET /v1/providers/NAME),
//	                   list (GET /v1/providers) and create (POST /v1/providers, a new
//	                   provider each time) (default "get:1")
//	-timeout DURATION  per-request timeout; a timeout counts as an error (default 10s)
//
// It prints the number of requests, the rate achieved, the errors (a status
// other than the operation's success status, or a transport error, with the
// first few messages), the latency percentiles p50, p90, p99, p99.9 and the
// maximum over every recorded request, and the CPU time this process used.
// With -rate it also prints how many requests were due and how many were
// handed to workers; the rest were never sent and have no latency, so a
// shortfall means the keeper (or apiload) could not keep up.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/bench/cputime"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

type options struct {
	url, token, tokenFile, provider, mix string
	concurrency                          int
	duration, warmup, timeout            time.Duration
	rate                                 float64
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8420", "the keeper's URL")
	flag.StringVar(&o.token, "token", "", "API token")
	flag.StringVar(&o.tokenFile, "token-file", "", "read the API token from this file")
	flag.IntVar(&o.concurrency, "c", 200, "concurrent workers and connections")
	flag.DurationVar(&o.duration, "d", 60*time.Second, "how long to send requests")
	flag.DurationVar(&o.warmup, "warmup", 0, "send requests for this long first, recording nothing")
	flag.Float64Var(&o.rate, "rate", 0, "open loop: requests per second in total (0: closed loop)")
	flag.StringVar(&o.provider, "provider", "local", "the provider get requests read")
	flag.StringVar(&o.mix, "mix", "get:1", "weighted operations: op:weight,… of get, list, create")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	flag.Parse()
	return o
}

// op is one kind of request.
type op struct {
	name   string
	weight int
	want   int // success status
}

func parseMix(spec string) ([]op, error) {
	want := map[string]int{"get": http.StatusOK, "list": http.StatusOK, "create": http.StatusCreated}
	var ops []op
	for _, part := range strings.Split(spec, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			w = "1"
		}
		status, known := want[name]
		if !known {
			return nil, fmt.Errorf("-mix: unknown operation %q (want get, list or create)", name)
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-mix: weight of %s: %q is not a non-negative integer", name, w)
		}
		if n > 0 {
			ops = append(ops, op{name: name, weight: n, want: status})
		}
	}
	if len(ops) == 0 {
		return nil, errors.New("-mix: no operation has a positive weight")
	}
	return ops, nil
}

// loader sends requests and keeps what they did.
type loader struct {
	o      options
	ops    []op
	total  int
	client *http.Client
	seq    atomic.Int64 // names of created providers

	scheduled atomic.Int64 // open loop: due times handed out

	mu       sync.Mutex
	errs     int
	statuses map[int]int
	samples  []string // the first few error messages
}

func run() error {
	o := parseFlags()
	if o.concurrency < 1 || o.duration <= 0 {
		return errors.New("-c must be at least 1 and -d positive")
	}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return err
		}
		o.token = strings.TrimSpace(string(b))
	}
	if o.token == "" {
		return errors.New("no token: pass -token or -token-file")
	}
	ops, err := parseMix(o.mix)
	if err != nil {
		return err
	}
	l := &loader{o: o, ops: ops, statuses: map[int]int{}}
	for _, p := range ops {
		l.total += p.weight
	}
	tr := &http.Transport{
		MaxIdleConns:        o.concurrency,
		MaxIdleConnsPerHost: o.concurrency,
		MaxConnsPerHost:     o.concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	l.client = &http.Client{Transport: tr, Timeout: o.timeout}

	if o.warmup > 0 {
		l.phase(o.warmup, false)
		l.errs, l.statuses, l.samples = 0, map[int]int{}, nil
		l.scheduled.Store(0)
	}
	cpu0 := cpuTime()
	began := time.Now()
	lat := l.phase(o.duration, true)
	elapsed := time.Since(began)
	cpu := cpuTime() - cpu0

	mode := "closed loop"
	if o.rate > 0 {
		mode = fmt.Sprintf("open loop at %.0f req/s", o.rate)
	}
	fmt.Printf("target      %s  mix %s  %s, %d workers, %s\n", o.url, o.mix, mode, o.concurrency, o.duration)
	fmt.Printf("requests    %d in %s (with a response)\n", len(lat), elapsed.Round(time.Millisecond))
	if o.rate > 0 {
		interval := time.Duration(float64(time.Second) / o.rate)
		due := (o.duration + interval - 1) / interval
		fmt.Printf("scheduled   %d due, %d handed to workers (the rest were never sent)\n", due, l.scheduled.Load())
	}
	fmt.Printf("rate        %.0f req/s\n", float64(len(lat))/elapsed.Seconds())
	fmt.Printf("errors      %d\n", l.errs)
	codes := make([]int, 0, len(l.statuses))
	for c := range l.statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		if c == 0 {
			fmt.Printf("  transport errors: %d\n", l.statuses[c])
			continue
		}
		fmt.Printf("  status %d: %d\n", c, l.statuses[c])
	}
	for _, s := range l.samples {
		fmt.Printf("  e.g. %s\n", s)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Printf("latency     p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
			pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 99.9), lat[len(lat)-1].Round(time.Microsecond))
	}
	fmt.Printf("client cpu  %.3fs (%.2f cores)\n", cpu.Seconds(), cpu.Seconds()/elapsed.Seconds())
	return nil
}

// phase sends requests for d and returns the latencies if record is set.
// Requests in flight when d ends are completed and counted.
func (l *loader) phase(d time.Duration, record bool) []time.Duration {
	done := make(chan struct{})
	stop := time.AfterFunc(d, func() { close(done) })
	defer stop.Stop()
	var due chan time.Time // open loop: when each request was due
	if l.o.rate > 0 {
		due = make(chan time.Time, 4096)
		go schedule(done, d, l.o.rate, due, &l.scheduled)
	}
	per := make([][]time.Duration, l.o.concurrency)
	var wg sync.WaitGroup
	for w := range l.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var lat []time.Duration
			defer func() { per[w] = lat }()
			for {
				var start time.Time
				if due != nil {
					select {
					case <-done:
						return
					case start = <-due:
					}
				} else {
					select {
					case <-done:
						return
					default:
					}
					start = time.Now()
				}
				if l.send(l.pick(rng)) && record {
					lat = append(lat, time.Since(start))
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	return all
}

// schedule sends the due time of each request at rate per second, for d or
// until done is closed, counting them in n. When the workers fall behind it
// blocks, then hands out the overdue times at once: due times follow the
// schedule, never the server.
func schedule(done <-chan struct{}, d time.Duration, rate float64, due chan<- time.Time, n *atomic.Int64) {
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	deadline := next.Add(d)
	t := time.NewTimer(0)
	defer t.Stop()
	for next.Before(deadline) {
		for now := time.Now(); !next.After(now) && next.Before(deadline); next = next.Add(interval) {
			select {
			case due <- next:
				n.Add(1)
			case <-done:
				return
			}
		}
		t.Reset(time.Until(next))
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func (l *loader) pick(rng *rand.Rand) op {
	if len(l.ops) == 1 {
		return l.ops[0]
	}
	n := rng.IntN(l.total)
	for _, p := range l.ops {
		if n < p.weight {
			return p
		}
		n -= p.weight
	}
	return l.ops[len(l.ops)-1]
}

// send makes one request and reports whether it got a response.
func (l *loader) send(p op) bool {
	var req *http.Request
	var err error
	switch p.name {
	case "get":
		req, err = http.NewRequest(http.MethodGet, l.o.url+"/v1/providers/"+l.o.provider, nil)
	case "list":
		req, err = http.NewRequest(http.MethodGet, l.o.url+"/v1/providers", nil)
	case "create":
		name := fmt.Sprintf("load-%d-%d", os.Getpid(), l.seq.Add(1))
		body := `{"name":"` + name + `","driver":"local","region":"here","config":{"subnet":"10.213.0.0/24"}}`
		req, err = http.NewRequest(http.MethodPost, l.o.url+"/v1/providers", strings.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		l.fail(0, err.Error())
		return false
	}
	req.Header.Set("Authorization", "Bearer "+l.o.token)
	resp, err := l.client.Do(req)
	if err != nil {
		l.fail(0, err.Error())
		return false
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.mu.Lock()
	l.statuses[resp.StatusCode]++
	l.mu.Unlock()
	switch {
	case err != nil:
		l.fail(0, "read body: "+err.Error())
	case resp.StatusCode != p.want:
		l.fail(resp.StatusCode, fmt.Sprintf("%s: status %d: %.200s", p.name, resp.StatusCode, bytes.TrimSpace(body)))
	}
	return true
}

func (l *loader) fail(status int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs++
	if status == 0 {
		l.statuses[0]++ // transport errors
	}
	if len(l.samples) < 5 && !slices.Contains(l.samples, msg) {
		l.samples = append(l.samples, msg)
	}
}

// pct returns the q-th percentile of sorted latencies (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q/100+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Microsecond)
}

// cpuTime is the user and system CPU time this process has used (0 where
// the platform does not say).
func cpuTime() time.Duration {
	d, _ := cputime.Process()
	return d
}
