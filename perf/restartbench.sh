#!/usr/bin/env bash
# restartbench.sh - owns the restart benchmark: the pause a daemon restart
# costs a client that keeps reading, from the SIGTERM to the first read
# served by the new daemon (perf/restartbench.c reads one object in a
# loop; the library re-attaches on its own). Each run: a ringcached, the
# reader warmed up, then what systemd's restart does: SIGTERM, wait for
# the exit, start the same config again. Prints each run and the median.
#
# usage: perf/restartbench.sh
#   BUILD=build   the meson build folder
#   RUNS=7        runs per mode
#   MODES="term tier kill"   term: SIGTERM and restart, memory only;
#                 tier: the same with an NVMe tier file (tier_path) whose
#                 blocks come back warm; kill: SIGKILL (a crash: the
#                 socket file stays behind, stale) and restart
#   DATASET_URI   s3://... of objects to read (default: N_SMALL objects
#                 uploaded under a fresh prefix); KEY the object to read
#   KEEP_LOGS=1   keep the work folder
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT/${BUILD:-build}" && pwd)
RUNS=${RUNS:-7}
MODES=${MODES:-term tier kill}
N_SMALL=${N_SMALL:-16}
KEY=${KEY:-small/00001.bin}

WORK=$(mktemp -d /tmp/rc-restartbench.XXXXXX)
BUILD_BIN=$BUILD
# shellcheck source=perf/lib.sh
. "$ROOT/perf/lib.sh"
trap 'lib_cleanup restartbench' EXIT
trap 'exit 130' INT TERM

log() { echo "restartbench: $*" >&2; }

lib_s3_up
if [ -z "${DATASET_URI:-}" ]; then
	prefix=restartbench-$$/
	log "uploading $N_SMALL objects"
	"$BUILD/rc-s3" gen-dataset "$BUCKET" "$prefix" --small "$N_SMALL" >&2
	DATASET_URI=s3://$BUCKET/$prefix
fi

ms() { echo $(( ($1) / 1000000 )).$(printf %03d $(( (($1) / 1000) % 1000 ))); }

# One run: prints "pause_ns exit_ns start_ns" (SIGTERM to first read
# served again; SIGTERM to the old daemon's exit; exit to the new one's
# socket answering).
run_once() {
	local mode=$1 extra=
	[ "$mode" = tier ] && extra="tier_path = $WORK/ringcache.tier
tier_size = 256M"
	lib_daemon_up "$RINGCACHE_TEST_S3_ENDPOINT" 256M "$DATASET_URI" "$extra"
	rm -f "$WORK/ready"
	"$BUILD/perf/rc-restartbench" --socket "$SOCK" --key "$KEY" \
		--ready "$WORK/ready" >"$WORK/reader.out" 2>"$WORK/reader.err" &
	local reader=$!
	for _ in $(seq 600); do
		[ -e "$WORK/ready" ] && break
		kill -0 "$reader" 2>/dev/null || { cat "$WORK/reader.err" >&2; return 1; }
		sleep 0.05
	done
	local t0 t_exit t_up
	t0=$(date +%s%N)
	if [ "$mode" = kill ]; then
		kill -KILL "$DAEMON_PID"
	else
		kill -TERM "$DAEMON_PID"
	fi
	wait "$DAEMON_PID" 2>/dev/null || true
	t_exit=$(date +%s%N)
	# The same config again; a SIGKILLed daemon left its socket file.
	${RC_RUN:-} "$BUILD_BIN/ringcached" -c "$WORK/ringcache.conf" \
		>>"$WORK/ringcached.log" 2>&1 &
	DAEMON_PID=$!
	wait "$reader" || { cat "$WORK/reader.err" >&2; return 1; }
	t_up=$(date +%s%N)
	local t1
	t1=$(cat "$WORK/reader.out")
	echo "$((t1 - t0)) $((t_exit - t0)) $((t1 - t_exit))"
	lib_daemon_down
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for mode in $MODES; do
	: >"$WORK/$mode.tsv"
	for r in $(seq "$RUNS"); do
		read -r pause t_exit t_new < <(run_once "$mode")
		echo "$pause $t_exit $t_new" >>"$WORK/$mode.tsv"
		log "$mode run $r: pause $(ms "$pause") ms (old daemon gone after" \
			"$(ms "$t_exit") ms, then $(ms "$t_new") ms to the first read)"
	done
	p=$(cut -d' ' -f1 "$WORK/$mode.tsv" | median)
	e=$(cut -d' ' -f2 "$WORK/$mode.tsv" | median)
	n=$(cut -d' ' -f3 "$WORK/$mode.tsv" | median)
	printf '%s\tmedian pause %s ms\t(exit %s ms, restart to first read %s ms; %s runs)\n' \
		"$mode" "$(ms "$p")" "$(ms "$e")" "$(ms "$n")" "$RUNS"
done
