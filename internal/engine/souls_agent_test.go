package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// agents offers a Conn for the SIDs it holds (transport.Agents).
type agents map[string]*recordingConn

func (a agents) Agent(sid string) (transport.Conn, bool) {
	c, ok := a[sid]
	return c, ok
}

type recordingConn struct{ cmds []transport.Command }

func (c *recordingConn) Exec(_ context.Context, cmd transport.Command) (transport.Result, error) {
	c.cmds = append(c.cmds, cmd)
	return transport.Result{Stdout: []byte("via agent\n")}, nil
}

// TestSoulsChooseTheAgent: a soul whose agent is connected is reached
// through it, with the command as the module gave it (sudo included);
// another soul, whose SSH address refuses connections, goes over SSH and
// is unreachable with the SSH transport's code.
func TestSoulsChooseTheAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	for _, sid := range []string{"with-agent.local.test", "ssh-only.local.test"} {
		if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: sid, Address: "127.0.0.1", Status: store.SoulActive, Connection: store.Connection{User: "root", Port: 1}}, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	conn := &recordingConn{}
	pool := ssh.NewPool(ssh.Options{})
	defer pool.Close()
	dial := func(keys transport.HostKeys) transport.Dialer {
		return transport.AgentFirst(agents{"with-agent.local.test": conn}, pool.Dialer(keys), clockwork.NewRealClock())
	}
	s := engine.NewSouls(engine.SoulsConfig{Store: st, KeeperKey: key, Dial: dial})
	tg, err := s.Target(ctx, "with-agent.local.test", transport.RetryPolicy{Attempts: 1}, true, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := tg.Exec(ctx, module.Command{Argv: []string{"id"}, Env: map[string]string{"A": "1"}, Stdin: []byte("in")})
	if err != nil || string(res.Stdout) != "via agent\n" {
		t.Fatalf("exec through the agent: %q, %v", res.Stdout, err)
	}
	if len(conn.cmds) != 1 || conn.cmds[0].Argv[0] != "id" || conn.cmds[0].Env["A"] != "1" || string(conn.cmds[0].Stdin) != "in" || !conn.cmds[0].Sudo {
		t.Errorf("the agent got %+v", conn.cmds)
	}
	_, err = s.Target(ctx, "ssh-only.local.test", transport.RetryPolicy{Attempts: 1}, false, "")
	if !errors.Is(err, transport.ErrUnreachable) || transport.Code(err) != "ssh.unreachable" {
		t.Fatalf("a soul without an agent: %v (code %q), want ssh.unreachable", err, transport.Code(err))
	}
}
