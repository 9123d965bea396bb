package keeper_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
)

// BenchmarkCheckFanout50 compares a check run with the idempotent apply
// of examples/fanout.yaml on 50 local sshd hosts through one keeper: after
// a warm-up apply (files made, host keys pinned), each iteration runs the
// apply and then the check with new keys. Both ask one deciding question
// per module per host, so the check must be no slower. ns/op is the
// check's submit-to-finished wall time; apply-s/op, check-s/op and
// check/apply report both and their ratio, keeper-cpu-check-s/op the
// process's CPU time during the check. Every check must say that nothing
// would change on the first two steps and that the third (a command
// without a guard) is unknown on every host.
//
// Sub-benchmarks shell, executor and executor-recheck: see BenchmarkRunFanout50.
func BenchmarkCheckFanout50(b *testing.B) {
	for _, mode := range fanoutModes {
		b.Run(mode, func(b *testing.B) { checkFanout50(b, mode) })
	}
}

func checkFanout50(b *testing.B, mode string) {
	_, c, req, _ := fanoutFixture(b, mode, fanoutHosts)
	req.Key = fmt.Sprintf("check-warm-%d", time.Now().UnixNano())
	if warm, _ := fanoutRun(b, c, req); checkFanout(warm, false, fanoutHosts) != nil {
		b.Fatalf("warm-up run: %v", checkFanout(warm, false, fanoutHosts))
	}
	var apply, check, cpu time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		n++
		req.Mode, req.Key = client.RunApply, fmt.Sprintf("apply-%d-%d", time.Now().UnixNano(), n)
		start := time.Now()
		run, _ := fanoutRun(b, c, req)
		apply += time.Since(start)
		if err := checkFanout(run, true, fanoutHosts); err != nil {
			b.Fatalf("apply %d: %v", n, err)
		}
		req.Mode, req.Key = client.RunCheck, fmt.Sprintf("check-%d-%d", time.Now().UnixNano(), n)
		b.StartTimer()
		cpu0 := cpuTime(b)
		start = time.Now()
		run, _ = fanoutRun(b, c, req)
		check += time.Since(start)
		cpu += cpuTime(b) - cpu0
		b.StopTimer()
		if run.Phase != client.PhaseSucceeded || run.Check == nil || run.Check.WouldChange != 0 ||
			run.Check.Unchanged != 2*fanoutHosts || run.Check.Unknown != fanoutHosts {
			b.Fatalf("check %d: %s %+v", n, run.Phase, run.Check)
		}
		b.StartTimer()
	}
	b.ReportMetric(apply.Seconds()/float64(n), "apply-s/op")
	b.ReportMetric(check.Seconds()/float64(n), "check-s/op")
	b.ReportMetric(check.Seconds()/apply.Seconds(), "check/apply")
	b.ReportMetric(cpu.Seconds()/float64(n), "keeper-cpu-check-s/op")
}
