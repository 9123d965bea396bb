package bus_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/transport"
)

// attacker is a NATS connection the test makes with some identity, with
// the asynchronous errors the server sent it.
type attacker struct {
	nc     *nats.Conn
	mu     sync.Mutex
	errs   []string
	closed chan struct{}
}

// violations counts the permission violations the server reported.
func (a *attacker) violations() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.errs {
		if strings.Contains(e, "Permissions Violation") {
			n++
		}
	}
	return n
}

func (a *attacker) errors() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.errs, "\n")
}

func dial(e *env, tc *tls.Config) (*attacker, error) {
	a := &attacker{closed: make(chan struct{})}
	nc, err := nats.Connect(strings.Join(e.bus.AgentURLs(), ","), nats.Secure(tc), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			a.mu.Lock()
			a.errs = append(a.errs, err.Error())
			a.mu.Unlock()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(a.closed) }))
	if err != nil {
		return nil, err
	}
	a.nc = nc
	return a, nil
}

func connectAs(t *testing.T, e *env, id bustest.Identity) *attacker {
	t.Helper()
	tc, err := id.TLS()
	if err != nil {
		t.Fatal(err)
	}
	a, err := dial(e, tc)
	if err != nil {
		t.Fatalf("connect as %s: %v", id.SID, err)
	}
	t.Cleanup(a.nc.Close)
	return a
}

// requireViolations waits until the server has reported n permission
// violations to a.
func requireViolations(t *testing.T, a *attacker, n int) {
	t.Helper()
	bustest.WaitFor(t, 10*time.Second, "permission violations", func() bool {
		return a.violations() >= n
	})
}

// A soul cannot listen to another soul's commands: every subscription
// outside its own subjects is refused, and a command for the other soul
// reaches only that soul's agent.
func TestSoulCannotSubscribeToAnotherSoul(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	victim := e.soul(t, "db.prod.example.com")
	mallory := e.soul(t, "web.prod.example.com")
	e.agents(t, victim)
	e.waitPresent(t, victim.SID, true)
	a := connectAs(t, e, mallory)
	got := make(chan *nats.Msg, 10)
	subjects := []string{wire.ExecSubject(victim.SID), wire.CancelSubject(victim.SID), "soulstack.soul.*.exec", "soulstack.>", ">", wire.HeartbeatWildcard, "_INBOX.>", "$SYS.REQ.USER.AUTH"}
	for _, s := range subjects {
		if _, err := a.nc.ChanSubscribe(s, got); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	requireViolations(t, a, len(subjects))
	c, _ := e.bus.Agent(victim.SID)
	res, err := c.Exec(t.Context(), transport.Command{Argv: []string{"echo", "secret"}, Stdin: []byte("password")})
	if err != nil || string(res.Stdout) != "secret\n" {
		t.Fatalf("the victim's command: %q, %v", res.Stdout, err)
	}
	a.nc.Flush()
	select {
	case m := <-got:
		t.Fatalf("the other soul received %s: %q", m.Subject, m.Data)
	default:
	}
}

// A soul cannot act as another: heartbeats for another SID, commands to
// another soul, replies to inboxes it was not given and the callout
// subject are all refused, and the other soul does not become present.
func TestSoulCannotPublishAsAnotherSoul(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	victim := e.soul(t, "db.prod.example.com")
	mallory := e.soul(t, "web.prod.example.com")
	a := connectAs(t, e, mallory)
	hb, _ := json.Marshal(wire.Heartbeat{SID: victim.SID, IntervalMS: 200})
	req, _ := json.Marshal(wire.ExecRequest{ID: "x", Argv: []string{"true"}})
	end, _ := json.Marshal(wire.ExecEnd{ExitCode: 0})
	for _, p := range []struct {
		subject string
		data    []byte
	}{
		{wire.HeartbeatSubject(victim.SID), hb},
		{wire.ExecSubject(victim.SID), req},
		{wire.ExecSubject(mallory.SID), req},
		{wire.ReplySubject(victim.SID, "x"), end},
		{"$SYS.REQ.USER.AUTH", []byte("x")},
	} {
		if err := a.nc.Publish(p.subject, p.data); err != nil {
			t.Fatal(err)
		}
	}
	a.nc.Flush()
	requireViolations(t, a, 5)
	// Its own heartbeat is allowed: the connection is still usable.
	own, _ := json.Marshal(wire.Heartbeat{SID: mallory.SID, IntervalMS: 200})
	if err := a.nc.Publish(wire.HeartbeatSubject(mallory.SID), own); err != nil {
		t.Fatal(err)
	}
	e.waitPresent(t, mallory.SID, true)
	time.Sleep(3 * testHeartbeat) // more than a presence sweep
	if e.bus.Present(victim.SID) {
		t.Fatal("a forged heartbeat made another soul present")
	}
	if a.violations() != 5 {
		t.Errorf("errors: %s", a.errors())
	}
}

// A soul may reply only under its own token: output for another soul's
// command is refused, and the other soul's command gets its own agent's
// answer; a reply to its own command goes through.
func TestSoulCannotReplyForAnotherSoul(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	mallory := e.soul(t, "web.prod.example.com")
	victim := e.soul(t, "db.prod.example.com")
	a := connectAs(t, e, mallory)
	// mallory plays its own agent by hand...
	own := make(chan *nats.Msg, 1)
	if _, err := a.nc.ChanSubscribe(wire.ExecSubject(mallory.SID), own); err != nil {
		t.Fatal(err)
	}
	a.nc.Flush()
	// ...heartbeats included, for as long as the test lasts (one beat
	// alone lapses on a loaded machine before the keeper asks for it)...
	hb, _ := json.Marshal(wire.Heartbeat{SID: mallory.SID})
	a.nc.Publish(wire.HeartbeatSubject(mallory.SID), hb)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(testHeartbeat / 2)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				a.nc.Publish(wire.HeartbeatSubject(mallory.SID), hb)
			}
		}
	}()
	e.waitPresent(t, mallory.SID, true)
	// ...and the victim's agent, a real one, answers its own.
	e.agents(t, victim)
	e.waitPresent(t, victim.SID, true)
	vc, ok := e.bus.Agent(victim.SID)
	if !ok {
		t.Fatal("the victim's agent is not on the bus")
	}
	mc, ok := e.bus.Agent(mallory.SID)
	if !ok {
		t.Fatal("mallory is not on the bus")
	}
	done := make(chan error, 1)
	go func() {
		res, err := mc.Exec(t.Context(), transport.Command{Argv: []string{"true"}})
		if err == nil && res.ExitCode != 3 {
			err = fmt.Errorf("exit %d, want mallory's 3", res.ExitCode)
		}
		done <- err
	}()
	m := <-own
	var req wire.ExecRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		t.Fatal(err)
	}
	forge := func(subject string, exit int) *nats.Msg {
		fm := nats.NewMsg(subject)
		fm.Header.Set(wire.PartHeader, wire.PartEnd)
		fm.Data, _ = json.Marshal(wire.ExecEnd{ExitCode: exit})
		return fm
	}
	// The same command id under the victim's token, a wildcard-looking
	// subject and the request's own reply field: all refused.
	for _, subject := range []string{wire.ReplySubject(victim.SID, req.ID), wire.ReplyPrefix + wire.Token(victim.SID) + ".x", "_INBOX.x"} {
		a.nc.PublishMsg(forge(subject, 0))
	}
	a.nc.Flush()
	requireViolations(t, a, 3)
	res, err := vc.Exec(t.Context(), transport.Command{Script: "echo real; exit 4"})
	if err != nil || string(res.Stdout) != "real\n" || res.ExitCode != 4 {
		t.Fatalf("the victim's command: %q exit %d, %v", res.Stdout, res.ExitCode, err)
	}
	if err := a.nc.PublishMsg(forge(wire.ReplySubject(mallory.SID, req.ID), 3)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("mallory's own command: %v", err)
	}
}

// Only a certificate of the keeper's CA, valid now, naming a soul the
// registry holds with that very serial, gets a connection.
func TestIdentityRefusals(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	other := bustest.NewCA(t)
	now := time.Now()
	valid := e.soul(t, "ok.example.com")
	foreign := bustest.Issue(t, other.CA, "ok.example.com", time.Hour, now)
	foreign.CAPEM = valid.CAPEM // it trusts the keeper; the keeper must not trust it
	expired := bustest.Issue(t, e.ca.CA, "old.example.com", time.Hour, now.Add(-2*time.Hour))
	e.reg.Set(expired.SID, expired.Serial)
	unknown := bustest.Issue(t, e.ca.CA, "unknown.example.com", time.Hour, now)
	replaced := bustest.Issue(t, e.ca.CA, valid.SID, time.Hour, now) // not the registry's serial
	for _, tc := range []struct {
		name string
		id   bustest.Identity
	}{
		{"certificate of another CA", foreign},
		{"expired certificate", expired},
		{"soul not in the registry", unknown},
		{"certificate that is not the soul's current one", replaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc2, err := tc.id.TLS()
			if err != nil {
				t.Fatal(err)
			}
			if a, err := dial(e, tc2); err == nil {
				a.nc.Close()
				t.Fatal("connected")
			}
		})
	}
	t.Run("no certificate", func(t *testing.T) {
		tc, _ := valid.TLS()
		tc.GetClientCertificate = nil
		if a, err := dial(e, tc); err == nil {
			a.nc.Close()
			t.Fatal("connected")
		}
	})
	connectAs(t, e, valid) // the real one still gets in
	if e.bus.Refused() < 3 {
		t.Errorf("the callout refused %d, want the registry refusals counted", e.bus.Refused())
	}
}

// A soul whose registry entry goes (destroyed) or whose certificate is
// replaced is disconnected, and its old identity cannot reconnect; the
// replacement can.
func TestRevokedIdentityIsCutOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		revoke func(t *testing.T, e *env, id bustest.Identity) *bustest.Identity
	}{
		{"destroyed", func(_ *testing.T, e *env, id bustest.Identity) *bustest.Identity { e.reg.Set(id.SID, ""); return nil }},
		{"certificate replaced", func(t *testing.T, e *env, id bustest.Identity) *bustest.Identity {
			renewed := bustest.Issue(t, e.ca.CA, id.SID, time.Hour, time.Now())
			e.reg.Set(id.SID, renewed.Serial)
			return &renewed
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startBus(t)
			id := e.soul(t, "gone.example.com")
			a := connectAs(t, e, id)
			hb, _ := json.Marshal(wire.Heartbeat{SID: id.SID})
			a.nc.Publish(wire.HeartbeatSubject(id.SID), hb)
			e.waitPresent(t, id.SID, true)
			next := tc.revoke(t, e, id)
			select {
			case <-a.closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the revoked soul's connection is still open")
			}
			if e.bus.Present(id.SID) {
				t.Error("the revoked soul is still present")
			}
			tcfg, _ := id.TLS()
			if b, err := dial(e, tcfg); err == nil {
				b.nc.Close()
				t.Fatal("the revoked identity reconnected")
			}
			if next != nil {
				connectAs(t, e, *next)
			}
		})
	}
}
