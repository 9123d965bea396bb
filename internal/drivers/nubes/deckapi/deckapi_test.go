package deckapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
)

const token = "nubes-token-canary-7f3a"

// api is a scripted deck-api: each handler answers one path; it records
// every request.
type api struct {
	mu       sync.Mutex
	seen     []string
	handlers map[string]http.HandlerFunc
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Method+" "+r.URL.Path)
	h := a.handlers[r.Method+" "+r.URL.Path]
	a.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		http.Error(w, `{"message":"bad token"}`, http.StatusUnauthorized)
		return
	}
	if h == nil {
		http.Error(w, `{"message":"no such thing"}`, http.StatusNotFound)
		return
	}
	h(w, r)
}

func (a *api) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func newClient(t *testing.T, a *api) (*deckapi.Client, *[]time.Duration) {
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	var slept []time.Duration
	return &deckapi.Client{
		BaseURL:     srv.URL + "/api/v1/index.cfm",
		Token:       func(context.Context) (string, error) { return token, nil },
		CallTimeout: 2 * time.Second, RetryBase: 100 * time.Millisecond, Attempts: 4,
		Sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil },
	}, &slept
}

func body(t *testing.T, r *http.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		t.Errorf("%s %s: body: %v", r.Method, r.URL.Path, err)
	}
	return m
}

// TestCreateFlow: an instance and its create operation are made (uids
// from Location and from the body), the operation's parameters read, set
// (a new one posted, an existing one put), validated and run.
func TestCreateFlow(t *testing.T) {
	const base = "/api/v1/index.cfm"
	a := &api{handlers: map[string]http.HandlerFunc{}}
	a.handlers["POST "+base+"/instances"] = func(w http.ResponseWriter, r *http.Request) {
		if m := body(t, r); m["serviceId"] != float64(deckapi.ServiceVM) || m["displayName"] != "web-1" {
			t.Errorf("create instance body %v", m)
		}
		w.Header().Set("Location", base+"/instances/inst-1")
		w.WriteHeader(http.StatusCreated)
	}
	a.handlers["POST "+base+"/instanceOperations"] = func(w http.ResponseWriter, r *http.Request) {
		if m := body(t, r); m["instanceUid"] != "inst-1" || m["operation"] != "create" {
			t.Errorf("create operation body %v", m)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"instanceOperationUid":"op-1"}`)
	}
	a.handlers["GET "+base+"/instanceOperations/op-1"] = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fields") != "cfsParams" {
			t.Errorf("operation read without fields=cfsParams: %s", r.URL.RawQuery)
		}
		_, _ = io.WriteString(w, `{"instanceOperation":{"instanceOperationUid":"op-1","operation":"create","isPending":true,
			"cfsParams":[{"svcOperationCfsParamId":409,"svcOperationCfsParam":"vmCpu","defaultValue":"1","dataType":"int"},
			{"instanceOperationCfsParamUid":"p-2","svcOperationCfsParamId":410,"svcOperationCfsParam":"vmRam","paramValue":"1","defaultValue":"1"}]}}`)
	}
	a.handlers["POST "+base+"/instanceOperationCfsParams"] = func(w http.ResponseWriter, r *http.Request) {
		if m := body(t, r); m["svcOperationCfsParamId"] != float64(409) || m["paramValue"] != "2" || m["instanceOperationUid"] != "op-1" {
			t.Errorf("param post body %v", m)
		}
		w.WriteHeader(http.StatusCreated)
	}
	a.handlers["PUT "+base+"/instanceOperationCfsParams/p-2"] = func(w http.ResponseWriter, r *http.Request) {
		if m := body(t, r); m["instanceOperationCfsParamUid"] != "p-2" || m["paramValue"] != "4" {
			t.Errorf("param put body %v", m)
		}
	}
	a.handlers["GET "+base+"/instanceOperations/op-1/validate-cfs"] = func(w http.ResponseWriter, r *http.Request) {}
	a.handlers["POST "+base+"/instanceOperations/op-1/run"] = func(w http.ResponseWriter, r *http.Request) {}
	c, _ := newClient(t, a)
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, deckapi.ServiceVM, "web-1", "soulstack request r-1")
	if err != nil || inst != "inst-1" {
		t.Fatalf("create instance = %q, %v", inst, err)
	}
	op, err := c.StartOperation(ctx, inst, deckapi.OpCreate)
	if err != nil || op != "op-1" {
		t.Fatalf("start operation = %q, %v", op, err)
	}
	o, err := c.Operation(ctx, op)
	if err != nil || len(o.Params) != 2 || o.Params[0].Name != "vmCpu" || o.Params[1].UID != "p-2" || !o.Pending || o.Finished != nil {
		t.Fatalf("operation = %+v, %v", o, err)
	}
	if err := c.SetParam(ctx, op, o.Params[0], "2"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetParam(ctx, op, o.Params[1], "4"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(ctx, op); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx, op); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(a.calls(), "\n"); got != strings.Join([]string{
		"POST " + base + "/instances", "POST " + base + "/instanceOperations", "GET " + base + "/instanceOperations/op-1",
		"POST " + base + "/instanceOperationCfsParams", "PUT " + base + "/instanceOperationCfsParams/p-2",
		"GET " + base + "/instanceOperations/op-1/validate-cfs", "POST " + base + "/instanceOperations/op-1/run"}, "\n") {
		t.Fatalf("calls:\n%s", got)
	}
}

// TestRetries: 5xx, 429 and 422 "Concurrent operations" are retried with
// doubling, jittered delays until the call succeeds or the attempts run
// out; another 4xx is not retried; 401 and 404 are told apart, and no
// error carries the token, even when the answer echoes it.
func TestRetries(t *testing.T) {
	const p = "/api/v1/index.cfm/instanceOperations/op-1/run"
	script := func(statuses ...int) (*api, *int) {
		n := 0
		a := &api{handlers: map[string]http.HandlerFunc{"POST " + p: func(w http.ResponseWriter, r *http.Request) {
			st := statuses[min(n, len(statuses)-1)]
			n++
			switch st {
			case http.StatusUnprocessableEntity:
				http.Error(w, `{"message":"Concurrent operations are not allowed"}`, st)
			case http.StatusBadRequest:
				http.Error(w, `{"message":"bad parameter; you sent Bearer `+token+`"}`, st)
			default:
				w.WriteHeader(st)
			}
		}}}
		return a, &n
	}
	for _, tc := range []struct {
		name     string
		statuses []int
		calls    int
		is       error
		wantErr  bool
	}{
		{"concurrent then ok", []int{422, 422, 200}, 3, nil, false},
		{"throttled and 502 then ok", []int{429, 502, 200}, 3, nil, false},
		{"always 503", []int{503}, 4, nil, true},
		{"400 is not retried", []int{400, 200}, 1, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, n := script(tc.statuses...)
			c, slept := newClient(t, a)
			err := c.Run(context.Background(), "op-1")
			if (err != nil) != tc.wantErr || *n != tc.calls {
				t.Fatalf("err %v after %d calls; want error %v after %d", err, *n, tc.wantErr, tc.calls)
			}
			if err != nil && strings.Contains(err.Error(), token) {
				t.Fatalf("the error carries the token: %v", err)
			}
			for i, d := range *slept {
				lo := 100 * time.Millisecond << i
				if d < lo || d > lo+lo/2 {
					t.Fatalf("retry %d waited %s, want %s to %s", i+1, d, lo, lo+lo/2)
				}
			}
		})
	}

	c, _ := newClient(t, &api{handlers: map[string]http.HandlerFunc{}})
	if _, err := c.Instance(context.Background(), "gone"); !errors.Is(err, deckapi.ErrNotFound) {
		t.Fatalf("a gone instance: %v, want ErrNotFound", err)
	}
	c.Token = func(context.Context) (string, error) { return "expired-" + token, nil }
	if _, err := c.Instances(context.Background(), 1, 100); !errors.Is(err, deckapi.ErrUnauthorized) || strings.Contains(err.Error(), token) {
		t.Fatalf("an expired token: %v, want ErrUnauthorized without the token", err)
	}
}

// TestBounds: an answer over MaxAnswer is refused, a call that does not
// answer ends at CallTimeout, and a redirect is not followed (it would
// carry the token elsewhere).
func TestBounds(t *testing.T) {
	const base = "/api/v1/index.cfm"
	other := 0
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other++ }))
	defer elsewhere.Close()
	hang := make(chan struct{})
	defer close(hang)
	a := &api{handlers: map[string]http.HandlerFunc{
		"GET " + base + "/instances": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"results":[{"instanceUid":"`+strings.Repeat("x", 2000)+`"}]}`)
		},
		"GET " + base + "/instances/slow": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		},
		"GET " + base + "/instances/moved": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusFound)
		},
	}}
	c, _ := newClient(t, a)
	c.MaxAnswer = 1024
	if _, err := c.Instances(context.Background(), 1, 100); !errors.Is(err, deckapi.ErrTooLarge) {
		t.Fatalf("an oversized answer: %v, want ErrTooLarge", err)
	}
	c.CallTimeout, c.Attempts = 200*time.Millisecond, 1
	start := time.Now()
	if _, err := c.Instance(context.Background(), "slow"); err == nil {
		t.Fatal("a call that never answered succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a call that never answered took %s", took)
	}
	if _, err := c.Instance(context.Background(), "moved"); err == nil || other != 0 {
		t.Fatalf("a redirect: %v, the other server called %d times", err, other)
	}
}

// TestPages: the list is read page by page; an empty page ends it.
func TestPages(t *testing.T) {
	const base = "/api/v1/index.cfm"
	a := &api{handlers: map[string]http.HandlerFunc{"GET " + base + "/instances": func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("size") != "2" {
			t.Errorf("size = %q", r.URL.Query().Get("size"))
		}
		switch r.URL.Query().Get("page") {
		case "1":
			_, _ = io.WriteString(w, `{"results":[{"instanceUid":"a","serviceId":28},{"instanceUid":"b","serviceId":26}]}`)
		case "2":
			_, _ = io.WriteString(w, `{"results":[{"instanceUid":"c","serviceId":28,"displayName":"web-3"}]}`)
		default:
			_, _ = io.WriteString(w, `{"results":[]}`)
		}
	}}}
	c, _ := newClient(t, a)
	var uids []string
	for page := 1; ; page++ {
		refs, err := c.Instances(context.Background(), page, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) == 0 {
			break
		}
		for _, r := range refs {
			uids = append(uids, r.UID)
		}
	}
	if strings.Join(uids, ",") != "a,b,c" {
		t.Fatalf("instances = %v", uids)
	}
}
