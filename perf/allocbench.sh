#!/usr/bin/env bash
# allocbench.sh - owns the allocator measurement: runs rc-allocbench (see
# the top of perf/allocbench.c) linked against glibc malloc and against
# jemalloc, the latter with jemalloc's defaults (MALLOC_CONF overriding
# src/common/alloc.c) and as ringcached configures it, alternating within
# each run so all three see the same machine; prints every sample, then the
# medians over the runs and their ratios to glibc and to default jemalloc.
# No S3, no daemon: CPU only.
#
# usage: perf/allocbench.sh
#   BUILD=build     the meson build folder (-Dallocator=jemalloc, the default)
#   RUNS=5          runs of each (mode, allocator)
#   SECONDS_EACH=2  seconds of each sample
#   THREADS=2       threads of each sample
#   MODES="req put list"
# e.g.:  ninja -C build && perf/allocbench.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT/${BUILD:-build}" && pwd)
RUNS=${RUNS:-5}
SECONDS_EACH=${SECONDS_EACH:-2}
THREADS=${THREADS:-2}
MODES=${MODES:-"req put list"}
JE=$BUILD/perf/rc-allocbench
LIBC=$BUILD/perf/rc-allocbench-libc
# jemalloc 5.3's own values of what alloc.c sets.
JE_DEFAULTS=tcache_max:32768

for b in "$JE" "$LIBC"; do
	[ -x "$b" ] || { echo "allocbench.sh: $b not built (ninja -C $BUILD)" >&2; exit 1; }
done
ldd "$JE" | grep -q jemalloc ||
	{ echo "allocbench.sh: $JE does not link jemalloc (-Dallocator=libc?)" >&2; exit 1; }

samples=$(mktemp /tmp/rc-allocbench.XXXXXX)
trap 'rm -f "$samples"' EXIT

# One sample: "MODE ALLOCATOR OPS_PER_CPU_S OPS_PER_S".
sample() {
	local mode=$1 name=$2 out
	shift 2
	out=$("$@" "$mode" --threads "$THREADS" --seconds "$SECONDS_EACH")
	echo "$mode $name $(echo "$out" | awk '{print $3, $4}')"
}

echo "== $RUNS runs x {glibc, jemalloc defaults, jemalloc configured} x {$MODES}," \
	"$THREADS threads, ${SECONDS_EACH}s each ($(nproc) CPUs)"
for run in $(seq "$RUNS"); do
	for mode in $MODES; do
		sample "$mode" glibc "$LIBC"
		sample "$mode" jemalloc-defaults env MALLOC_CONF=$JE_DEFAULTS "$JE"
		sample "$mode" jemalloc "$JE"
	done | tee -a "$samples" | sed "s/^/run $run: /"
done

echo
echo "ops per CPU-second (process CPU time, every thread), medians of $RUNS runs:"
printf '%-6s %12s %18s %12s %12s %14s\n' mode glibc jemalloc-defaults jemalloc \
	"je/glibc" "je/je-defaults"
for mode in $MODES; do
	med() {
		awk -v m="$mode" -v a="$1" '$1 == m && $2 == a {print $3}' "$samples" |
			sort -n | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
	}
	g=$(med glibc) d=$(med jemalloc-defaults) j=$(med jemalloc)
	awk -v m="$mode" -v g="$g" -v d="$d" -v j="$j" 'BEGIN {
		printf "%-6s %12.0f %18.0f %12.0f %12.3f %14.3f\n", m, g, d, j, j / g, j / d }'
done
