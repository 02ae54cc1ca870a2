#!/usr/bin/env bash
# budgetbench.sh - owns the S3 request budget benchmark (issue 15): a cold
# 8-reader epoch (rc-workload, prefetch plans, shuffled) of the sample
# dataset through rc-proxy refusing requests over LIMIT/s with 503
# SlowDown, as S3 does per prefix, once per mode and run:
#   aimd  the default budget (s3_get_rate 5500, far above LIMIT): AIMD finds
#         the limit from the SlowDowns
#   rate  s3_get_rate = LIMIT: the operator knows the node's share
#   off   s3_get_rate = 0: no budget, only the retries' backoff
# Every request is a GET (open_fetch = block; 64 KiB blocks so that the
# 279 MB dataset takes ~4,700 of them). Per mode it prints the medians of
# RUNS runs: useful GETs/s (answered, not SlowDown) and their ratio to
# LIMIT (target >= 0.9), the SlowDown share of all requests (target < 2%)
# and the time requests waited for the budget.
#
# usage: perf/budgetbench.sh
#   LIMIT=400 RUNS=3 MODES="aimd rate off" BLOCK_SIZE=64K LATENCY_MS=20
#   BUILD=build  KEEP_LOGS=1 (keep the work folder)
# S3: the endpoint in RINGCACHE_TEST_S3_* if set, else a private RGW.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT/${BUILD:-build}" && pwd)
LIMIT=${LIMIT:-400}
RUNS=${RUNS:-3}
MODES=${MODES:-"aimd rate off"}
LATENCY_MS=${LATENCY_MS:-20}
export BLOCK_SIZE=${BLOCK_SIZE:-64K}
READERS=8

WORK=$(mktemp -d /tmp/rc-budgetbench.XXXXXX)
BUILD_BIN=$BUILD
# shellcheck source=perf/lib.sh
. "$ROOT/perf/lib.sh"
PROXY_PID=
PREFIX=perf/budget-$$/
stop_proxy() {
	if [ -n "$PROXY_PID" ]; then
		kill -TERM "$PROXY_PID" 2>/dev/null || true
		wait "$PROXY_PID" 2>/dev/null || true
	fi
	PROXY_PID=
}
trap 'rc=$?; stop_proxy; lib_cleanup budgetbench "$rc"' EXIT
trap 'exit 130' INT TERM

log() { echo "budgetbench: $*" >&2; }

# One command to the proxy's control socket; prints the reply.
proxy_ctl() {
	python3 - "$WORK/proxy.ctl" "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((sys.argv[2] + "\n").encode())
out = b""
while not (out.endswith(b"ok\n") or b"error" in out):
    d = s.recv(65536)
    if not d:
        break
    out += d
sys.stdout.write(out.decode())
PY
}

stat_of() { awk -v n="$1" '$1 == n { print $2 }'; }

log "S3 endpoint"
lib_s3_up
log "uploading the sample dataset to $BUCKET/$PREFIX"
"$BUILD/rc-s3" gen-dataset "$BUCKET" "$PREFIX" >&2
"$BUILD/rc-s3" ls "$BUCKET" "$PREFIX" |
	awk -v p="$PREFIX" '{ k = $3; sub("^" p, "", k); print $1, k }' >"$WORK/keys"

upstream=${RINGCACHE_TEST_S3_ENDPOINT#http://}
"$BUILD/rc-proxy" --listen 127.0.0.1:0 --upstream "$upstream" \
	--latency-ms "$LATENCY_MS" --bw-conn 0 --rate-limit "$LIMIT" \
	--control "$WORK/proxy.ctl" >"$WORK/proxy.out" 2>"$WORK/proxy.log" &
PROXY_PID=$!
for _ in $(seq 100); do
	grep -q '^listening' "$WORK/proxy.out" 2>/dev/null && break
	sleep 0.05
done
port=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$WORK/proxy.out")
[ -n "$port" ] || { cat "$WORK/proxy.log" >&2; exit 1; }
log "rc-proxy on port $port: $LIMIT requests/s, ${LATENCY_MS} ms"

printf 'mode\trun\tsecs\tgets\tslowdowns\trequests\tuseful_get_s\tratio\tshare_pct\tthrottled_s\terrors\n' \
	>"$WORK/raw.tsv"
for run in $(seq "$RUNS"); do
	for mode in $MODES; do
		case "$mode" in
		aimd) DATASET_EXTRA= ;;
		rate) DATASET_EXTRA="s3_get_rate = $LIMIT" ;;
		off) DATASET_EXTRA="s3_get_rate = 0" ;;
		*) echo "budgetbench: unknown mode $mode" >&2; exit 2 ;;
		esac
		export DATASET_EXTRA
		# A second of quiet refills the proxy's bucket between runs.
		sleep 1
		lib_daemon_up "http://127.0.0.1:$port" 1G "s3://$BUCKET/$PREFIX" \
			"open_fetch = block"
		proxy_ctl reset-stats >/dev/null
		"$BUILD/perf/rc-workload" --keys "$WORK/keys" --socket "$SOCK" \
			--dataset bench --readers "$READERS" --order shuffled \
			--epochs 1 --seed "$run" --label "$mode" >"$WORK/epoch.tsv"
		px=$(proxy_ctl stats)
		ds=$("$BUILD/ringcache" -s "$SOCK" stats)
		lib_daemon_down
		secs=$(awk -F'\t' 'NR == 1 { print $7 }' "$WORK/epoch.tsv")
		errors=$(awk -F'\t' 'NR == 1 { print $14 }' "$WORK/epoch.tsv")
		requests=$(stat_of requests <<<"$px")
		gets=$(stat_of get <<<"$px")
		limited=$(stat_of rate_limited <<<"$px")
		throttled=$(stat_of ringcache_s3_throttled_seconds_total <<<"$ds")
		awk -v m="$mode" -v r="$run" -v s="$secs" -v g="$gets" \
			-v l="$limited" -v q="$requests" -v t="$throttled" \
			-v n="$LIMIT" -v e="$errors" 'BEGIN {
			u = (g - l) / s
			printf "%s\t%d\t%.2f\t%d\t%d\t%d\t%.1f\t%.3f\t%.2f\t%.1f\t%s\n",
				m, r, s, g, l, q, u, u / n, 100 * l / q, t, e }' \
			>>"$WORK/raw.tsv"
		tail -n 1 "$WORK/raw.tsv" >&2
	done
done

echo
echo "### S3 request budget, $(date -u +%Y%m%d-%H%M%S) (median of $RUNS runs)"
echo
echo "Cold epoch, $READERS readers (rc-workload, plans, shuffled), $(wc -l <"$WORK/keys") objects,"
echo "block $BLOCK_SIZE, open_fetch = block; rc-proxy: $LIMIT requests/s, ${LATENCY_MS} ms; $S3_KIND; $(nproc) cores."
echo
echo "| mode | epoch s | GETs | SlowDowns | useful GETs/s | / limit | SlowDown share | throttled s | errors |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for mode in $MODES; do
	awk -F'\t' -v m="$mode" '
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
				t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
			}
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	$1 == m { n++; s[n] = $3; g[n] = $4; l[n] = $5; u[n] = $7; r[n] = $8
		  p[n] = $9; t[n] = $10; e[n] = $11 }
	END { printf "| %s | %.2f | %d | %d | %.1f | %.2f | %.2f%% | %.1f | %d |\n",
		m, med(s, n), med(g, n), med(l, n), med(u, n), med(r, n),
		med(p, n), med(t, n), med(e, n) }' "$WORK/raw.tsv"
done
echo
echo "raw: $WORK/raw.tsv (kept with KEEP_LOGS=1)"
# The dataset is this run's: remove it.
"$BUILD/rc-s3" ls "$BUCKET" "$PREFIX" | awk '{ print $3 }' |
	while read -r k; do "$BUILD/rc-s3" rm "$BUCKET" "$k" >/dev/null; done
