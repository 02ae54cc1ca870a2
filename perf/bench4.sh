#!/usr/bin/env bash
# bench4.sh - owns the set-up of issue 4's two benchmarks: starts a private
# Ceph RGW (perf/lib.sh; or the endpoint in RINGCACHE_TEST_S3_*), uploads the dataset of tools/dataset.h
# straight to it, puts build/rc-proxy (first-byte latency, bandwidth
# cap per connection) between ringcached and RGW, and runs
#   1. rc-stallbench: fraction of wall time a consumer with a fixed step
#      waits for data, no plan vs prefetch plan, 570 KB and large-object
#      workloads, two step times; a fresh daemon per run, so epoch 1 is
#      cold and epoch 2 warm (the cache holds the whole workload);
#   2. rc-hitbench: hit ratio over 3 shuffled epochs with 8 reader
#      processes (8 GPU queues), a cache about half the dataset, default
#      policy vs plans sent per epoch vs plans with the next epoch's order
#      appended early (ahead); a fresh daemon per run.
# Each figure is the median of RUNS runs. Stops everything it started
# (trap) and prints the tables last.
#
# usage: perf/bench4.sh [--quick]
#   --quick            fewer samples per stall run (well under 4 minutes)
#   BUILD=build        the meson build folder (relative to the repository)
#   RUNS=3             runs per configuration
#   LATENCY_MS=20 BW_CONN=90   the proxy's link (ms, 10^6 B/s per connection)
#   STEPS="20 5"       stall benchmark step times, ms
#   HIT_STEP_MS=20     the hit benchmark readers' step, ms
#   STALL_READ=copy    how the stall consumer reads: copy (READ_INTO its
#                      buffer) or zero-copy (READ leases, released posted)
#   KEEP_LOGS=1        keep the work folder (logs, raw RESULT lines)
#   PARTS="stall hit"  which benchmarks to run (e.g. PARTS=hit)
#   HIT_MODES="default plans ahead"   the hit benchmark's modes
#   DAEMON_EXTRA="prefetch_window_entries = 3"   more [daemon] config lines
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
BUILD=$(cd "$BUILD" && pwd)
RUNS=${RUNS:-3}
LATENCY_MS=${LATENCY_MS:-20}
BW_CONN=${BW_CONN:-90}
STEPS=${STEPS:-"20 5"}
HIT_STEP_MS=${HIT_STEP_MS:-20}
STALL_READ=${STALL_READ:-copy}
PARTS=${PARTS:-"stall hit"}
HIT_MODES=${HIT_MODES:-"default plans ahead"}
has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
QUICK=0
case "${1:-}" in
--quick) QUICK=1 ;;
"") ;;
*) echo "usage: perf/bench4.sh [--quick]" >&2; exit 2 ;;
esac
N_SMALL=300            # the dataset's scale: 300 x ~570 KB
SMALL_SAMPLES=0        # 0: all; --quick reads fewer per stall epoch
LARGE_SAMPLES=0
if [ "$QUICK" = 1 ]; then
	SMALL_SAMPLES=60
	LARGE_SAMPLES=30
fi
PREFIX=bench4/
STALL_MEMORY=512M      # holds both workloads: epoch 2 is warm
# The hit benchmark's cache: half the small objects' bytes.
HIT_MEMORY=$((N_SMALL * 570000 / 2))

WORK=$(mktemp -d /tmp/rc-bench4.XXXXXX)
BUILD_BIN=$BUILD
PROXY_PID=
# shellcheck source=perf/lib.sh
. "$ROOT/perf/lib.sh"

cleanup() {
	local rc=$?
	if [ -n "$PROXY_PID" ] && kill -0 "$PROXY_PID" 2>/dev/null; then
		kill -TERM "$PROXY_PID" 2>/dev/null || true
		wait "$PROXY_PID" 2>/dev/null || true
	fi
	lib_cleanup bench4 "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench4: $(date +%T) $*" >&2; }

start_proxy() {
	local upstream=${RINGCACHE_TEST_S3_ENDPOINT#http://}
	"$BUILD/rc-proxy" --listen 127.0.0.1:0 --upstream "$upstream" \
		--latency-ms "$LATENCY_MS" --bw-conn "$BW_CONN" \
		--log-level error >"$WORK/proxy.out" 2>"$WORK/proxy.err" &
	PROXY_PID=$!
	for _ in $(seq 100); do
		grep -q '^listening' "$WORK/proxy.out" && break
		kill -0 "$PROXY_PID" 2>/dev/null || { cat "$WORK/proxy.err" >&2; exit 1; }
		sleep 0.05
	done
	PROXY=$(sed -n 's/^listening \(.*\)$/\1/p' "$WORK/proxy.out")
	[ -n "$PROXY" ] || { log "rc-proxy did not start"; exit 1; }
	log "rc-proxy $PROXY -> $upstream (${LATENCY_MS} ms, ${BW_CONN} MB/s per connection)"
}

# start_daemon MEMORY: a fresh ringcached (cold cache) behind the proxy.
start_daemon() {
	lib_daemon_up "http://$PROXY" "$1" "s3://$BUCKET/$PREFIX" "${DAEMON_EXTRA:-}" || exit 1
}

stop_daemon() { lib_daemon_down; }

run_stall() {
	local run=$1 wl=$2 step=$3 mode=$4 samples=$5
	local args=(--socket "$SOCK" --dataset bench --small "$N_SMALL"
		--workload "$wl" --step-ms "$step" --epochs 2 --samples "$samples")
	[ "$mode" = prefetch ] && args+=(--prefetch)
	[ "$STALL_READ" = zero-copy ] && args+=(--zero-copy)
	start_daemon "$STALL_MEMORY"
	"$BUILD/perf/rc-stallbench" "${args[@]}" >>"$WORK/stall.txt"
	stop_daemon
	log "stall run $run $wl step ${step} ms $mode done"
}

run_hit() {
	local run=$1 mode=$2
	local args=(--socket "$SOCK" --dataset bench --small "$N_SMALL"
		--procs 8 --epochs 3 --step-ms "$HIT_STEP_MS")
	[ "$mode" = plans ] && args+=(--plans)
	[ "$mode" = ahead ] && args+=(--plans-ahead)
	start_daemon "$HIT_MEMORY"
	# A failed run is counted and left out of the medians, not fatal: the
	# daemon can fail a plan-mode read with ENOMEM (see the report).
	if "$BUILD/perf/rc-hitbench" "${args[@]}" >>"$WORK/hit.txt" 2>>"$WORK/hit.err"; then
		log "hit run $run $mode done"
	else
		echo "FAILED mode=$mode run=$run" >>"$WORK/hit.txt"
		log "hit run $run $mode FAILED: $(tail -1 "$WORK/hit.err")"
	fi
	"$BUILD/ringcache" -s "$SOCK" stats >"$WORK/stats-hit-$run-$mode.txt" 2>&1 || true
	stop_daemon
}

# median FILE FIELD [KEY=VALUE...]: median of FIELD over the RESULT lines
# holding every KEY=VALUE given.
median() {
	local file=$1 field=$2
	shift 2
	awk -v field="$field" -v want="$*" '
		BEGIN { nw = split(want, w, " ") }
		/^RESULT / {
			delete kv
			for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
			for (i = 1; i <= nw; i++) { split(w[i], p, "="); if (kv[p[1]] != p[2]) next }
			v[n++] = kv[field] + 0
		}
		END {
			if (n == 0) { print "nan"; exit }
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
				if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
			print (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
		}' "$file"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }

stall_table() {
	local f=$WORK/stall.txt
	echo
	echo "Data stall: % of wall time waiting for data (median of $RUNS runs; epoch 1 cold on a fresh daemon, epoch 2 warm; reads: $STALL_READ)"
	echo "link: rc-proxy ${LATENCY_MS} ms first-byte latency, ${BW_CONN} MB/s per connection, $S3_KIND behind it"
	printf '%-8s %5s %5s | %8s %8s %7s | %8s %9s | %8s %8s | %9s %9s\n' \
		workload step n "cold off" "cold on" off/on "1st on" "steady on" \
		"warm off" "warm on" "p99 off" "p99 on"
	local wl step
	for wl in small large; do
		for step in $STEPS; do
			local k="workload=$wl step_ms=$step"
			local cn cp first steady wn wp n pn pp
			cn=$(median "$f" stall_pct "$k" mode=no-plan epoch=1)
			cp=$(median "$f" stall_pct "$k" mode=prefetch epoch=1)
			first=$(median "$f" first_ms "$k" mode=prefetch epoch=1)
			steady=$(median "$f" steady_pct "$k" mode=prefetch epoch=1)
			wn=$(median "$f" stall_pct "$k" mode=no-plan epoch=2)
			wp=$(median "$f" stall_pct "$k" mode=prefetch epoch=2)
			n=$(median "$f" samples "$k" mode=prefetch epoch=1)
			pn=$(median "$f" wait_p99_ms "$k" mode=no-plan epoch=1)
			pp=$(median "$f" wait_p99_ms "$k" mode=prefetch epoch=1)
			printf '%-8s %5s %5s | %7.2f%% %7.2f%% %7s | %6.0fms %8.2f%% | %7.2f%% %7.2f%% | %7.1fms %7.1fms\n' \
				"$wl" "$step" "$n" "$cn" "$cp" "$(ratio "$cn" "$cp")" "$first" "$steady" \
				"$wn" "$wp" "$pn" "$pp"
		done
	done
	echo "(off: no plan; on: the epoch's order sent as a prefetch plan at its start; 1st on: wait for the first"
	echo " sample of the cold epoch with a plan; steady on: the cold epoch's stall without that first wait;"
	echo " p99: per-sample wait of the cold epoch. Target: <= 1% stall once warm / with prefetch)"
}

hit_table() {
	local f=$WORK/hit.txt
	echo
	echo "Hit ratio, dataset ~2x cache ($N_SMALL x 570 KB, memory = $HIT_MEMORY B), 8 reader processes (8 GPU queues), ${HIT_STEP_MS} ms step, median of $RUNS runs"
	echo "reuse = 1 - S3 GETs / block reads (what the cache saved from S3; prefetch cannot inflate it)"
	printf '%-6s | %7s %7s %7s | %6s %6s | %7s %7s %7s | %5s %5s %5s | %4s %4s %4s\n' \
		epoch "reuse d" "reuse p" "reuse a" "p/d" "a/d" "hit d" "hit p" "hit a" \
		"GET d" "GET p" "GET a" "ent d" "ent p" "ent a"
	local e
	for e in 1 2 3 warm all; do
		local rd rp ra hd hp ha gd gp ga ed ep ea
		rd=$(median "$f" reuse mode=default epoch=$e)
		rp=$(median "$f" reuse mode=plans epoch=$e)
		ra=$(median "$f" reuse mode=ahead epoch=$e)
		hd=$(median "$f" hit mode=default epoch=$e)
		hp=$(median "$f" hit mode=plans epoch=$e)
		ha=$(median "$f" hit mode=ahead epoch=$e)
		gd=$(median "$f" s3_get mode=default epoch=$e)
		gp=$(median "$f" s3_get mode=plans epoch=$e)
		ga=$(median "$f" s3_get mode=ahead epoch=$e)
		ed=$(median "$f" entries mode=default epoch=$e)
		ep=$(median "$f" entries mode=plans epoch=$e)
		ea=$(median "$f" entries mode=ahead epoch=$e)
		printf '%-6s | %7.3f %7.3f %7.3f | %6s %6s | %7.3f %7.3f %7.3f | %5s %5s %5s | %4s %4s %4s\n' \
			"$e" "$rd" "$rp" "$ra" "$(ratio "$rp" "$rd")" "$(ratio "$ra" "$rd")" \
			"$hd" "$hp" "$ha" "$gd" "$gp" "$ga" "$ed" "$ep" "$ea"
	done
	echo "(d: default policy, no plans; p: each epoch's order sent as a plan at its start; a: ahead, the next"
	echo " epoch's order also appended (RC_PLAN_APPEND) at the start of each epoch. warm: epochs 2-3 together"
	echo " (epoch 1's misses are compulsory for every policy); all: epochs 1-3. hit: samples served without"
	echo " waiting for S3 (RC_CQE_F_HIT; prefetch counts). ent: blocks cached at the end, cache/dataset ="
	echo " ent/$N_SMALL, which bounds a warm epoch's reuse for any policy: a block read once an epoch is"
	echo " saved only if it was cached when the epoch began. Target: plans >= 1.5x default and > cache/dataset)"
	local failed
	failed=$(grep -c '^FAILED' "$f" || true)
	[ "$failed" = 0 ] || echo "$failed hit run(s) FAILED and are left out: $(grep '^FAILED' "$f" | tr '\n' ';')"
}

log "S3 endpoint"
lib_s3_up || exit 1
log "uploading the dataset ($N_SMALL small objects + 3 large)"
"$BUILD/rc-s3" gen-dataset "$BUCKET" "$PREFIX" --small "$N_SMALL" >"$WORK/upload.log" 2>&1 ||
	{ cat "$WORK/upload.log" >&2; exit 1; }
start_proxy
: >"$WORK/stall.txt"
: >"$WORK/hit.txt"
for run in $(seq "$RUNS"); do
	has_part stall || break
	for wl in small large; do
		samples=$SMALL_SAMPLES
		[ "$wl" = large ] && samples=$LARGE_SAMPLES
		for step in $STEPS; do
			for mode in no-plan prefetch; do
				run_stall "$run" "$wl" "$step" "$mode" "$samples"
			done
		done
	done
done
for run in $(seq "$RUNS"); do
	has_part hit || break
	for mode in $HIT_MODES; do
		run_hit "$run" "$mode"
	done
done
! has_part stall || stall_table
! has_part hit || hit_table
