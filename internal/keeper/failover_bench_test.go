package keeper_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/testdb"
)

// rootSpool is where the supervisor of a root login spools durable
// commands; the test hosts log in as root.
const rootSpool = "/var/lib/soulstack/spool"

// BenchmarkFailover: three keeper processes on one PostgreSQL. Each
// iteration submits a run whose step runs `sleep 8` on a real sshd host,
// waits until the command runs, kills (-9) the keeper that owns the run,
// and measures the time from the kill to the resumed command reaching the
// soul: the supervisor of the reattaching command writes the run's
// epoch-2 mark in the soul's spool (its mtime is the moment). The killed
// keeper is restarted before the next iteration.
//
// Metrics: failover-p50-s, failover-p99-s, failover-max-s over the
// iterations.
//
//	SOULSTACK_TEST_POSTGRES=… go test ./internal/keeper -run '^$' -bench BenchmarkFailover -benchtime 20x -timeout 20m
func BenchmarkFailover(b *testing.B) {
	if os.Getenv(testdb.EnvPostgres) == "" {
		b.Skip("needs SOULSTACK_TEST_POSTGRES: a fleet shares one PostgreSQL")
	}
	f := newFleet(b, 3, "")
	srv := sshtest.Start(b, sshtest.Options{})
	addSoul(b, f.client(0), "fo.local.test", srv)
	sc := "steps:\n  - name: long\n    on: fo.local.test\n    module: core.command.ran\n    params: {cmd: 'touch ${ input.mark }; sleep 8'}\n"
	var took []time.Duration
	dir := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		mark := filepath.Join(dir, fmt.Sprint("started-", i))
		run, _, err := f.client(i%3).RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"mark": mark}})
		if err != nil {
			b.Fatal(err)
		}
		waitPath(b, mark, 60*time.Second)
		owner, _ := f.owner(run.ID)
		if owner < 0 {
			b.Fatalf("run %s has no owner while its command runs", run.ID)
		}
		killed := time.Now()
		f.kill9(owner)
		epoch2 := filepath.Join(rootSpool, "runs", run.ID+".e2")
		fi := waitPath(b, epoch2, 60*time.Second)
		took = append(took, fi.ModTime().Sub(killed))
		f.start(owner)
	}
	b.StopTimer()
	slices.Sort(took)
	q := func(p float64) float64 { return took[min(len(took)-1, int(p*float64(len(took))))].Seconds() }
	b.ReportMetric(q(0.5), "failover-p50-s")
	b.ReportMetric(q(0.99), "failover-p99-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "failover-max-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDatabaseWritesInFlight: one keeper on PostgreSQL with N runs in
// flight, each with a command that sleeps on a soul reached through its
// agent (runs.workers: 600). Once all N commands run, the database's
// writes are sampled for 30 s (after 15 s of settling): rows inserted, updated or deleted per
// second in the keeper's tables and the queue's (pg_stat_user_tables) and
// WAL bytes per second. With one heartbeat row per keeper the rate does
// not grow with N.
//
//	SOULSTACK_TEST_POSTGRES=… go test ./internal/keeper -run '^$' -bench BenchmarkDatabaseWritesInFlight -benchtime 1x -timeout 20m
func BenchmarkDatabaseWritesInFlight(b *testing.B) {
	if os.Getenv(testdb.EnvPostgres) == "" {
		b.Skip("needs SOULSTACK_TEST_POSTGRES")
	}
	for _, n := range []int{10, 500} {
		b.Run(fmt.Sprint(n, "-runs"), func(b *testing.B) {
			for range b.N {
				rows, wal := writesInFlight(b, n)
				b.ReportMetric(rows, "rows-written/s")
				b.ReportMetric(wal, "wal-bytes/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

func writesInFlight(b *testing.B, n int) (rowsPerSec, walPerSec float64) {
	port := freePort(b)
	f := newFleet(b, 1, fmt.Sprintf("runs: {workers: 600}\nnats:\n  listen: 127.0.0.1:%d\n  heartbeat: 5s\n", port))
	c := f.client(0)
	const sid = "writes.local.test"
	agentSoul(b, c, config.Config{DataDir: filepath.Join(f.dirs[0], "data"), DatabaseURL: f.url}, sid, port, 5*time.Second)
	marks := b.TempDir()
	sc := "steps:\n  - name: wait\n    on: " + sid + "\n    module: core.command.ran\n    params: {cmd: 'touch " + marks + "/${ input.i }; sleep 120'}\n"
	for i := range n {
		if _, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"i": fmt.Sprint(i)}}); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		entries, _ := os.ReadDir(marks)
		if len(entries) == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d commands running after 5 minutes", len(entries), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The submissions' and claims' own writes settle, and the statistics
	// of idle backends reach pg_stat_user_tables (PostgreSQL flushes them
	// within about 10 s): in a steady state the lag is the same at both
	// ends of the window.
	time.Sleep(15 * time.Second)
	sample := func() (int64, int64) {
		var rows, lsn int64
		if err := f.db.QueryRow(`SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables`).Scan(&rows); err != nil {
			b.Fatal(err)
		}
		if err := f.db.QueryRow(`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return rows, lsn
	}
	// Statistics reach pg_stat_user_tables within a second of a
	// transaction's end (and at once from this session).
	_, _ = f.db.Exec(`SELECT pg_stat_clear_snapshot()`)
	r0, l0 := sample()
	const window = 30 * time.Second
	time.Sleep(window)
	_, _ = f.db.Exec(`SELECT pg_stat_clear_snapshot()`)
	r1, l1 := sample()
	if os.Getenv("SOULSTACK_BENCH_TABLES") != "" {
		rows, err := f.db.Query(`SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname`)
		if err == nil {
			for rows.Next() {
				var name string
				var i, u, d int64
				_ = rows.Scan(&name, &i, &u, &d)
				b.Logf("%s ins %d upd %d del %d", name, i, u, d)
			}
			rows.Close()
		}
	}
	var running int
	if err := f.db.QueryRow(`SELECT count(*) FROM runs WHERE phase = 'Running'`).Scan(&running); err != nil {
		b.Fatal(err)
	}
	if running != n {
		b.Fatalf("%d runs Running during the sample, want %d", running, n)
	}
	return float64(r1-r0) / window.Seconds(), float64(l1-l0) / window.Seconds()
}

// agentSoul registers soul sid with an SSH port nothing answers on, issues
// its identity from the keeper's CA (cfg's data dir) as a join would, and
// runs its agent (a process, with a spool) on the keeper's bus at
// 127.0.0.1:port until the soul is active. It returns the agent process
// and its spec, to start it again with the same identity and spool.
func agentSoul(tb testing.TB, c *client.Client, cfg config.Config, sid string, port int, heartbeat time.Duration) (*bustest.Agents, bustest.AgentSpec) {
	tb.Helper()
	if _, err := c.SoulCreate(context.Background(), client.SoulCreate{SID: sid, Address: "127.0.0.1", Connection: client.Connection{Port: closedPort(tb)}}); err != nil {
		tb.Fatal(err)
	}
	ca, err := pki.LoadOrCreateCA(cfg.TLSDir(), time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	id := bustest.Issue(tb, ca, sid, time.Hour, time.Now())
	recordSerial(tb, cfg, sid, id.Serial)
	spec := bustest.AgentSpec{URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", port)}, Identities: []bustest.Identity{id},
		Heartbeat: heartbeat, Jitter: -1, Spool: tb.TempDir()}
	agent := bustest.StartAgents(tb, spec)
	waitSoul(tb, c, sid, func(s client.Soul) bool { return s.Status == "active" })
	return agent, spec
}

// waitPath waits until path exists and returns its info.
func waitPath(tb testing.TB, path string, within time.Duration) os.FileInfo {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		if fi, err := os.Stat(path); err == nil {
			return fi
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not appear within %s", path, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
