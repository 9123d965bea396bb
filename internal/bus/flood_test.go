package bus_test

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/bus/bustest"
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
		{"parts", 400, 16, "reply parts|dropped"},        // tiny parts, more than any agent sends (faster than the keeper takes them, too)
		{"big part", 1, 4 << 20, "reply part"},           // one part bigger than any agent sends
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
			if !errors.Is(r.err, transport.ErrOutputLimit) || transport.Code(r.err) != "transport.output_limit" || !regexp.MustCompile(tc.want).MatchString(r.err.Error()) {
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

// TestSoulHeartbeatFloodIsCutOff: a soul that sends heartbeats as fast as
// it can is cut off (its connection closed, its reconnection refused for
// bus.FloodPause) while a soul that keeps to its interval stays present.
func TestSoulHeartbeatFloodIsCutOff(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	honest := e.soul(t, "honest.prod.example.com")
	e.agents(t, honest)
	e.waitPresent(t, honest.SID, true)
	mallory := e.soul(t, "chatty.prod.example.com")
	a := connectAs(t, e, mallory)
	hb, _ := json.Marshal(wire.Heartbeat{SID: mallory.SID})
	for range 5 * bus.MaxHeartbeats {
		if err := a.nc.Publish(wire.HeartbeatSubject(mallory.SID), hb); err != nil {
			break // the keeper already closed the connection
		}
	}
	a.nc.Flush()
	select {
	case <-a.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the flooding soul's connection is still open")
	}
	e.waitPresent(t, mallory.SID, false)
	if _, err := dial(e, mustTLS(t, mallory)); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("the flooding soul reconnected at once: %v", err)
	}
	if !e.bus.Present(honest.SID) {
		t.Fatal("the honest soul was counted gone")
	}
	// One heartbeat far bigger than an agent's is enough.
	bloat := e.soul(t, "bloated.prod.example.com")
	b := connectAs(t, e, bloat)
	if err := b.nc.Publish(wire.HeartbeatSubject(bloat.SID), make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	b.nc.Flush()
	select {
	case <-b.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a soul that sent a 64 KiB heartbeat is still connected")
	}
	if e.bus.Present(bloat.SID) {
		t.Fatal("a soul whose heartbeat was refused is present")
	}
}

func mustTLS(t *testing.T, id bustest.Identity) *tls.Config {
	t.Helper()
	tc, err := id.TLS()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
