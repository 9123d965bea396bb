package localcloud

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
)

// BenchmarkCreate5 creates 5 VMs, waits until each is SSH-ready (a
// connection with the key and `true` run), and destroys them. It reports
// per VM the seconds from the start of Create to SSH-ready (mean and
// slowest), the Create call and Destroy of all 5, and the memory the idle
// VM uses (its cgroup's usage, page cache included).
//
//	go test -run '^$' -bench Create5 -benchtime 5x ./internal/localcloud/
func BenchmarkCreate5(b *testing.B) {
	const n = 5
	e := newEnv(b, nil)
	e.d = New(Options{Logger: slog.New(slog.DiscardHandler)}) // no per-VM log lines in the output
	ctx := context.Background()
	var ready, createCall, destroy []float64
	var memMB []float64
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		vms, err := e.d.Create(ctx, driversdk.CreateRequest{Provider: e.prov, Count: n, AuthorizedKeys: []string{e.key.authorized},
			Profile: []byte(`{"cpus": 1, "memory_mb": 512}`)})
		if err != nil {
			b.Fatal(err)
		}
		createCall = append(createCall, time.Since(start).Seconds())
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, vm := range vms {
			wg.Go(func() {
				c, err := dial(b, vm, "root", e.key)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				res, err := c.Exec(ctx, sshx.Command{Argv: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					b.Errorf("true on %s: %v, exit %d", vm.ID, err, res.ExitCode)
					return
				}
				took := time.Since(start).Seconds()
				mu.Lock()
				ready = append(ready, took)
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, vm := range vms {
			if rec, err := (store{dir: e.dir}).loadVM(vm.ID); err == nil {
				if used, err := memoryUsage(rec.Cgroups); err == nil {
					memMB = append(memMB, float64(used)/(1<<20))
				}
			}
		}
		start = time.Now()
		if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: vmIDs(vms)}); err != nil {
			b.Fatal(err)
		}
		destroy = append(destroy, time.Since(start).Seconds())
	}
	b.ReportMetric(mean(ready), "s/vm-ready")
	b.ReportMetric(slices.Max(ready), "s-max/vm-ready")
	b.ReportMetric(mean(createCall), "s/create-5")
	b.ReportMetric(mean(destroy), "s/destroy-5")
	if len(memMB) > 0 {
		b.ReportMetric(mean(memMB), "MB/idle-vm")
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// memoryUsage reads a VM's memory use from its cgroups.
func memoryUsage(paths []string) (int64, error) {
	for _, p := range paths {
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			if v, err := readInt(filepath.Join(p, f)); err == nil {
				return v, nil
			}
		}
	}
	return 0, errors.New("no memory usage file")
}
