package keeper_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
)

// TestJoinRefusalFloodIsBounded: 40 loopback source addresses send
// refused joins as fast as they can, with no credentials. The audit log
// gets at most api.JoinAuditRows join.refused rows in the window plus one
// summary counting the rest (written at the latest when the keeper stops),
// each address is rate-limited after its burst, the keeper-wide budget
// answers 429 once spent, and a token is looked up before any request is
// parsed for signing: a malformed request with an unknown token is
// join.token_unknown, not join.invalid.
func TestJoinRefusalFloodIsBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	url := agentURL(t, k)
	pool, _ := keeperCA(t, data)
	c := adminClient(t, k, data)
	if _, err := c.SoulCreate(context.Background(), client.SoulCreate{SID: "target.flood.test", Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	const addrs, each = 40, 30
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for a := range addrs {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(10+a))}
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"},
			DialContext:     (&net.Dialer{LocalAddr: src}).DialContext,
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer hc.CloseIdleConnections()
			for i := range each {
				b, _ := json.Marshal(client.JoinRequest{SID: "target.flood.test", Token: fmt.Sprintf("sbt_guess%d_%d", a, i), CSR: "not a CSR"})
				resp, err := hc.Post(url+"/v1/join", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Error(err)
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var p client.Problem
				_ = json.Unmarshal(raw, &p)
				mu.Lock()
				statuses[fmt.Sprintf("%d %s", resp.StatusCode, p.Code)]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("answers: %v", statuses)
	if statuses["401 join.token_unknown"] == 0 || statuses["429 join.rate_limited"] == 0 {
		t.Fatalf("answers %v: want join.token_unknown (the token looked up before the CSR) and join.rate_limited", statuses)
	}
	for k := range statuses {
		if k != "401 join.token_unknown" && k != "429 join.rate_limited" {
			t.Fatalf("answer %q: the flood got another answer than the two expected", k)
		}
	}
	rows := refusedRows(t, c)
	if len(rows) > api.JoinAuditRows {
		t.Fatalf("%d join.refused rows for %d requests; want at most %d", len(rows), addrs*each, api.JoinAuditRows)
	}
	// The summary of the rest is written when the keeper stops.
	k.Interrupt(t)
	k = serve(t, dir)
	c = adminClient(t, k, data)
	rows = refusedRows(t, c)
	var summary map[string]any
	for _, r := range rows {
		if r.Object == "client/*" {
			summary = r.Payload
		}
	}
	if summary == nil || len(rows) > api.JoinAuditRows+1 {
		t.Fatalf("after the stop: %d rows, summary %v", len(rows), summary)
	}
	counted := int(summary["count"].(float64))
	// Every refusal that was looked up is accounted for; a rate-limited
	// address's answers are counted once per burst.
	if total := counted + len(rows) - 1; total < statuses["401 join.token_unknown"] {
		t.Errorf("rows and summary account for %d refusals; %d were looked up and refused", total, statuses["401 join.token_unknown"])
	}
	if clients, _ := summary["clients"].([]any); len(clients) == 0 || len(clients) > 20 {
		t.Errorf("summary clients: %v", summary["clients"])
	}
}

type refusedRow struct {
	Object  string
	Payload map[string]any
}

func refusedRows(t *testing.T, c *client.Client) []refusedRow {
	t.Helper()
	page, err := c.AuditList(context.Background(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	var out []refusedRow
	for _, e := range page.Items {
		if e.Action != "join.refused" {
			continue
		}
		var p map[string]any
		_ = json.Unmarshal(e.Payload, &p)
		out = append(out, refusedRow{Object: e.Object, Payload: p})
	}
	return out
}
