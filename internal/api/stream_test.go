package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// countingStore is the real store, counting the reads of whole runs.
type countingStore struct {
	store.Store
	runGets, runHeads atomic.Int64
}

func (c *countingStore) RunGet(ctx context.Context, id string) (store.Run, error) {
	c.runGets.Add(1)
	return c.Store.RunGet(ctx, id)
}

func (c *countingStore) RunHead(ctx context.Context, id string) (store.RunHead, error) {
	c.runHeads.Add(1)
	return c.Store.RunHead(ctx, id)
}

// hubOnly is the run service of a keeper whose runs are written by
// another keeper: it only wakes streams (the real runner.Hub).
type hubOnly struct{ hub *runner.Hub }

func (h hubOnly) Submit(context.Context, runner.SubmitParams) (store.Run, bool, error) {
	return store.Run{}, false, fmt.Errorf("this keeper does not execute runs")
}
func (h hubOnly) Hub() *runner.Hub { return h.hub }

// TestStreamReadsOnlyNewEvents: the event stream of a run that writes
// 1,200 events while it is watched (more than one 500-event read) delivers
// each event once, in order, then stream.end once the run has finished;
// and it never reads the whole run (scenario, sealed input and state) to
// learn the phase: RunGet is not called at all, RunHead once per tick.
func TestStreamReadsOnlyNewEvents(t *testing.T) {
	t.Parallel()
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := &countingStore{Store: b.Open(t)}
			hub := runner.NewHub()
			check := func(string, string, string, map[string]any) (runner.Checked, []client.ProblemError) {
				return runner.Checked{}, nil
			}
			srv := httptest.NewServer(api.New(withStore(st, api.Config{Version: "test", Runs: hubOnly{hub}, Check: check})))
			t.Cleanup(srv.Close)
			plain, tid, hash, err := auth.NewToken()
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := st.TokenBootstrap(ctx, store.TokenCreateParams{Token: store.APIToken{ID: tid, Name: "admin", Role: "admin", Hash: hash}, Actor: store.ActorKeeper}); err != nil {
				t.Fatal(err)
			}
			const id, owner, total = "run_stream", "keeper-a", 1200
			if _, _, err := st.RunCreate(ctx, store.RunCreateParams{Run: store.Run{ID: id, Name: "many", Digest: "d", Scenario: strings.Repeat("# a long scenario\n", 2000),
				InputSealed: "sealed:v1:x", InputMasked: json.RawMessage(`{}`), Timeout: time.Hour}, Actor: store.ActorKeeper}); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := st.RunClaim(ctx, id, owner, time.Now().Add(-time.Minute)); err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			// 100 events before the stream opens: the first read is a backlog.
			seq := int64(0)
			appendEvents := func(n int) {
				for range n {
					seq++
					data, _ := json.Marshal(map[string]any{"stream": "stdout", "line": fmt.Sprintf("line %d", seq)})
					if err := st.RunEventAppend(ctx, store.RunEvent{RunID: id, Seq: seq, At: time.Now().UTC(), Kind: "log", Step: "s", SID: "h1", Data: data}); err != nil {
						t.Error(err)
						return
					}
				}
				hub.Notify(id)
			}
			appendEvents(100)
			gets := st.runGets.Load()

			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/runs/"+id+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+plain)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			writer := make(chan struct{})
			go func() {
				defer close(writer)
				for seq < total {
					appendEvents(min(11, total-int(seq)))
				}
				if err := st.RunFinish(ctx, store.RunFinishParams{ID: id, Owner: owner, Phase: store.PhaseSucceeded}); err != nil {
					t.Error(err)
				}
				hub.Notify(id)
			}()

			var seqs []int64
			ended := false
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() && !ended {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					var n int64
					fmt.Sscan(strings.TrimPrefix(line, "id: "), &n)
					seqs = append(seqs, n)
				case line == "event: stream.end":
					ended = true
				}
			}
			<-writer
			if !ended {
				t.Fatalf("the stream did not end with stream.end (err %v) after %d events", sc.Err(), len(seqs))
			}
			if len(seqs) != total {
				t.Fatalf("got %d events, want %d", len(seqs), total)
			}
			for i, n := range seqs {
				if n != int64(i+1) {
					t.Fatalf("event %d has seq %d: every event once, in order", i, n)
				}
			}
			if n := st.runGets.Load() - gets; n != 0 {
				t.Fatalf("the stream read the whole run %d times; it must read only the phase", n)
			}
			if n := st.runHeads.Load(); n < 2 {
				t.Fatalf("RunHead called %d times: the stream did not poll the phase", n)
			}
		})
	}
}
