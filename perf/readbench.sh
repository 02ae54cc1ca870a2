#!/usr/bin/env bash
# readbench.sh - owns the warm-cache read benchmark's setup: starts a
# private Ceph RGW (tests/fixture/s3-up.sh), uploads the 3 large objects of
# tools/dataset.h (~101 MiB), starts build/ringcached with room for them,
# runs build/perf/rc-readbench (ring READ, READ_INTO and pread of the same
# extents; see the top of perf/readbench.c) with 1 client process and then
# with 2, stops everything, and prints the result tables last.
#
# usage: perf/readbench.sh [rc-readbench options, e.g. --runs 5 --run-s 0.5]
#   BUILD=build        the meson build folder
#   PROCS="1 2"        the client process counts to run
#   KEEP_LOGS=1        keep the work folder (daemon log, RGW logs)
# e.g.:  ninja -C build && perf/readbench.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT/${BUILD:-build}" && pwd)
PROCS=${PROCS:-"1 2"}
DATASET_PREFIX=readbench/
# Only one small object: the benchmark reads the large ones, and the
# generator's --small also decides their bytes, so rc-readbench gets it too.
N_SMALL=1

WORK=$(mktemp -d /tmp/rc-readbench.XXXXXX)
RGW_DIR=$WORK/rgw
DAEMON_PID=

cleanup() {
	local rc=$?
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	if [ -d "$RGW_DIR" ]; then
		RGW_DIR=$RGW_DIR bash "$ROOT/tests/fixture/s3-down.sh" >/dev/null 2>&1 || true
	fi
	if [ "${KEEP_LOGS:-0}" = 1 ] || [ "$rc" != 0 ]; then
		echo "readbench: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "readbench: $*" >&2; }

log "starting RGW in $RGW_DIR"
if ! RGW_DIR=$RGW_DIR RC_S3=$BUILD/rc-s3 bash "$ROOT/tests/fixture/s3-up.sh" memstore \
	>"$WORK/s3-up.log" 2>&1; then
	cat "$WORK/s3-up.log" >&2
	exit 1
fi
# shellcheck disable=SC1091
. "$RGW_DIR/env"
BUCKET=${RINGCACHE_TEST_S3_BUCKET:-ringcache-test}

log "uploading the dataset"
"$BUILD/rc-s3" gen-dataset "$BUCKET" "$DATASET_PREFIX" --small "$N_SMALL" >&2

SOCK=$WORK/ringcache.sock
CONF=$WORK/ringcache.conf
(
	umask 077 # the file holds the secret key
	cat >"$CONF" <<EOF
# written by perf/readbench.sh
[daemon]
socket = $SOCK
socket_mode = 0600
memory = 512M
block_size = 1M
log_level = warn
metadata_ttl = 600
[s3]
endpoint = $RINGCACHE_TEST_S3_ENDPOINT
region = ${RINGCACHE_TEST_S3_REGION:-us-east-1}
addressing = path
tls_verify = false
credentials = config
access_key = $RINGCACHE_TEST_S3_ACCESS_KEY
secret_key = $RINGCACHE_TEST_S3_SECRET_KEY
[dataset bench]
uri = s3://$BUCKET/$DATASET_PREFIX
EOF
)

log "starting ringcached"
"$BUILD/ringcached" -c "$CONF" >"$WORK/ringcached.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do
	[ -S "$SOCK" ] && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$WORK/ringcached.log" >&2; exit 1; }
	sleep 0.1
done
[ -S "$SOCK" ] || { log "ringcached did not open $SOCK"; exit 1; }

mkdir -p "$WORK/local"
for p in $PROCS; do
	log "rc-readbench with $p client process(es)"
	"$BUILD/perf/rc-readbench" --socket "$SOCK" --dataset bench \
		--local-dir "$WORK/local" --small "$N_SMALL" --procs "$p" "$@" \
		>"$WORK/table-$p.txt"
done

for p in $PROCS; do
	cat "$WORK/table-$p.txt"
done
