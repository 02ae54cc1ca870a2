#!/usr/bin/env bash
# touchbench.sh - owns the first-touch benchmark's setup: an S3 endpoint
# (perf/lib.sh: RINGCACHE_TEST_S3_* or a private RGW), N small objects of
# tools/dataset.h (570 KB each), a ringcached with room for them, then
# build/perf/rc-touchbench twice: whole objects, and the first 4 KiB of
# each (small objects). See the top of perf/touchbench.c.
#
# usage: perf/touchbench.sh [rc-touchbench options, e.g. --runs 9]
#   BUILD=build   the meson build folder
#   N_SMALL=300   objects
#   KEEP_LOGS=1   keep the work folder
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$ROOT/${BUILD:-build}" && pwd)
N_SMALL=${N_SMALL:-300}
DATASET_PREFIX=${DATASET_PREFIX:-touchbench-$$/}

WORK=$(mktemp -d /tmp/rc-touchbench.XXXXXX)
BUILD_BIN=$BUILD
# shellcheck source=perf/lib.sh
. "$ROOT/perf/lib.sh"
trap 'lib_cleanup touchbench' EXIT
trap 'exit 130' INT TERM

log() { echo "touchbench: $*" >&2; }

log "S3 endpoint"
lib_s3_up
log "uploading $N_SMALL objects"
"$BUILD/rc-s3" gen-dataset "$BUCKET" "$DATASET_PREFIX" --small "$N_SMALL" >&2
log "starting ringcached"
lib_daemon_up "$RINGCACHE_TEST_S3_ENDPOINT" 512M "s3://$BUCKET/$DATASET_PREFIX"

"$BUILD/perf/rc-touchbench" --socket "$SOCK" --small "$N_SMALL" "$@"
"$BUILD/perf/rc-touchbench" --socket "$SOCK" --small "$N_SMALL" \
	--read-bytes 4096 "$@"
# Bytes cached beside the arena bytes charged for them (issue 13).
RINGCACHE_SOCKET=$SOCK "$BUILD/ringcache" status | grep -E 'cache '
