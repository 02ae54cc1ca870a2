#!/usr/bin/env bash
# gpubench.sh - the pinned-buffer check on a machine with an NVIDIA GPU:
# an S3 endpoint (RGW if RINGCACHE_TEST_S3_ENDPOINT is set, else
# perf/s3mini.py for machines without a package registry), the sample
# dataset, a ringcached, and rc-gpubench at each block size in
# GPUBENCH_BLOCKS. Prints rc-gpubench's tables.
#
#   perf/gpubench.sh [BIN_DIR]      (default: build, with build/perf/)
# BIN_DIR holds ringcached, rc-s3 and rc-gpubench (a flat folder is fine).
# GPUBENCH_SMALL (default 1000 small objects, ~670 MB), GPUBENCH_BLOCKS
# (default "1M 4M"), GPUBENCH_PASSES (default 9); GPUBENCH_LIBS: a folder
# of shared libraries for the binaries alone (carried to a machine that
# lacks the Debian packages). If python3 has torch with CUDA, the PyTorch
# path (perf/torchgpu.py, libringcache from $RINGCACHE_LIB) runs too.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}
find_bin() {
	local f
	for f in "$BIN/$1" "$BIN/perf/$1"; do
		[ -x "$f" ] && { echo "$f"; return; }
	done
	echo "gpubench: $1 not found under $BIN" >&2
	exit 2
}
# The binaries alone see GPUBENCH_LIBS: python3 keeps its own libraries.
RC_RUN="env LD_LIBRARY_PATH=${GPUBENCH_LIBS:-${LD_LIBRARY_PATH:-}}"
RINGCACHED=$(find_bin ringcached)
RC_S3=$(find_bin rc-s3)
GPUBENCH=$(find_bin rc-gpubench)
SMALL=${GPUBENCH_SMALL:-1000}
WORK=$(mktemp -d /tmp/gpubench.XXXXXX)
ROOT=$PWD
BUILD_BIN=$(dirname "$RINGCACHED")
S3MINI_PID=
# shellcheck source=perf/lib.sh
. perf/lib.sh
cleanup() {
	local rc=$?
	[ -z "$S3MINI_PID" ] || kill "$S3MINI_PID" 2>/dev/null || true
	lib_cleanup gpubench "$rc"
}
trap cleanup EXIT

if [ -z "${RINGCACHE_TEST_S3_ENDPOINT:-}" ]; then
	port=$((20000 + RANDOM % 20000))
	python3 perf/s3mini.py "$port" >"$WORK/s3mini.out" 2>&1 &
	S3MINI_PID=$!
	for _ in $(seq 50); do
		grep -q ready "$WORK/s3mini.out" 2>/dev/null && break
		sleep 0.1
	done
	export RINGCACHE_TEST_S3_ENDPOINT=http://127.0.0.1:$port
	export RINGCACHE_TEST_S3_REGION=us-east-1
	export RINGCACHE_TEST_S3_ACCESS_KEY=GPUBENCH
	export RINGCACHE_TEST_S3_SECRET_KEY=GPUBENCHSECRET
	export RINGCACHE_TEST_S3_BUCKET=ringcache-gpubench
	$RC_RUN "$RC_S3" mb "$RINGCACHE_TEST_S3_BUCKET"
fi
lib_s3_up
$RC_RUN "$RC_S3" gen-dataset "$BUCKET" gpu/ --small "$SMALL" --jobs 16

for bs in ${GPUBENCH_BLOCKS:-1M 4M}; do
	BLOCK_SIZE=$bs lib_daemon_up "$RINGCACHE_TEST_S3_ENDPOINT" 2G "s3://$BUCKET/gpu/"
	echo "## block size $bs"
	$RC_RUN "$GPUBENCH" --socket "$SOCK" --dataset bench --small "$SMALL" \
		--passes "${GPUBENCH_PASSES:-9}" ||
		{ tail -n 20 "$WORK/ringcached.log" >&2; exit 1; }
	if python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
		echo "## PyTorch, block size $bs"
		python3 perf/torchgpu.py "$SOCK" bench "" 5
	fi
	lib_daemon_down
done
