#!/usr/bin/env bash
# test_ckpt_compare.sh - perf/ckpt-compare, the checkpoint ratios' guard:
# from a ckpt.tsv as perf/run writes it (runs of each level and of the
# synchronous upload), medians and ratios, the verdict against a recorded
# baseline (a ratio worse by more than the margin is a REGRESSION, exit 3;
# noise within it is not), failed levels, and a baseline it records being
# read back. No daemon, no S3: the input files are written here.
#
# usage: test_ckpt_compare.sh. Writes TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CMP=$SRC/perf/ckpt-compare
# shellcheck source=../fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"
D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/ckpt-compare.XXXXXX")
trap 'rm -rf "$D"' EXIT

# row RUN LABEL BLOCKED_MAX TO_S3 [VERIFIED [ERROR]]
row() {
	printf '%s\t%s\t8\t536870912\t%s\t%s\t%s\t10.0\t%s\t%s\t%s\n' \
		"$1" "$2" "$3" "$3" "$4" "${5:-ok}" "$([ "${5:-ok}" = ok ] && echo 0 || echo 8)" "${6:--}"
}
# Three runs: sync uploads of 8, 10 (median) and 12 s; memory blocked
# 0.2, 0.3, 9.0 s (median 0.3: 0.03x); local blocked 1.0 s, to S3 8.5 s.
runs() {
	local mem=${1:-0.3} r
	for r in 1 2 3; do
		row $r direct $((6 + 2 * r)).0 $((6 + 2 * r)).0
		row $r first 0.5 9.0
	done
	row 1 memory 0.2 9.0; row 2 memory "$mem" 9.0; row 3 memory 9.0 9.0
	for r in 1 2 3; do row $r local 1.0 8.5; row $r s3 9.5 9.5; done
}
cat >"$D/base.tsv" <<-EOT
	# a comment line
	# recorded 2026-11-29T00:00Z, commit test, 2 CPUs, load 0.1 0.1 0.1
	size	measure	ratio
	quick	blocked_memory_sync	0.030
	quick	blocked_local_sync	0.100
	quick	blocked_first_sync	0.050
	quick	to_s3_local_sync	0.850
	full	blocked_memory_sync	0.001
EOT

runs 0.3 >"$D/same.tsv"
out=$("$CMP" "$D/base.tsv" "$D/same.tsv"); rc=$?
check "the recorded figures again: exit 0" [ $rc -eq 0 ]
check "medians over runs: memory 0.3 s / sync 10 s = 0.030" grep -q '| blocked(memory) / sync upload | 0.030 | 0.030 | 1.00x | within margin |' <<<"$out"
check "to S3(local) / sync: 8.5 / 10" grep -q '| to S3(local) / sync upload | 0.850 | 0.850 |' <<<"$out"
check "no REGRESSION line" bash -c '! grep -q REGRESSION <<<"$1"' _ "$out"
check "a level the baseline lacks is shown, not judged" grep -q 'blocked(s3) / sync upload | 0.950 | - | - | not recorded' <<<"$out"

runs 0.4 >"$D/noise.tsv" # 0.040: 1.33x, within the 1.5x margin
"$CMP" "$D/base.tsv" "$D/noise.tsv" >"$D/out"; rc=$?
check "1.33x worse is noise at the 1.5x margin: exit 0" [ $rc -eq 0 ]
"$CMP" --margin 1.2 "$D/base.tsv" "$D/noise.tsv" >"$D/out"; rc=$?
check "the same at --margin 1.2: exit 3" [ $rc -eq 3 ]

runs 1.8 >"$D/bad.tsv" # 0.180: 6x, the regression of issue 21
out=$("$CMP" "$D/base.tsv" "$D/bad.tsv"); rc=$?
check "6x worse: exit 3" [ $rc -eq 3 ]
check "6x worse: the loud line names the ratio and both figures" \
	grep -q '^\*\*CHECKPOINT REGRESSION: blocked(memory) / sync upload: 0.180, recorded 0.030 (6.00x)' <<<"$out"
check "6x worse: the table says REGRESSION on that row only" \
	[ "$(grep -c '| \*\*REGRESSION\*\* |' <<<"$out")" -eq 1 ]
out=$("$CMP" --size full "$D/base.tsv" "$D/same.tsv"); rc=$?
check "--size full compares the full rows only" [ $rc -eq 3 ]

{ runs 0.3 | grep -v '	local	'; for r in 1 2 3; do row $r local 0 0 FAIL "write at 0: over this user's limit"; done; } >"$D/fail.tsv"
out=$("$CMP" "$D/base.tsv" "$D/fail.tsv"); rc=$?
check "a level with no verified run: exit 3" [ $rc -eq 3 ]
check "a level with no verified run: said with its first error" \
	grep -q "CHECKPOINT REGRESSION: 'local': no run verified (first error: write at 0: over this user's limit)" <<<"$out"

out=$("$CMP" "$D/nonexistent.tsv" "$D/bad.tsv"); rc=$?
check "no baseline file: said, exit 0" bash -c '[ $1 -eq 0 ] && grep -q "no recorded figures" <<<"$2"' _ $rc "$out"
"$CMP" --record "$D/new.tsv" --commit abc1234 "$D/base.tsv" "$D/bad.tsv" >/dev/null
check "--record writes the run's ratios with the commit" \
	bash -c 'grep -q "commit abc1234" "$1" && grep -q "^quick	blocked_memory_sync	0.1800$" "$1"' _ "$D/new.tsv"
"$CMP" "$D/new.tsv" "$D/bad.tsv" >/dev/null; rc=$?
check "a recorded baseline reads back: the same run is not a regression" [ $rc -eq 0 ]
"$CMP" --margin 0.5 "$D/base.tsv" "$D/same.tsv" >/dev/null 2>&1; rc=$?
check "a margin below 1 is refused: exit 2" [ $rc -eq 2 ]
"$CMP" "$D/base.tsv" "$D/missing.tsv" >/dev/null 2>&1; rc=$?
check "an unreadable ckpt.tsv: exit 2" [ $rc -eq 2 ]
finish
