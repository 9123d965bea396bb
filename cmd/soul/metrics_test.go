package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/agent"
)

// TestServeMetrics: soul run --metrics-listen serves the agent's metrics
// (commands counted from zero, the bus connection, the build) at
// /metrics, nothing else, in an exposition promtool finds nothing to say
// about; it stops with its context.
func TestServeMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := serveMetrics(ctx, "127.0.0.1:0", agent.NewMetrics(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`soulstack_agent_commands_total{kind="durable",result="ok"} 0`,
		`soulstack_agent_bus_connected 0`,
		`soulstack_agent_bus_reconnects_total 0`,
		`soulstack_agent_build_info{goversion="go`,
		`process_resident_memory_bytes `,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET /metrics = %d, no %q in:\n%s", code, want, body)
		}
	}
	if code, _ := get("/"); code != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", code)
	}
	tool := os.Getenv("SOULSTACK_TEST_PROMTOOL")
	if tool == "" {
		if tool, err = exec.LookPath("promtool"); err != nil {
			t.Fatal("no promtool: run scripts/test, which extracts it from Debian's prometheus package, or set SOULSTACK_TEST_PROMTOOL")
		}
	}
	check := exec.Command(tool, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	cancel()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr.String() + "/metrics")
		if err != nil {
			break
		}
		resp.Body.Close()
		if i > 200 {
			t.Fatal("the listener still answers 2 s after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
