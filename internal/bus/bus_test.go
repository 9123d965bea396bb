package bus_test

import (
	"log/slog"
	"os"

	"github.com/soulstack/soulstack/internal/base"

	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/transport"
)

// TestMain also checks that every goroutine the tests and benchmarks
// started (servers, connections, Execs, presence watchers) has ended with
// them: what outlives a test here would outlive a keeper's shutdown.
func TestMain(m *testing.M) {
	bustest.RunAgentIfAsked()
	goleak.VerifyTestMain(m)
}

// testHeartbeat keeps presence tests quick; the keeper's default is 5s.
const testHeartbeat = 200 * time.Millisecond

// env is an embedded bus with a registry of soul serials.
type env struct {
	ca  *bustest.CA
	reg *bustest.Registry
	bus *bus.Server
}

func startBus(t *testing.T, mod ...func(*bus.Config)) *env {
	t.Helper()
	e := &env{ca: bustest.NewCA(t), reg: bustest.NewRegistry()}
	cfg := bus.Config{Base: base.Base{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, Listen: "127.0.0.1:0", CA: e.ca.CA, ServerCert: e.ca.ServerCert, Identities: e.reg, Heartbeat: testHeartbeat}
	for _, f := range mod {
		f(&cfg)
	}
	b, err := bus.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e.bus = b
	return e
}

// soul registers and issues an identity for sid.
func (e *env) soul(t *testing.T, sid string) bustest.Identity {
	id := bustest.Issue(t, e.ca.CA, sid, time.Hour, time.Now())
	e.reg.Set(sid, id.Serial)
	return id
}

func (e *env) agents(t *testing.T, ids ...bustest.Identity) *bustest.Agents {
	return bustest.StartAgents(t, bustest.AgentSpec{URLs: e.bus.AgentURLs(), Identities: ids, Heartbeat: testHeartbeat})
}

func (e *env) waitPresent(t *testing.T, sid string, want bool) {
	t.Helper()
	bustest.WaitFor(t, 15*time.Second, "presence of "+sid, func() bool { return e.bus.Present(sid) == want })
}

func TestAgentRunsCommand(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	id := e.soul(t, "web-1.example.com")
	e.agents(t, id)
	e.waitPresent(t, id.SID, true)
	c, ok := e.bus.Agent(id.SID)
	if !ok {
		t.Fatal("no agent")
	}
	res, err := c.Exec(t.Context(), transport.Command{Argv: []string{"sh", "-c", "echo hello; echo oops >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n" || string(res.Stderr) != "oops\n" || res.ExitCode != 3 {
		t.Errorf("got %q %q %d", res.Stdout, res.Stderr, res.ExitCode)
	}
}

func TestPresenceFollowsHeartbeats(t *testing.T) {
	t.Parallel()
	var events []string
	ch := make(chan string, 10)
	e := startBus(t, func(c *bus.Config) {
		c.OnPresence = func(sid string, present bool) {
			if present {
				ch <- "present " + sid
			} else {
				ch <- "gone " + sid
			}
		}
	})
	id := e.soul(t, "db.example.com")
	a := e.agents(t, id)
	events = append(events, <-ch)
	a.Kill()
	events = append(events, <-ch)
	if _, ok := e.bus.Agent(id.SID); ok {
		t.Error("a killed agent is still offered as a transport")
	}
	e.agents(t, id)
	events = append(events, <-ch)
	want := []string{"present db.example.com", "gone db.example.com", "present db.example.com"}
	if len(events) != 3 || events[0] != want[0] || events[1] != want[1] || events[2] != want[2] {
		t.Errorf("events %q, want %q", events, want)
	}
}
