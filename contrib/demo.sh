#!/usr/bin/env bash
# demo.sh - the README's first command: ringcache end to end on one
# machine. Installs the Debian packages (contrib/install-deps.sh), builds,
# starts a private S3 server (Ceph RGW on loopback, tests/fixture/s3-up.sh),
# uploads a sample dataset, starts ringcached in front of it, reads the
# dataset through the shared-memory rings (one cold pass, two warm ones)
# and prints what the cache did. Everything it starts is stopped on exit,
# and all its state lives in one temp folder, so it can run again at once.
# After the daemon starts it prints the huge-page state: the kernel's
# shmem THP policy and whether the arenas got 2 MiB pages (and if not,
# why and the fix).
#
# usage: contrib/demo.sh          (as root, or a user with sudo)
#   DEMO_KEEP=1  keep the temp folder (logs, config) after exit
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
T0=$(date +%s.%N)
WORK=
DAEMON_PID=

say() { printf '\n== %s\n' "$*"; }
elapsed() { echo "$(date +%s.%N) - $T0" | bc | xargs printf '%.1f'; }

# Stops the daemon, then the S3 server, then removes the temp folder.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	if [ -n "$WORK" ] && [ -d "$WORK/rgw" ]; then
		RGW_DIR=$WORK/rgw bash "$ROOT/tests/fixture/s3-down.sh" \
			>"$WORK/s3-down.log" 2>&1 ||
			echo "demo: s3-down.sh failed, see $WORK/s3-down.log" >&2
	fi
	if [ -n "$WORK" ]; then
		if [ "${DEMO_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
			echo "demo: logs kept in $WORK" >&2
		else
			rm -rf "$WORK"
		fi
	fi
	[ "$rc" -eq 0 ] || echo "demo: FAILED (exit $rc)" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Last lines of a log, for a step that failed.
show_log() {
	echo "---- last lines of $1" >&2
	tail -n 20 "$1" >&2 || true
}

say "dependencies"
bash "$ROOT/contrib/install-deps.sh"

say "build"
cd "$ROOT"
if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD"
fi
ninja -C "$BUILD"

WORK=$(mktemp -d /tmp/ringcache-demo.XXXXXX)
chmod 755 "$WORK"

say "local S3 server (Ceph RGW on 127.0.0.1, about 20 s)"
if ! RGW_DIR=$WORK/rgw RC_S3=$BUILD/rc-s3 \
		bash "$ROOT/tests/fixture/s3-up.sh" >"$WORK/s3-up.log" 2>&1; then
	show_log "$WORK/s3-up.log"
	exit 1
fi
# shellcheck source=/dev/null
. "$WORK/rgw/env"
echo "S3 at $RINGCACHE_TEST_S3_ENDPOINT, bucket $RINGCACHE_TEST_S3_BUCKET"

say "sample dataset: 300 small objects, 3 large ones, edge cases"
"$BUILD/rc-s3" gen-dataset "$RINGCACHE_TEST_S3_BUCKET" sample/

# The shipped demo config, pointed at this run's server, bucket and socket.
SOCK=$WORK/ringcache.sock
CONF=$WORK/ringcache.conf
sed -e "s#^socket = .*#socket = $SOCK#" \
	-e "s#^endpoint = .*#endpoint = $RINGCACHE_TEST_S3_ENDPOINT#" \
	-e "s#^region = .*#region = $RINGCACHE_TEST_S3_REGION#" \
	-e "s#^access_key = .*#access_key = $RINGCACHE_TEST_S3_ACCESS_KEY#" \
	-e "s#^secret_key = .*#secret_key = $RINGCACHE_TEST_S3_SECRET_KEY#" \
	-e "s#^uri = .*#uri = s3://$RINGCACHE_TEST_S3_BUCKET/sample/#" \
	"$ROOT/contrib/ringcache-local.conf" >"$CONF"
chmod 600 "$CONF" # it holds a secret key

say "ringcached -c $CONF"
"$BUILD/ringcached" -c "$CONF" >"$WORK/ringcached.log" 2>&1 &
DAEMON_PID=$!
export RINGCACHE_SOCKET=$SOCK
for _ in $(seq 100); do
	"$BUILD/ringcache" status >/dev/null 2>&1 && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { show_log "$WORK/ringcached.log"; exit 1; }
	sleep 0.1
done
"$BUILD/ringcache" status >/dev/null || { show_log "$WORK/ringcached.log"; exit 1; }
echo "serving on $SOCK (pid $DAEMON_PID)"
# Huge pages: what the kernel allows and what the arenas got (the daemon
# says why not, and the command that fixes it: README, Huge pages).
echo "shmem_enabled: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo absent)"
grep -m1 -o 'ringcached: arenas.*' "$WORK/ringcached.log" || true

say "ringcache ls sample"
"$BUILD/ringcache" ls sample

say "rc-reader: one cold pass (from S3), two warm passes (from the cache)"
"$BUILD/rc-reader" -d sample --passes 3

say "ringcache status"
"$BUILD/ringcache" status

say "ringcache stats (excerpt)"
"$BUILD/ringcache" stats | grep -E \
	'^ringcache_(cache_hits_total|cache_misses_total|s3_get_total|s3_bytes_total) '

say "demo done in $(elapsed) s; stopping ringcached and the S3 server"
