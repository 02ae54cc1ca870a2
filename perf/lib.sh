# lib.sh - sourced by the benchmark scripts under perf/ (bench4.sh,
# readbench.sh, gpubench.sh): the S3 endpoint, a ringcached with one
# dataset, and stopping what they started. perf/run keeps its own harness.
#
# The caller sets ROOT (the repository), BUILD_BIN (where ringcached,
# ringcache and rc-s3 are), WORK (its scratch folder) before sourcing;
# SOCK is then the daemon's socket. Functions:
#   lib_s3_up          the endpoint in RINGCACHE_TEST_S3_* if set (bucket
#                      made already), else a private RGW in $WORK/rgw;
#                      sets BUCKET and S3_KIND (words for the tables)
#   lib_daemon_up ENDPOINT MEMORY URI [EXTRA]   a fresh ringcached on
#                      $WORK/ringcache.sock serving URI as dataset "bench";
#                      EXTRA: more [daemon] lines, $DATASET_EXTRA more
#                      [dataset bench] lines; sets DAEMON_PID
#   lib_daemon_down    stops it (SIGTERM, waits)
#   lib_cleanup NAME [RC]   for the EXIT trap: stops all, keeps $WORK if
#                      RC (default $?) is not 0 or KEEP_LOGS=1
# BUILD_BIN may hold a wrapper in RC_RUN (e.g. "env LD_LIBRARY_PATH=...")
# that prefixes every binary started here.

DAEMON_PID=
LIB_RGW_STARTED=0
SOCK=$WORK/ringcache.sock

lib_s3_up() {
	if [ -n "${RINGCACHE_TEST_S3_ENDPOINT:-}" ]; then
		BUCKET=${RINGCACHE_TEST_S3_BUCKET:-ringcache-test}
		S3_KIND="the S3 endpoint $RINGCACHE_TEST_S3_ENDPOINT"
		return 0
	fi
	local rgw=$WORK/rgw
	if ! RGW_DIR=$rgw RC_S3=$BUILD_BIN/rc-s3 bash "$ROOT/tests/fixture/s3-up.sh" memstore \
		>"$WORK/s3-up.log" 2>&1; then
		cat "$WORK/s3-up.log" >&2
		return 1
	fi
	LIB_RGW_STARTED=1
	# shellcheck disable=SC1091
	. "$rgw/env"
	BUCKET=${RINGCACHE_TEST_S3_BUCKET:-ringcache-test}
	S3_KIND="Ceph RGW memstore"
}

lib_daemon_up() {
	local endpoint=$1 memory=$2 uri=$3 extra=${4:-}
	local conf=$WORK/ringcache.conf
	rm -f "$SOCK"
	(
		umask 077 # the file holds the secret key
		cat >"$conf" <<EOF
# written by perf/lib.sh
[daemon]
socket = $SOCK
socket_mode = 0600
memory = $memory
block_size = ${BLOCK_SIZE:-1M}
log_level = warn
metadata_ttl = 600
$extra
[s3]
endpoint = $endpoint
region = ${RINGCACHE_TEST_S3_REGION:-us-east-1}
addressing = path
tls_verify = false
credentials = config
access_key = $RINGCACHE_TEST_S3_ACCESS_KEY
secret_key = $RINGCACHE_TEST_S3_SECRET_KEY
[dataset bench]
uri = $uri
${DATASET_EXTRA:-}
EOF
	)
	${RC_RUN:-} "$BUILD_BIN/ringcached" -c "$conf" >>"$WORK/ringcached.log" 2>&1 &
	DAEMON_PID=$!
	local _
	for _ in $(seq 200); do
		# Answering, not only bound: the socket file exists before the
		# daemon listens (perf/run, daemon_answers).
		if [ -x "$BUILD_BIN/ringcache" ]; then
			${RC_RUN:-} "$BUILD_BIN/ringcache" -s "$SOCK" status >/dev/null 2>&1 && return 0
		elif [ -S "$SOCK" ]; then
			return 0
		fi
		kill -0 "$DAEMON_PID" 2>/dev/null || { tail -n 20 "$WORK/ringcached.log" >&2; return 1; }
		sleep 0.05
	done
	echo "ringcached did not open $SOCK" >&2
	return 1
}

lib_daemon_down() {
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	DAEMON_PID=
}

lib_cleanup() {
	local rc=${2:-$?} name=$1
	lib_daemon_down
	if [ "$LIB_RGW_STARTED" = 1 ]; then
		RGW_DIR=$WORK/rgw bash "$ROOT/tests/fixture/s3-down.sh" >/dev/null 2>&1 || true
	fi
	if [ "${KEEP_LOGS:-0}" = 1 ] || [ "$rc" != 0 ]; then
		echo "$name: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	return "$rc"
}
