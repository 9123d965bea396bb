#!/bin/sh
# measure.sh runs apiload against a keeper and reports, beside apiload's own
# figures, where the machine's CPU went meanwhile: the keeper process (in
# cores, and in CPU time per request), the whole machine (from /proc/stat)
# and the difference (apiload, the kernel's loopback networking, and
# anything else running). Linux only.
#
#	bench/apiload/measure.sh KEEPER_PID APILOAD [apiload flags...]
set -eu
pid=$1
shift
tck=$(getconf CLK_TCK)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
proc() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# busy ticks of all CPUs: user nice system irq softirq steal
machine() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
k0=$(proc)
m0=$(machine)
t0=$(date +%s.%N)
"$@" | tee "$out"
t1=$(date +%s.%N)
m1=$(machine)
k1=$(proc)
n=$(awk '/^requests/{print $2}' "$out")
echo "$k0 $k1 $m0 $m1 $t0 $t1 $tck $(nproc) ${n:-0}" | awk '{
	secs = $6 - $5
	keeper = ($2 - $1) / $7
	busy = ($4 - $3) / $7 / secs
	printf "keeper cpu  %.2f cores", keeper / secs
	if ($9 > 0) printf ", %.1f µs per request", keeper / $9 * 1e6
	printf "\nmachine     %.2f of %d cores busy (%.2f not the keeper)\n", busy, $8, busy - keeper / secs
}'
echo "load avg    $(cut -d' ' -f1-3 /proc/loadavg)"
