#!/usr/bin/env bash
# readbench.sh - owns the warm-cache read benchmark's setup: starts a
# private Ceph RGW (perf/lib.sh; or the endpoint in RINGCACHE_TEST_S3_*), uploads the 3 large objects of
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
BUILD_BIN=$BUILD
# shellcheck source=perf/lib.sh
. "$ROOT/perf/lib.sh"
trap 'lib_cleanup readbench' EXIT
trap 'exit 130' INT TERM

log() { echo "readbench: $*" >&2; }

log "S3 endpoint"
lib_s3_up
log "uploading the dataset"
"$BUILD/rc-s3" gen-dataset "$BUCKET" "$DATASET_PREFIX" --small "$N_SMALL" >&2
log "starting ringcached"
lib_daemon_up "$RINGCACHE_TEST_S3_ENDPOINT" 512M "s3://$BUCKET/$DATASET_PREFIX"

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
