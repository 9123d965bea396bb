#!/bin/sh
# measure.sh runs apiload against a keeper and reports, beside apiload's own
# figures, where the machine's CPU went meanwhile: the keeper process (in
# cores, and in CPU time per request), apiload, processes named $MEASURE_COMM
# if set (e.g. MEASURE_COMM=postgres), and the rest of the machine's busy
# time (from /proc/stat): the kernel's loopback networking and anything else
# running. Linux only.
#
#	[MEASURE_COMM=postgres] bench/apiload/measure.sh KEEPER_PID APILOAD [apiload flags...]
set -eu
pid=$1
shift
comm=${MEASURE_COMM:-}
tck=$(getconf CLK_TCK)
out=$(mktemp)
trap 'rm -f "$out" "$out.n0" "$out.n1"' EXIT
proc() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# busy ticks of all CPUs: user nice system irq softirq steal
machine() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# "pid ticks" of every process called $comm
named() {
	[ -n "$comm" ] || return 0
	for f in /proc/[0-9]*/stat; do
		awk -v c="($comm)" '$2 == c {print $1, $14 + $15}' "$f" 2>/dev/null || true
	done
}
k0=$(proc)
m0=$(machine)
named >"$out.n0"
t0=$(date +%s.%N)
"$@" | tee "$out"
t1=$(date +%s.%N)
named >"$out.n1"
m1=$(machine)
k1=$(proc)
n=$(awk '/^requests/{print $2}' "$out")
c=$(awk '/^client cpu/{sub(/s$/, "", $3); print $3}' "$out")
# CPU of the named processes: end minus start, a process born meanwhile from 0
o=$(awk 'NR == FNR {t0[$1] = $2; next} {s += $2 - ($1 in t0 ? t0[$1] : 0)} END {print s + 0}' "$out.n0" "$out.n1")
echo "$k0 $k1 $m0 $m1 $t0 $t1 $tck $(nproc) ${n:-0} ${c:-0} $o" | awk -v comm="$comm" '{
	secs = $6 - $5
	keeper = ($2 - $1) / $7
	busy = ($4 - $3) / $7 / secs
	client = $10 / secs
	named = $11 / $7 / secs
	printf "keeper cpu  %.2f cores", keeper / secs
	if ($9 > 0) printf ", %.1f µs per request", keeper / $9 * 1e6
	printf "\n"
	if (comm != "") printf "%-11s %.2f cores\n", comm, named
	printf "machine     %.2f of %d cores busy: keeper %.2f, apiload %.2f, %srest %.2f\n", busy, $8, keeper / secs, client, (comm != "" ? sprintf("%s %.2f, ", comm, named) : ""), busy - keeper / secs - client - named
}'
echo "load avg    $(cut -d' ' -f1-3 /proc/loadavg)"
