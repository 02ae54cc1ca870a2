#!/usr/bin/env bash
# test_package.sh - the Debian packages built from this tree, installed and
# used as a new user would use them: dpkg-buildpackage -b (debian/), lintian
# on the packages (no error, no warning), dpkg -i of ringcached,
# libringcache1, libringcache-dev and python3-ringcache, then the README
# demo's steps against the installed files only: /usr/sbin/
# ringcached with the installed example config (pointed at the suite's S3
# server), `ringcache ls` and `ringcache cat` (bytes compared with awscli),
# a C program compiled with `pkg-config --cflags --libs ringcache` against
# the installed header and library, and the installed Python package
# imported by /usr/bin/python3 from / (no PYTHONPATH). The unit file's
# paths must exist. The tmpfiles.d line (shmem THP advise) is installed
# and applied by the postinst; an opt-out file keeps this machine's knob
# as it was. Purges the packages at the end, whatever happened.
#
# Needs root (dpkg -i), debhelper (contrib/install-deps.sh --package),
# RINGCACHE_TEST_S3_*, _PREFIX with the sample dataset uploaded, _TMP.
# Writes TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PKGS=(ringcached libringcache1 libringcache-dev python3-ringcache)
# shellcheck source=tests/fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"

[ "$(id -u)" = 0 ] || { failt "package: must run as root (dpkg -i)"; finish; }
for b in dpkg-buildpackage dh aws lintian; do
	command -v "$b" >/dev/null ||
		{ failt "package: $b missing (contrib/install-deps.sh --package)"; finish; }
done
: "${RINGCACHE_TEST_S3_ENDPOINT:?}" "${RINGCACHE_TEST_PREFIX:?}"
for p in "${PKGS[@]}"; do
	if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -q installed; then
		failt "package: $p is already installed here; purge it first"
		finish
	fi
done

D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/package.XXXXXX")
chmod 0755 "$D"
DAEMON_PID=
MADE_OPTOUT=
cleanup() {
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID"
		wait "$DAEMON_PID" 2>/dev/null
	fi
	dpkg --purge "${PKGS[@]}" >"$D/purge.log" 2>&1 ||
		echo "test_package: dpkg --purge failed, see $D/purge.log" >&2
	[ -z "$MADE_OPTOUT" ] || rm -f /etc/tmpfiles.d/ringcached-hugepages.conf
	rm -rf "$D/src"
}
trap cleanup EXIT

# The tree as git sees it (tracked and new files, nothing ignored): what
# a clean clone holds, with this checkout's uncommitted changes.
mkdir "$D/src"
(cd "$SRC" && git ls-files -co --exclude-standard -z |
	xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$D/src"
if (cd "$D/src" && DEB_BUILD_OPTIONS="nocheck parallel=2" \
		dpkg-buildpackage -b -uc -us >"$D/build.log" 2>&1); then
	pass "dpkg-buildpackage -b builds ${PKGS[*]}"
else
	failt "dpkg-buildpackage -b (log: $D/build.log)"
	tail -n 30 "$D/build.log" >&2
	finish
fi
# Debian's policy checks on what was built: no error and no warning
# (debian/README.source lists the overrides, if any, and why).
changes=$(ls "$D"/ringcache_*.changes 2>/dev/null | head -n 1)
if lintian --fail-on error,warning "$changes" >"$D/lintian.log" 2>&1; then
	pass "lintian: no error, no warning"
else
	failt "lintian: errors or warnings (log: $D/lintian.log)"
	grep '^[EW]:' "$D/lintian.log" >&2
fi
# The image test (tests/kubernetes/test_image.sh) builds from these
# packages while the tree is the one they were built from.
pdebs=${RINGCACHE_TEST_TMP:-/tmp}/package-debs
mkdir -p "$pdebs" && rm -f "$pdebs"/*
cp "$D"/*.deb "$pdebs/" && tree_digest "$SRC" >"$pdebs/tree"
debs=()
for p in "${PKGS[@]}"; do
	debs+=("$(ls "$D"/"${p}"_*.deb)")
done
# The package's postinst applies tmpfiles.d/ringcached-hugepages.conf
# (shmem THP advise): this machine's knob is not the test's to flip, so
# the documented opt-out (an empty /etc/tmpfiles.d file of that name)
# masks it here, and the knob must come out of the install unchanged.
knob=/sys/kernel/mm/transparent_hugepage/shmem_enabled
optout=/etc/tmpfiles.d/ringcached-hugepages.conf
if [ ! -e "$optout" ]; then
	mkdir -p /etc/tmpfiles.d && : >"$optout" && MADE_OPTOUT=1 ||
		{ failt "package: cannot write $optout"; finish; }
fi
knob_before=$(cat "$knob" 2>/dev/null)
check "dpkg -i installs the four packages" \
	dpkg -i "${debs[@]}" >"$D/install.log" 2>&1
check "the package installs the tmpfiles.d line (shmem THP advise)" \
	grep -qx 'w /sys/kernel/mm/transparent_hugepage/shmem_enabled - - - - advise' \
	/usr/lib/tmpfiles.d/ringcached-hugepages.conf
check "its postinst applies it (systemd-tmpfiles --create)" \
	grep -q 'systemd-tmpfiles.*--create.*ringcached-hugepages.conf' \
	/var/lib/dpkg/info/ringcached.postinst
check "the opt-out in $optout kept shmem_enabled as it was" \
	test "$(cat "$knob" 2>/dev/null)" = "$knob_before"

# The unit starts what was installed, and its documentation is there.
unit=/lib/systemd/system/ringcached.service
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" 2>/dev/null)
check "the unit's ExecStart ($exec_path) is the installed daemon" \
	test -x "$exec_path" -a "$exec_path" = /usr/sbin/ringcached
doc=$(sed -n 's#^Documentation=file://\([^ ]*\).*#\1#p' "$unit" 2>/dev/null)
check "the unit's Documentation= file ($doc) is installed" test -f "$doc"

# The installed example config, pointed at this suite's server.
ex=/usr/share/doc/ringcache/examples/ringcache-local.conf
SOCK=$D/ringcache.sock
CONF=$D/ringcache.conf
ds_uri="s3://$RINGCACHE_TEST_S3_BUCKET/${RINGCACHE_TEST_PREFIX}ds/"
sed -e "s#^socket = .*#socket = $SOCK#" \
	-e "s#^endpoint = .*#endpoint = $RINGCACHE_TEST_S3_ENDPOINT#" \
	-e "s#^region = .*#region = $RINGCACHE_TEST_S3_REGION#" \
	-e "s#^access_key = .*#access_key = $RINGCACHE_TEST_S3_ACCESS_KEY#" \
	-e "s#^secret_key = .*#secret_key = $RINGCACHE_TEST_S3_SECRET_KEY#" \
	-e "s#^uri = .*#uri = $ds_uri#" "$ex" >"$CONF" 2>/dev/null
chmod 600 "$CONF"
/usr/sbin/ringcached -c "$CONF" >"$D/ringcached.log" 2>&1 &
DAEMON_PID=$!
export RINGCACHE_SOCKET=$SOCK
for _ in $(seq 100); do
	/usr/bin/ringcache status >/dev/null 2>&1 && break
	sleep 0.1
done
check "the installed ringcached serves (ringcache status)" \
	/usr/bin/ringcache status >"$D/status.out" 2>&1

export AWS_ACCESS_KEY_ID=$RINGCACHE_TEST_S3_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$RINGCACHE_TEST_S3_SECRET_KEY
export AWS_DEFAULT_REGION=$RINGCACHE_TEST_S3_REGION
/usr/bin/ringcache ls sample small/ >"$D/ls.out" 2>&1
n_listed=$(wc -l <"$D/ls.out")
n_s3=$(aws --endpoint-url "$RINGCACHE_TEST_S3_ENDPOINT" s3 ls \
	"s3://$RINGCACHE_TEST_S3_BUCKET/${RINGCACHE_TEST_PREFIX}ds/small/" 2>/dev/null | wc -l)
check "ringcache ls sample small/ lists what awscli lists ($n_listed of $n_s3)" \
	test "$n_listed" -gt 0 -a "$n_listed" -eq "$n_s3"

key=small/00007.bin
aws --endpoint-url "$RINGCACHE_TEST_S3_ENDPOINT" s3 cp --quiet \
	"s3://$RINGCACHE_TEST_S3_BUCKET/${RINGCACHE_TEST_PREFIX}ds/$key" \
	"$D/expected" 2>"$D/aws.err"
/usr/bin/ringcache cat sample "$key" >"$D/got" 2>"$D/cat.err"
check "ringcache cat sample $key gives awscli's bytes" \
	cmp -s "$D/expected" "$D/got"

# A client built against the installed header and library only.
cat >"$D/app.c" <<'APP'
#include <ringcache.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	struct rc_client c;
	int err = argc == 3 ? rc_attach(&c, NULL, NULL) : -EINVAL;
	if (err) {
		fprintf(stderr, "rc_attach: %s\n", strerror(-err));
		return 1;
	}
	int ds = rc_dataset(&c, argv[1]);
	struct rc_stat st;
	int h = ds < 0 ? ds : rc_open(&c, ds, argv[2], &st);
	uint64_t off = 0;
	while (h >= 0 && off < st.size) {
		struct rc_extent ext[8];
		int n = rc_read(&c, (uint32_t)h, off, st.size - off, ext, 8);
		if (n <= 0) {
			h = n ? n : -EIO;
			break;
		}
		for (int i = 0; i < n; i++) {
			fwrite(ext[i].data, 1, ext[i].len, stdout);
			off += ext[i].len;
			rc_release(&c, ext[i].lease);
		}
	}
	if (h < 0)
		fprintf(stderr, "read: %s\n", strerror(-h));
	else
		rc_close(&c, (uint32_t)h);
	rc_detach(&c);
	return h < 0;
}
APP
if cc -o "$D/app" "$D/app.c" $(pkg-config --cflags --libs ringcache) \
		>"$D/cc.log" 2>&1; then
	pass "a C client compiles with pkg-config --cflags --libs ringcache"
	"$D/app" sample "$key" >"$D/app.out" 2>"$D/app.err"
	check "that client, run against the installed library, reads the bytes" \
		cmp -s "$D/expected" "$D/app.out"
else
	failt "a C client compiles with pkg-config (log: $D/cc.log)"
	cat "$D/cc.log" >&2
fi

(cd / && env -u PYTHONPATH -u RINGCACHE_LIB /usr/bin/python3 - sample "$key" \
	"$D/py.out" >"$D/py.log" 2>&1) <<'PY'
import sys, ringcache
with ringcache.Client() as c:
    with c.open(sys.argv[1], sys.argv[2]) as f:
        data = f.pread()
open(sys.argv[3], "wb").write(bytes(data))
print(ringcache.__file__)
PY
check "the installed Python package reads the bytes ($(tail -n 1 "$D/py.log"))" \
	cmp -s "$D/expected" "$D/py.out"
# The C extension is installed beside it and is what the package picks.
(cd / && env -u PYTHONPATH -u RINGCACHE_LIB -u RINGCACHE_BUILD_DIR \
	RINGCACHE_PY_BACKEND=native /usr/bin/python3 - sample "$key" \
	"$D/py-native.out" >"$D/py-native.log" 2>&1) <<'PY'
import sys, ringcache
with ringcache.Client() as c:
    [view] = c.read_many(sys.argv[1], [sys.argv[2]])
    open(sys.argv[3], "wb").write(view.tobytes())
    print(c.backend, ringcache._native_ext.__file__)
PY
check "the installed C extension reads the bytes ($(tail -n 1 "$D/py-native.log"))" \
	cmp -s "$D/expected" "$D/py-native.out"

kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID"
rc=$?
DAEMON_PID=
check "the installed ringcached stops on SIGTERM with status 0" test "$rc" = 0
finish
