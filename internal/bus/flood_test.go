package bus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/transport"
)

// TestSoulReplyFloodIsBounded: a soul that plays its own agent by hand,
// under its own certificate, and answers a command with far more output
// than the keeper asked for (the agent would have cut it), or with more
// reply parts than an agent sends, gets the command cancelled on its side
// and failed on the keeper's with transport.output_limit; the keeper keeps
// the output only up to its limit, marked truncated.
func TestSoulReplyFloodIsBounded(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	e := startBus(t, func(c *bus.Config) { c.MaxOutput = limit })
	mallory := e.soul(t, "flood.prod.example.com")
	a := connectAs(t, e, mallory)
	execs := make(chan *nats.Msg, 4)
	cancels := make(chan *nats.Msg, 4)
	if _, err := a.nc.ChanSubscribe(wire.ExecSubject(mallory.SID), execs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.nc.ChanSubscribe(wire.CancelSubject(mallory.SID), cancels); err != nil {
		t.Fatal(err)
	}
	a.nc.Flush()
	hb, _ := json.Marshal(wire.Heartbeat{SID: mallory.SID})
	a.nc.Publish(wire.HeartbeatSubject(mallory.SID), hb)
	e.waitPresent(t, mallory.SID, true)
	conn, _ := e.bus.Agent(mallory.SID)

	for _, tc := range []struct {
		name  string
		parts int
		size  int
		want  string
	}{
		{"bytes", 40, wire.ChunkSize, "bytes of stdout"}, // 20 MiB against a 1 MiB limit
		{"parts", 400, 16, "reply parts"},                // tiny parts, more than any agent sends
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				res transport.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := conn.Exec(t.Context(), transport.Command{Argv: []string{"cat", "/dev/zero"}})
				done <- result{res, err}
			}()
			var req wire.ExecRequest
			select {
			case m := <-execs:
				if err := json.Unmarshal(m.Data, &req); err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the command never reached the soul")
			}
			if req.MaxOutput != limit {
				t.Fatalf("the request asked for max_output %d, want %d", req.MaxOutput, limit)
			}
			part := strings.Repeat("x", tc.size)
			for range tc.parts {
				m := nats.NewMsg(wire.ReplySubject(mallory.SID, req.ID))
				m.Header.Set(wire.PartHeader, wire.PartStdout)
				m.Data = []byte(part)
				if err := a.nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			a.nc.Flush()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the flooded command did not end")
			}
			if !errors.Is(r.err, transport.ErrOutputLimit) || transport.Code(r.err) != "transport.output_limit" || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("flooded command: %v (code %q), want transport.output_limit about %s", r.err, transport.Code(r.err), tc.want)
			}
			if len(r.res.Stdout) > limit+wire.MarkerSlack {
				t.Fatalf("the keeper kept %d bytes of stdout, over its %d-byte limit", len(r.res.Stdout), limit+wire.MarkerSlack)
			}
			if tc.name == "bytes" && (!r.res.StdoutTruncated || len(r.res.Stdout) != limit+wire.MarkerSlack) {
				t.Fatalf("kept %d bytes, truncated %v; want the limit, marked truncated", len(r.res.Stdout), r.res.StdoutTruncated)
			}
			select {
			case m := <-cancels:
				var c wire.CancelRequest
				if err := json.Unmarshal(m.Data, &c); err != nil || c.ID != req.ID {
					t.Fatalf("cancel %s, %v; want one for command %s", m.Data, err, req.ID)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the keeper did not cancel the flooded command on the soul")
			}
		})
	}
}
