#!/usr/bin/env bash
# test_install.sh - the README's `meson install` as a new user runs it,
# into a staging folder (DESTDIR) from the build under test: every file
# the README's install table names is where it says, the Python package
# lands in a folder Debian's /usr/bin/python3 searches (its own sys.path,
# not PYTHONPATH) and imports from there with the fsspec protocol
# registered, and every binary, the package, the .pc file, the
# dist-info and debian/changelog name the same version. And the rest of
# the README's install section: the unit's paths, the docs, the example
# configs accepted by the installed daemon, man and the completion
# finding their files, and a client compiled with pkg-config against
# the installed and the uninstalled library.
#
# usage: test_install.sh BUILD_DIR (meson's test `install` passes it).
# Writes TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:?usage: test_install.sh BUILD_DIR}" && pwd)
# shellcheck source=tests/fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"

STAGE=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/install.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
if ! meson install -C "$BUILD" --no-rebuild --destdir "$STAGE" \
		>"$STAGE.log" 2>&1; then
	failt "meson install --destdir: $(tail -n 5 "$STAGE.log")"
	finish
fi
rm -f "$STAGE.log"
pass "meson install --destdir"

version=$(meson introspect --projectinfo "$BUILD" |
	/usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
prefix=$(meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
P=$STAGE$prefix

for f in sbin/ringcached bin/ringcache include/ringcache.h \
		"$libdir/pkgconfig/ringcache.pc" share/doc/ringcache/README.md \
		share/doc/ringcache/examples/ringcache.conf \
		share/doc/ringcache/examples/train.py \
		share/man/man8/ringcached.8 share/man/man1/ringcache.1 \
		share/man/man5/ringcache.conf.5 \
		share/bash-completion/completions/ringcache; do
	check "installed: PREFIX/$f" test -e "$P/$f"
done
check "installed: PREFIX/$libdir/libringcache.so.1" \
	test -e "$P/$libdir/libringcache.so.1"

# shmem THP `advise` where systemd-tmpfiles reads it (PREFIX/lib/
# tmpfiles.d: /usr/lib and /usr/local/lib both are), one `w` line, and
# the unit applies it before the daemon starts.
tmpf=$P/lib/tmpfiles.d/ringcached-hugepages.conf
check "installed: PREFIX/lib/tmpfiles.d/ringcached-hugepages.conf sets shmem THP to advise" \
	test "$(grep -v '^#' "$tmpf" 2>/dev/null | grep -v '^$')" = \
	"w /sys/kernel/mm/transparent_hugepage/shmem_enabled - - - - advise"
# systemd-tmpfiles itself applies it, and an empty /etc/tmpfiles.d file
# of the same name (the documented opt-out) masks it: both under a fake
# root (--root), never the machine's /sys.
if command -v systemd-tmpfiles >/dev/null; then
	R=$STAGE/fake-root
	knob=$R/sys/kernel/mm/transparent_hugepage/shmem_enabled
	mkdir -p "${knob%/*}" "$R/usr/lib/tmpfiles.d" "$R/etc/tmpfiles.d"
	cp "$tmpf" "$R/usr/lib/tmpfiles.d/"
	printf 'never\n' >"$knob"
	systemd-tmpfiles --root="$R" --create ringcached-hugepages.conf
	check "systemd-tmpfiles --create ringcached-hugepages.conf writes advise (fake root)" \
		test "$(cat "$knob")" = advise
	printf 'never\n' >"$knob"
	: >"$R/etc/tmpfiles.d/ringcached-hugepages.conf"
	systemd-tmpfiles --root="$R" --create ringcached-hugepages.conf
	check "an empty /etc/tmpfiles.d/ringcached-hugepages.conf opts out (fake root)" \
		test "$(cat "$knob")" = never
else
	pass "# SKIP systemd-tmpfiles not installed: the line is not applied here"
fi
unitdir=$(meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
v = next(o["value"] for o in json.load(sys.stdin) if o["name"] == "systemdunitdir")
print(v or "")')
check "the unit applies it: ExecStartPre=-+/usr/bin/systemd-tmpfiles --create ringcached-hugepages.conf" \
	grep -qx 'ExecStartPre=-+/usr/bin/systemd-tmpfiles --create ringcached-hugepages.conf' \
	"$STAGE${unitdir:-$prefix/lib/systemd/system}/ringcached.service"

# The Slurm scripts, executable, and the binaries they default to are
# this prefix's (the sources say /usr/sbin and /usr/bin).
libexecdir=$(meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libexecdir"))')
slurm=$P/$libexecdir/ringcache/slurm
for f in prolog.sh epilog.sh ringcache-slurm hyperpod-lifecycle.sh; do
	check "installed, executable: PREFIX/$libexecdir/ringcache/slurm/$f" \
		test -x "$slurm/$f"
done
paths=$(cat "$slurm/ringcache-slurm" "$slurm/hyperpod-lifecycle.sh" 2>/dev/null |
	grep -oP '(?:/[\w.-]+)*/s?bin/ringcached?(?![\w./-])|RINGCACHE_BIN:-[^}]*' |
	sed 's/^RINGCACHE_BIN:-\(.*\)/\1\/ringcached/' | sort -u)
bad=
for p in $paths; do
	[ -x "$STAGE$p" ] || bad="$bad $p"
done
check "the Slurm scripts' ringcached and ringcache ($(echo $paths)) are this install's" \
	test -n "$paths" -a -z "$bad"

# The package's folder, as the interpreter sees it after the install
# (without DESTDIR), must be one of the interpreter's own.
pkg=$(find "$STAGE" -path '*/ringcache/__init__.py' -printf '%h\n' | head -n 1)
site=${pkg%/ringcache}
site=${site#"$STAGE"}
if [ -n "$pkg" ] && /usr/bin/python3 -c '
import sys
sys.exit(0 if sys.argv[1] in sys.path else 1)' "$site"; then
	pass "the Python package is in $site, on /usr/bin/python3's path"
else
	failt "the Python package is in '${site:-nowhere}', not on /usr/bin/python3's path ($(/usr/bin/python3 -c 'import sys; print(sys.path)'))"
fi

# Import it from there, through the interpreter's own path with the
# staging folder in front of each entry (what the install will be), the
# library found where it was installed.
py_staged() {
	LD_LIBRARY_PATH=$P/$libdir RINGCACHE_BUILD_DIR=/nonexistent \
	/usr/bin/python3 -I -c '
import sys
stage = sys.argv[1]
sys.path[:0] = [stage + p for p in sys.path if p.startswith("/")]
exec(sys.argv[2])' "$STAGE" "$1"
}
got=$(cd / && py_staged '
import ringcache, os
assert ringcache.__file__.startswith(stage), ringcache.__file__
print(ringcache.__version__)')
check "import ringcache from the staged site folder: __version__ $got" \
	test "$got" = "$version"
if ls "$BUILD"/contrib/python/ringcache/_native*.so >/dev/null 2>&1; then
	check "the C extension is installed beside the package" \
		py_staged 'import ringcache._native as n; assert n.__file__.startswith(stage), n.__file__'
fi
check "fsspec finds the ringcache:// protocol through the dist-info" \
	py_staged '
import importlib.metadata as md
eps = md.entry_points(group="fsspec.specs")
assert any(e.name == "ringcache" for e in eps), list(eps)
import fsspec
cls = fsspec.get_filesystem_class("ringcache")
assert cls.__module__.startswith("ringcache"), cls'

export LD_LIBRARY_PATH=$P/$libdir
for bin in sbin/ringcached bin/ringcache; do
	out=$("$P/$bin" --version 2>&1)
	check "$bin --version names $version and its commit: $out" \
		grep -qE "^ringcached? $version \(commit [0-9a-f]{7,}|^ringcached? $version \(commit unknown" <<<"$out"
done
check ".pc says Version: $version" \
	grep -qx "Version: $version" "$P/$libdir/pkgconfig/ringcache.pc"
check "the dist-info is ringcache-$version.dist-info" \
	test -d "$STAGE$site/ringcache-$version.dist-info"
check "the dist-info's METADATA says Version: $version" \
	grep -qx "Version: $version" "$STAGE$site/ringcache-$version.dist-info/METADATA"
check "debian/changelog's newest entry is $version" \
	grep -q "^ringcache ($version)" <(head -n 1 "$SRC/debian/changelog")

# The rest of the README's install section, on the staged files.
unitdir=$(meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "systemdunitdir") or "")')
unit=$STAGE${unitdir:-$prefix/lib/systemd/system}/ringcached.service
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" 2>/dev/null)
check "the unit's ExecStart is this prefix's daemon ($exec_start)" \
	test "$exec_start" = "$prefix/sbin/ringcached" -a -x "$STAGE$exec_start"
doc=$(sed -n 's#^Documentation=file://\([^ ]*\).*#\1#p' "$unit" 2>/dev/null)
check "the unit's Documentation= ($doc) is installed" test -f "$STAGE$doc"
for f in ARCHITECTURE.md MOUNT.md SECURITY.md ERRORS.md RESTART.md \
		examples/ringcache-dashboard.json; do
	check "installed: PREFIX/share/doc/ringcache/$f" \
		test -f "$P/share/doc/ringcache/$f"
done
# "copy one to /etc/ringcache/ringcache.conf": each example is a config
# the installed daemon accepts as shipped.
for ex in "$P"/share/doc/ringcache/examples/*.conf; do
	out=$("$P/sbin/ringcached" --check-config "$ex" --offline 2>&1)
	rc=$?
	check "ringcached --check-config --offline accepts examples/${ex##*/}" \
		test "$rc" = 0
	[ "$rc" = 0 ] || echo "$out" >&2
done
check "man finds ringcache.conf(5) where it was installed" \
	env MANPATH="$P/share/man" man -w ringcache.conf
check "the installed completion, sourced, completes ringcache" \
	bash -c '. "$1" && complete -p ringcache' _ \
	"$P/share/bash-completion/completions/ringcache"
# Compile against the library with pkg-config: installed (the staged
# .pc through pkgconf's sysroot) and uninstalled (build/meson-uninstalled).
cat >"$STAGE/app.c" <<'APP'
#include <ringcache.h>
#include <stdio.h>
int main(void)
{
	struct rc_client c;
	int err = rc_attach(&c, "/nonexistent/ringcache.sock", NULL);
	printf("%s\n", err ? rc_strerror(err) : "attached");
	return err == 0;
}
APP
for how in installed uninstalled; do
	if [ "$how" = installed ]; then
		pc=(env PKG_CONFIG_SYSROOT_DIR="$STAGE" PKG_CONFIG_LIBDIR="$P/$libdir/pkgconfig" pkg-config)
		lib=$P/$libdir
	else
		pc=(env PKG_CONFIG_PATH="$BUILD/meson-uninstalled" pkg-config)
		lib=$BUILD
	fi
	flags=$("${pc[@]}" --cflags --libs ringcache 2>&1)
	rm -f "$STAGE/a.out"
	cc -o "$STAGE/a.out" "$STAGE/app.c" $flags >"$STAGE/cc.log" 2>&1
	out=$(LD_LIBRARY_PATH=$lib "$STAGE/a.out" 2>&1)
	check "cc app.c \$(pkg-config --cflags --libs ringcache), $how: runs ($out)" \
		test -x "$STAGE/a.out" -a -n "$out" -a "$out" != attached
	[ -x "$STAGE/a.out" ] || cat "$STAGE/cc.log" >&2
done
finish
