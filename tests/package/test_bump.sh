#!/usr/bin/env bash
# test_bump.sh - tools/bump-version.sh on a copy of the tree (the files a
# clean clone has, in a git repository of their own): a bad or older
# version is refused with nothing changed; a newer one moves every place
# that names the release, agreeing with meson.build the way the install
# and kubernetes tests compare them (debian/changelog, which
# dpkg-parsechangelog must still read, __version__, the dist-info folder
# and METADATA, the install paths, the DaemonSet's image tag), with no
# mention of the old version left in those files.
# Writes TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"

T=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/bump.XXXXXX")
trap 'rm -rf "$T"' EXIT
(cd "$SRC" && git ls-files -co --exclude-standard -z |
	xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$T"
cd "$T" || exit 1
git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm tree ||
	{ failt "a git copy of the tree"; finish; }
old=$(meson introspect --projectinfo meson.build | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
new=$(/usr/bin/python3 -c 'import sys; a = sys.argv[1].split("."); print(a[0], int(a[1]) + 1, 0, sep=".")' "$old")

for bad in "1.2" "v$new" "$old"; do
	out=$(tools/bump-version.sh "$bad" "x" 2>&1)
	rc=$?
	check "bump-version.sh $bad is refused, nothing changed (exit $rc: $out)" \
		test "$rc" != 0 -a -z "$(git status --porcelain)"
done

out=$(tools/bump-version.sh "$new" "A release for the test: every place that names the version moves with it, the changelog line folded as Debian writes it." 2>&1)
check "bump-version.sh $new (from $old): $(tail -n 1 <<<"$out")" test $? = 0
got=$(meson introspect --projectinfo meson.build | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
check "meson.build's project version is $new ($got)" test "$got" = "$new"
got=$(dpkg-parsechangelog -S Version 2>&1)
check "dpkg-parsechangelog reads the new entry: $got" test "$got" = "$new"
check "the old entry follows it" \
	test "$(dpkg-parsechangelog -S Version --offset 1 --count 1 2>&1)" = "$old"
got=$(cd contrib/python && /usr/bin/python3 -c 'import ast, sys
for n in ast.parse(open("ringcache/__init__.py").read()).body:
    if isinstance(n, ast.Assign) and n.targets[0].id == "__version__":
        print(n.value.value)' 2>&1)
check "ringcache.__version__ is $new ($got)" test "$got" = "$new"
check "the dist-info is ringcache-$new.dist-info, METADATA Version: $new" \
	grep -qx "Version: $new" "contrib/python/ringcache-$new.dist-info/METADATA"
check "meson.build installs that dist-info" \
	grep -q "contrib/python/ringcache-$new.dist-info/METADATA" meson.build
check "debian/python3-ringcache.install names it" \
	grep -q "ringcache-$new.dist-info" debian/python3-ringcache.install
check "the DaemonSet's image is ringcache:$new" \
	grep -q "image: ringcache:$new\$" contrib/kubernetes/ringcached-daemonset.yaml
left=$(git grep -n -F "$old" -- . ':!debian/changelog' ':!perf' | grep -v -E '[0-9]\.'"${old//./\\.}"'|'"${old//./\\.}"'\.[0-9]' || true)
check "no file but the changelog's history and perf/ names $old${left:+ ($left)}" \
	test -z "$left"
finish
