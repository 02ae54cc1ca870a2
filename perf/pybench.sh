#!/usr/bin/env bash
# pybench.sh - the Python binding's cost per warm sample (C extension vs
# ctypes) and a 2-worker DataLoader over ringcache vs local files
# (perf/pybench.py): an S3 endpoint (lib.sh: RINGCACHE_TEST_S3_* if set,
# else a private RGW), PYBENCH_N objects of PYBENCH_SIZE random bytes put
# both in S3 and in a local folder, one ringcached, the program. With
# libfuse (`ringcache mount` built) the dataset is also mounted and the
# loader reads the same files through the mount (issue 22).
#
#   perf/pybench.sh [BUILD]     (default: build; needs /usr/bin/python3
#                                with torch, the extension built there)
# PYBENCH_N (default 2048), PYBENCH_SIZE (default 4096), PYBENCH_PASSES
# (default 7), PYBENCH_EPOCHS (default 5); PYBENCH_PARTS, PYBENCH_SOURCES
# (pybench.py's header).
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
MNT=$WORK/mnt
mount_down() {
	mountpoint -q "$MNT" 2>/dev/null || return 0
	fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
}
on_exit() {
	local rc=$?
	mount_down
	lib_cleanup pybench "$rc"
}
trap on_exit EXIT

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
MOUNT_ARG=()
mkdir -p "$MNT"
"$BUILD_BIN/ringcache" -s "$SOCK" mount -f bench "$MNT" >"$WORK/mount.log" 2>&1 &
for _ in $(seq 100); do
	mountpoint -q "$MNT" && { MOUNT_ARG=("$MNT"); break; }
	sleep 0.1
done
[ ${#MOUNT_ARG[@]} -gt 0 ] ||
	echo "pybench: no mount ($(tail -n 1 "$WORK/mount.log")): its row left out" >&2
PYTHONPATH=$ROOT/contrib/python RINGCACHE_BUILD_DIR=$BUILD \
	RINGCACHE_LIB=$BUILD/libringcache.so PYBENCH_SIZE=$SIZE \
	/usr/bin/python3 perf/pybench.py "$SOCK" bench "$WORK/local" \
	"${PYBENCH_PASSES:-7}" "${PYBENCH_EPOCHS:-5}" "${MOUNT_ARG[@]}"
mount_down
# shellcheck disable=SC2016
ls "$WORK/local" | xargs -P 8 -I{} sh -c \
	'"$0" rm "$1" "$2{}" >/dev/null || echo "pybench: $2{} left in S3" >&2' \
	"$BUILD_BIN/rc-s3" "$BUCKET" "$prefix"
