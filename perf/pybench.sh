#!/usr/bin/env bash
# pybench.sh - the Python binding's cost per warm sample (C extension vs
# ctypes) and a 2-worker DataLoader over ringcache vs local files
# (perf/pybench.py): an S3 endpoint (lib.sh: RINGCACHE_TEST_S3_* if set,
# else a private RGW), PYBENCH_N objects of PYBENCH_SIZE random bytes put
# both in S3 and in a local folder, one ringcached, the program.
#
#   perf/pybench.sh [BUILD]     (default: build; needs /usr/bin/python3
#                                with torch, the extension built there)
# PYBENCH_N (default 2048), PYBENCH_SIZE (default 4096), PYBENCH_PASSES
# (default 7), PYBENCH_EPOCHS (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$(cd "${1:-build}" && pwd)
BUILD_BIN=$BUILD
N=${PYBENCH_N:-2048}
SIZE=${PYBENCH_SIZE:-4096}
WORK=$(mktemp -d /tmp/pybench.XXXXXX)
# shellcheck source=perf/lib.sh
. perf/lib.sh
trap 'lib_cleanup pybench' EXIT

lib_s3_up
prefix="pybench-$$-$(date +%s)/"
mkdir -p "$WORK/local"
/usr/bin/python3 - "$WORK/local" "$N" "$SIZE" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(root, f"s{i:06d}.bin"), "wb") as f:
        f.write(os.urandom(size))
PY
# shellcheck disable=SC2016
ls "$WORK/local" | xargs -P 8 -I{} sh -c \
	'"$0" put "$1" "$2{}" "$3/{}" >/dev/null' \
	"$BUILD_BIN/rc-s3" "$BUCKET" "$prefix" "$WORK/local"
lib_daemon_up "$RINGCACHE_TEST_S3_ENDPOINT" 1G "s3://$BUCKET/$prefix"
PYTHONPATH=$ROOT/contrib/python RINGCACHE_BUILD_DIR=$BUILD \
	RINGCACHE_LIB=$BUILD/libringcache.so PYBENCH_SIZE=$SIZE \
	/usr/bin/python3 perf/pybench.py "$SOCK" bench "$WORK/local" \
	"${PYBENCH_PASSES:-7}" "${PYBENCH_EPOCHS:-5}"
# shellcheck disable=SC2016
ls "$WORK/local" | xargs -P 8 -I{} sh -c \
	'"$0" rm "$1" "$2{}" >/dev/null || echo "pybench: $2{} left in S3" >&2' \
	"$BUILD_BIN/rc-s3" "$BUCKET" "$prefix"
