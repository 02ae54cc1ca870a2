#!/usr/bin/env bash
# bump-version.sh - moves the release version to NEW everywhere the tree
# writes it, so a release is one reviewed commit: meson.build's project
# version (the source of --version, the .pc, ringcache_build_info), a new
# debian/changelog entry, the Python package (__version__, the dist-info
# folder and its METADATA, their paths in meson.build and
# debian/python3-ringcache.install), the DaemonSet's image tag and the
# image commands (Dockerfile, README), and the docs naming the dist-info.
# Refuses, before any change, a version that is not X.Y.Z or not newer.
#
# usage: tools/bump-version.sh NEW "what changed (the changelog line)"
# then: review `git diff`, run the tests (test_install, kubernetes, man),
# commit "Release NEW", and tag it: git tag -a vNEW -m "ringcache NEW".
# tests/package/test_bump.sh runs it on a copy of the tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '/^# usage:/,/^# tests/p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -eq 2 ] && [ -n "$2" ] || { usage >&2; exit 2; }
new=$1 what=$2
old=$(sed -n "s/^  version : '\([^']*\)',$/\1/p" meson.build | head -n 1)
[ -n "$old" ] || { echo "bump-version: no version in meson.build's project()" >&2; exit 1; }
if ! [[ "$new" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "bump-version: '$new' is not MAJOR.MINOR.PATCH" >&2
	exit 2
fi
if ! dpkg --compare-versions "$new" gt "$old"; then
	echo "bump-version: $new is not newer than $old" >&2
	exit 1
fi
head -n 1 debian/changelog | grep -q "^ringcache ($old) " || {
	echo "bump-version: debian/changelog's newest entry is not $old: $(head -n 1 debian/changelog)" >&2
	exit 1
}

# Every file that writes the version, and the form it takes there (sed
# patterns: the old version is escaped, dots literal).
o=${old//./\\.}
edits=(
	"meson.build|s/^  version : '$o',$/  version : '$new',/"
	"meson.build|s#ringcache-$o\\.dist-info/#ringcache-$new.dist-info/#g"
	"contrib/python/ringcache/__init__.py|s/^__version__ = \"$o\"$/__version__ = \"$new\"/"
	"contrib/python/ringcache-$old.dist-info/METADATA|s/^Version: $o$/Version: $new/"
	"debian/python3-ringcache.install|s#ringcache-$o\\.dist-info#ringcache-$new.dist-info#"
	"contrib/kubernetes/ringcached-daemonset.yaml|s#image: ringcache:$o\$#image: ringcache:$new#"
	"contrib/kubernetes/Dockerfile|s#_${o}_#_${new}_#g; s#ringcache:$o #ringcache:$new #"
	"README.md|s#_${o}_#_${new}_#g; s#ringcache:$o #ringcache:$new #; s#ringcache-$o\\.dist-info#ringcache-$new.dist-info#"
	"docs/ARCHITECTURE.md|s#ringcache-$o\\.dist-info#ringcache-$new.dist-info#"
)
for e in "${edits[@]}"; do
	f=${e%%|*}
	[ -f "$f" ] || { echo "bump-version: $f is missing" >&2; exit 1; }
done
for e in "${edits[@]}"; do
	sed -i "${e#*|}" "${e%%|*}"
done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git mv "contrib/python/ringcache-$old.dist-info" "contrib/python/ringcache-$new.dist-info"
else
	mv "contrib/python/ringcache-$old.dist-info" "contrib/python/ringcache-$new.dist-info"
fi

# The changelog entry, signed as the newest one is.
trailer=$(grep -m1 '^ -- ' debian/changelog | sed 's/^ -- \(.*>\).*/\1/')
{
	printf 'ringcache (%s) unstable; urgency=medium\n\n' "$new"
	printf '%s\n' "$what" | fold -s -w 70 | sed '1s/^/  * /; 2,$s/^/    /; s/ *$//'
	printf '\n -- %s  %s\n\n' "$trailer" "$(date -R)"
	cat debian/changelog
} >debian/changelog.new
mv debian/changelog.new debian/changelog

# Nothing that names the release may still say the old one.
files=()
for e in "${edits[@]}"; do
	f=${e%%|*}
	files+=("${f/ringcache-$old.dist-info/ringcache-$new.dist-info}")
done
left=$(grep -n -F "$old" "${files[@]}" | grep -v "^debian/changelog:" || true)
if [ -n "$left" ]; then
	echo "bump-version: $old is still written here:" >&2
	echo "$left" >&2
	exit 1
fi
echo "bump-version: $old -> $new; review git diff, test, commit \"Release $new\", tag v$new"
