package logctx

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestHandlerAddsTheRunOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil)))
	ctx := WithRun(context.Background(), "run_a")

	log.InfoContext(ctx, "from the context")
	log.Info("no context")
	log.With("run", "run_b").InfoContext(ctx, "the logger's own")
	log.InfoContext(ctx, "the record's own", "run", "run_c")
	log.WithGroup("g").InfoContext(ctx, "in a group", "k", "v")

	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if strings.Count(line, `"run"`) > 1 {
			t.Errorf("run logged twice: %s", line)
		}
		got = append(got, m)
	}
	want := []any{"run_a", nil, "run_b", "run_c", nil}
	for i, w := range want {
		if got[i]["run"] != w {
			t.Errorf("line %d (%v): run %v, want %v", i, got[i]["msg"], got[i]["run"], w)
		}
	}
	if g, _ := got[4]["g"].(map[string]any); g["run"] != "run_a" {
		t.Errorf("grouped line: %v, want the run inside the group", got[4])
	}
}

func TestWithRunEmpty(t *testing.T) {
	ctx := context.Background()
	if WithRun(ctx, "") != ctx || Run(ctx) != "" {
		t.Fatal("an empty run id changes nothing")
	}
}
