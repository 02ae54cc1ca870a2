#!/usr/bin/env bash
# test_completion.sh - contrib/bash-completion/ringcache, sourced into a
# plain bash (no bash-completion package) and driven as readline would:
# COMP_WORDS/COMP_CWORD set, _ringcache called, COMPREPLY compared.
# Without a daemon: the commands (those of cli.c's dispatch), global and
# command options, nothing and no noise where a daemon would be asked.
# With a ringcached of this build: dataset names from its config, through
# -s SOCKET; with the suite's S3 (RINGCACHE_TEST_S3_*, _PREFIX with the
# sample dataset), keys level by level, as awscli lists them.
#
# usage: test_completion.sh BUILD_DIR. Writes TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:?usage: test_completion.sh BUILD_DIR}" && pwd)
TAP=${RINGCACHE_TAP_FILE:-/dev/null}
tap=()
pass() { tap+=("ok $(( ${#tap[@]} + 1 )) - $1"); echo "ok - $1"; }
failt() { tap+=("not ok $(( ${#tap[@]} + 1 )) - $1"); echo "not ok - $1" >&2; }
skip() { tap+=("ok $(( ${#tap[@]} + 1 )) # SKIP $1"); echo "skip - $1"; }
finish() {
	mkdir -p "$(dirname "$TAP")"
	{ echo "1..${#tap[@]}"; printf '%s\n' "${tap[@]}"; } >"$TAP"
	printf '%s\n' "${tap[@]}" | grep -q '^not ok' && exit 1
	exit 0
}

D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/completion.XXXXXX")
DAEMON_PID=
cleanup() {
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID"
		wait "$DAEMON_PID" 2>/dev/null
	fi
	rm -rf "$D"
}
trap cleanup EXIT

CLI=$BUILD/ringcache
# shellcheck source=../../contrib/bash-completion/ringcache
. "$SRC/contrib/bash-completion/ringcache"
if [ "$(complete -p ringcache 2>/dev/null)" = "complete -F _ringcache ringcache" ]; then
	pass "sourcing it registers _ringcache for ringcache"
else
	failt "sourcing it registers _ringcache for ringcache: $(complete -p ringcache 2>&1)"
fi

# complete WORD... : the sorted completions of the last word (the line
# as typed so far), stderr kept apart: completion must never print.
complete_line() {
	COMP_WORDS=("$CLI" "$@")
	COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
	COMPREPLY=()
	_ringcache 2>>"$D/stderr"
	printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}
expect() { # expect "WANT" WORD...
	local want=$1; shift
	local got
	got=$(complete_line "$@")
	if [ "$got" = "$want" ]; then
		pass "ringcache $* <TAB> gives '$want'"
	else
		failt "ringcache $* <TAB> gives '$want', got '$got'"
	fi
}

export RINGCACHE_SOCKET=$D/nobody-listens.sock
commands=$(grep -o 'strcmp(cmd, "[a-z]*") == 0' "$SRC/src/client/cli.c" |
	sed 's/.*"\(.*\)".*/\1/' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')
expect "$commands" ''
expect "stats status" st
expect "sync" -s /x sy
expect "sync" --socket=/x sy
expect "--version" --v
expect "--prometheus" stats --p
expect "-d -f -h -o" mount -
expect "allow_other" mount -o al
expect "" ls ''
expect "" cat sample ''
if [ -s "$D/stderr" ]; then
	failt "completion printed nothing to stderr without a daemon: $(head -c 300 "$D/stderr")"
else
	pass "completion printed nothing to stderr without a daemon"
fi

# A daemon of this build with two datasets; on the suite's S3 when there
# is one (the sample dataset, for keys), else on an address nothing
# serves (names need no S3).
SOCK=$D/ringcache.sock
CONF=$D/ringcache.conf
if [ -n "${RINGCACHE_TEST_S3_ENDPOINT:-}" ] && [ -n "${RINGCACHE_TEST_PREFIX:-}" ]; then
	have_s3=1
	endpoint=$RINGCACHE_TEST_S3_ENDPOINT region=$RINGCACHE_TEST_S3_REGION
	ak=$RINGCACHE_TEST_S3_ACCESS_KEY sk=$RINGCACHE_TEST_S3_SECRET_KEY
	bucket=$RINGCACHE_TEST_S3_BUCKET prefix=${RINGCACHE_TEST_PREFIX}ds/
else
	have_s3=
	endpoint=http://127.0.0.1:9 region=us-east-1 ak=AKIDEXAMPLE sk=NOSECRET
	bucket=nothing prefix=ds/
fi
cat >"$CONF" <<CONF
[daemon]
socket = $SOCK
memory = 64M
[s3]
endpoint = $endpoint
region = $region
addressing = path
tls_verify = false
credentials = config
access_key = $ak
secret_key = $sk
[dataset sample]
uri = s3://$bucket/$prefix
[dataset sandbox.2]
uri = s3://$bucket/${prefix}other/
CONF
chmod 600 "$CONF"
"$BUILD/ringcached" -c "$CONF" >"$D/ringcached.log" 2>&1 &
DAEMON_PID=$!
up=
for _ in $(seq 300); do
	"$CLI" -s "$SOCK" status >/dev/null 2>&1 && { up=1; break; }
	kill -0 "$DAEMON_PID" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$up" ]; then
	failt "ringcached starts for the daemon half: $(tail -n 5 "$D/ringcached.log")"
	finish
fi
expect "sample sandbox.2" -s "$SOCK" ls ''
expect "sandbox.2" -s "$SOCK" prefetch sand
expect "sample sandbox.2" --socket="$SOCK" mount -f ''
RINGCACHE_SOCKET=$SOCK expect "sample" cat samp

if [ -z "$have_s3" ]; then
	skip "keys: no S3 (RINGCACHE_TEST_S3_*: run it through tests/run)"
	finish
fi
# Keys one level at a time, as awscli lists the same prefix.
aws_level() { # aws_level PREFIX: what awscli lists there, as full keys
	local dir=${1%"${1##*/}"} # up to its last '/'
	AWS_ACCESS_KEY_ID=$ak AWS_SECRET_ACCESS_KEY=$sk AWS_DEFAULT_REGION=$region \
	AWS_EC2_METADATA_DISABLED=true timeout 60 aws --endpoint-url "$endpoint" \
		s3 ls "s3://$bucket/$prefix$1" 2>/dev/null |
		awk -v d="$dir" '{ print d $NF }' | LC_ALL=C sort | tr '\n' ' ' |
		sed 's/ $//'
}
top=$(aws_level '')
expect "$top" -s "$SOCK" ls sample ''
want=$(aws_level small/0000)
if [ -n "$want" ]; then
	expect "$want" -s "$SOCK" cat sample small/0000
else
	failt "awscli lists small/0000* of the sample dataset (is it uploaded?)"
fi
finish
