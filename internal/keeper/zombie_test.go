//go:build chaos

package keeper_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/testdb"
)

// pgProxy forwards TCP connections to a PostgreSQL server; Partition holds
// every byte in both directions (and new connections) until Heal, as a
// network partition between one keeper and its database would: the
// keeper's queries hang, nothing is refused.
type pgProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	cut    bool
}

func startPGProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { p.Heal(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *pgProxy) gate() {
	p.mu.Lock()
	for p.cut {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *pgProxy) serve(c net.Conn) {
	defer c.Close()
	p.gate()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
}

// Partition holds all traffic; Heal lets it through again.
func (p *pgProxy) Partition() { p.mu.Lock(); p.cut = true; p.mu.Unlock() }
func (p *pgProxy) Heal()      { p.mu.Lock(); p.cut = false; p.cond.Broadcast(); p.mu.Unlock() }

// proxied returns dbURL with its host and port replaced by the proxy's.
func (p *pgProxy) proxied(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// TestChaosZombieKeeper: a keeper cut off from the database (a real
// partition: every byte between it and PostgreSQL held by a proxy) that
// does not know it has lost its run — its lease timing is longer than the
// other keeper's, as a misconfigured or frozen keeper's would be — while
// the other keeper takes the run over and reattaches its command (epoch
// 2). When the zombie's connection to the soul is cut and it reattaches
// with its own epoch (1), the soul refuses it (run.fenced), and the zombie
// audits command.fenced once the partition heals. The run succeeds on the
// other keeper; every command ran exactly once.
func TestChaosZombieKeeper(t *testing.T) {
	t.Parallel()
	start := time.Now()
	dbURL := os.Getenv(testdb.EnvPostgres)
	if dbURL != "" {
		dbURL = testdb.FreshPostgres(t)
	} else {
		dbURL = startPostgres(t).url
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startPGProxy(t, u.Host)
	f := newFleetOn(t, dbURL, 2, "")
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, f.client(0), "z.local.test", srv)
	// Keeper 0 becomes the zombie-to-be: through the proxy, with a lease
	// that outlasts keeper 1's (heartbeat 10s, give-up after 50s; keeper 1
	// takes a keeper's runs over 3s after its last heartbeat).
	f.procs[0].Interrupt(t)
	f.procs[1].Interrupt(t)
	raw, err := os.ReadFile(f.cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(raw), fmt.Sprintf("database_url: %q", dbURL), fmt.Sprintf("database_url: %q", proxy.proxied(t, dbURL)), 1) +
		"runs: {heartbeat: 10s, stale_after: 60s}\n"
	if err := os.WriteFile(f.cfgs[0], []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(0)
	dir := t.TempDir()
	ledgerPath, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	sc := `steps:
  - name: first
    on: z.local.test
    module: core.command.ran
    params: {cmd: "touch ` + started + `; sleep 8; echo first >> ` + ledgerPath + `"}
  - name: second
    on: z.local.test
    module: core.command.ran
    params: {cmd: "echo second >> ` + ledgerPath + `"}
`
	run, _, err := f.client(0).RunCreate(context.Background(), client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	waitPath(t, started, 30*time.Second)
	zombieConns, err := srv.ConnectionPIDs() // keeper 0's only: keeper 1 is not running
	if err != nil || len(zombieConns) == 0 {
		t.Fatalf("keeper 0's SSH connections = %v, %v", zombieConns, err)
	}
	proxy.Partition()
	f.start(1)
	// Keeper 1 takes the run over and reattaches the command: the soul
	// then holds epoch 2 of the run.
	waitPath(t, filepath.Join(rootSpool, "runs", run.ID+".e2"), 30*time.Second)
	for _, pid := range zombieConns {
		_ = syscall.Kill(pid, syscall.SIGKILL) // the sshd connection process of the server this test started
	}
	// The zombie redials and tries to reattach with epoch 1.
	var zlog strings.Builder
	for deadline := time.After(30 * time.Second); !strings.Contains(zlog.String(), "a soul refused this execution's command"); {
		select {
		case line := <-f.procs[0].Logs():
			zlog.WriteString(line + "\n")
		case <-deadline:
			t.Fatalf("the zombie did not try to reattach:\n%s", zlog.String())
		}
	}
	proxy.Heal()
	final := f.waitTerminal([]string{run.ID}, 1)[run.ID]
	if final == nil || final.Phase != "Succeeded" {
		t.Fatalf("run = %+v", final)
	}
	count := ledger(t, ledgerPath)
	if count["first"] != 1 || count["second"] != 1 || len(count) != 2 {
		t.Errorf("ledger = %v, want each command once", count)
	}
	if got := reattached(t, f.client(1), run.ID); len(got) != 1 || got[0].Epoch != 2 || got[0].Why != "resumed" {
		t.Errorf("command.reattached events = %+v, want one, by epoch 2", got)
	}
	fenced := 0
	deadline := time.Now().Add(30 * time.Second)
	for fenced == 0 && time.Now().Before(deadline) {
		fenced = auditCount(t, f.client(1), "command.fenced", run.ID)
		time.Sleep(200 * time.Millisecond)
	}
	if fenced == 0 {
		t.Errorf("the refused command of the zombie was not audited (command.fenced)")
	}
	report(t, chaosRow{Fault: "zombie keeper: database partitioned, lease outlasting the other keeper's", Runs: 1,
		Outcome: fmt.Sprintf("%s on the other keeper; the zombie's reattach (epoch 1) refused by the soul, %d command.fenced audited; each command ran once", final.Phase, fenced),
		Keeper:  "the zombie stopped at the fence", Duration: time.Since(start)})
}
