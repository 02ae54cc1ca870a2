#!/usr/bin/env bash
# trace_syscalls.sh - a ringcached of BUILD_DIR in a representative run:
# start (shards, io_uring, the NVMe tier, the journal, the metrics
# endpoint), `ringcache status` and `stats`, a scrape, a reload (SIGHUP),
# the drain at SIGTERM; with the suite's S3 (RINGCACHE_TEST_S3_*, _PREFIX
# with the sample dataset) also LIST, cold and warm reads, a prefetch,
# and a checkpoint written, synced and uploaded through the Python
# binding (write-back, journal, upload). Every step must succeed. The
# processes a kubelet runs in the daemon's container run under the
# profile too, so they are traced (or confined) as well: the probes'
# `ringcache status` and the reload the DaemonSet's header documents,
# `sh -c 'kill -HUP 1'` (the image has no kill binary).
#
#   trace_syscalls.sh BUILD_DIR
#       under strace -f: prints the system calls made, sorted, one a line
#       (what contrib/kubernetes/seccomp/ringcached.json must allow).
#   trace_syscalls.sh BUILD_DIR --confined PROFILE
#       as the DaemonSet runs it: uid 0 with no capability, gid 2000,
#       socket_mode 0660, under the seccomp PROFILE (seccomp_exec.py);
#       then checks the socket is group 2000, mode 0660, and that uid
#       65534 connects with the supplemental group 2000 and is refused
#       without it.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:?usage: trace_syscalls.sh BUILD_DIR [--confined PROFILE]}" && pwd)
PROFILE=
D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/trace.XXXXXX")
if [ "${2:-}" = --confined ]; then
	PROFILE=$(readlink -f "${3:?--confined PROFILE}")
	launch=(setpriv --regid 2000 --clear-groups --inh-caps=-all
		--bounding-set=-all -- /usr/bin/python3
		"$SRC/tests/kubernetes/seccomp_exec.py" "$PROFILE")
	in_pod=("${launch[@]}")
else
	command -v strace >/dev/null || { echo "trace_syscalls: strace missing" >&2; rm -rf "$D"; exit 2; }
	launch=(strace -f -qq -o TRACE)
	in_pod=(strace -f -qq -o "$D/trace.exec" -A)
fi
PID= DPID=
cleanup() {
	# strace detaches at a signal: stop the daemon itself.
	[ -n "$DPID" ] && kill -TERM "$DPID" 2>/dev/null
	[ -n "$PID" ] && wait "$PID" 2>/dev/null
	[ -n "${KEEP:-}" ] && cp "$D/log" "$KEEP" 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT

port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ -n "${RINGCACHE_TEST_S3_ENDPOINT:-}" ] && [ -n "${RINGCACHE_TEST_PREFIX:-}" ]; then
	s3=1
	s3conf="endpoint = $RINGCACHE_TEST_S3_ENDPOINT
region = $RINGCACHE_TEST_S3_REGION
credentials = config
access_key = $RINGCACHE_TEST_S3_ACCESS_KEY
secret_key = $RINGCACHE_TEST_S3_SECRET_KEY"
	bucket=$RINGCACHE_TEST_S3_BUCKET prefix=$RINGCACHE_TEST_PREFIX
else
	s3=
	s3conf="endpoint = http://127.0.0.1:9
region = us-east-1
credentials = anonymous
retry_budget = 1"
	bucket=nothing prefix=none/
fi
conf() { # conf MEMORY
	cat <<CONF
[daemon]
socket = $D/rc.sock
socket_mode = 0660
; as in the DaemonSet's config (no CAP_SYS_NICE there)
nice = 0
memory = $1
tier_path = $D/tier
tier_size = 64M
journal = $D/journal
journal_size = 64M
staging_memory = 32M
metrics_listen = 127.0.0.1:$port
[s3]
addressing = path
tls_verify = false
$s3conf
[dataset sample]
uri = s3://$bucket/${prefix}ds/
[dataset ck]
uri = s3://$bucket/${prefix}trace-ck/
writable = true
durability = local
CONF
}
conf 64M >"$D/rc.conf"
chmod 600 "$D/rc.conf"
chmod 0755 "$D"
"${launch[@]/TRACE/$D/trace}" "$BUILD/ringcached" -c "$D/rc.conf" >"$D/log" 2>&1 &
PID=$!
# Confined, the launcher execs the daemon: its pid is the daemon's.
[ -n "$PROFILE" ] && DPID=$PID
cli() { "$BUILD/ringcache" -s "$D/rc.sock" "$@"; }
for _ in $(seq 600); do
	[ -n "$DPID" ] || DPID=$(pgrep -P "$PID" -x ringcached || true)
	cli status >/dev/null 2>&1 && break
	kill -0 "$PID" 2>/dev/null || { cat "$D/log" >&2; exit 1; }
	sleep 0.1
done
cli status >/dev/null
# The readiness and liveness probes' command, in the container.
"${in_pod[@]}" "$BUILD/ringcache" -s "$D/rc.sock" status >/dev/null
cli stats --prometheus >/dev/null
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
cat <&3 >/dev/null
exec 3<&-
if [ -n "$s3" ]; then
	cli ls sample small/ >/dev/null
	cli cat sample small/00007.bin >/dev/null
	cli cat sample small/00007.bin >/dev/null
	cli prefetch sample small/ >/dev/null 2>&1
	PYTHONPATH=$SRC/contrib/python RINGCACHE_LIB=$BUILD/libringcache.so \
	RINGCACHE_SOCKET=$D/rc.sock /usr/bin/python3 - <<'PY'
import os, ringcache
with ringcache.Client() as c:
    w = c.writer("ck", "trace/%d.bin" % os.getpid())
    w.write(os.urandom(3 << 20))
    w.close()
    w.sync()
PY
fi
if [ -n "$PROFILE" ]; then
	owner=$(stat -c '%u:%g %a' "$D/rc.sock")
	[ "$owner" = "0:2000 660" ] ||
		{ echo "trace_syscalls: the socket is $owner, not 0:2000 660" >&2; exit 1; }
	setpriv --reuid 65534 --regid 65534 --groups 2000 -- \
		"$BUILD/ringcache" -s "$D/rc.sock" status >/dev/null ||
		{ echo "trace_syscalls: uid 65534 in group 2000 cannot connect" >&2; exit 1; }
	if setpriv --reuid 65534 --regid 65534 --clear-groups -- \
		"$BUILD/ringcache" -s "$D/rc.sock" status >/dev/null 2>&1; then
		echo "trace_syscalls: uid 65534 without group 2000 connected" >&2
		exit 1
	fi
fi
conf 32M >"$D/rc.conf" # a key that needs a restart: logged
# The reload as `kubectl exec ds/ringcached -- sh -c 'kill -HUP 1'` runs it.
"${in_pod[@]}" /bin/sh -c "kill -HUP $DPID"
for _ in $(seq 300); do
	grep -q "reloaded \|reload refused" "$D/log" && break
	sleep 0.1
done
kill -TERM "$DPID"
wait "$PID" || { cat "$D/log" >&2; exit 1; }
PID= DPID=
if [ -n "$PROFILE" ]; then
	grep -q "reload: \[daemon\] memory" "$D/log" ||
		{ echo "trace_syscalls: no reload in the log" >&2; cat "$D/log" >&2; exit 1; }
	echo "trace_syscalls: confined run ok"
	exit 0
fi
# "PID name(args..." and "PID <... name resumed>": the names.
sed -nE 's/^[0-9]+ +(<\.\.\. )?([a-z0-9_]+)[( ].*/\2/p' "$D/trace" "$D/trace.exec" |
	sort -u
