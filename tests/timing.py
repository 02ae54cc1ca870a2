#!/usr/bin/env python3
"""tests/timing.py - where a tests/run run's time went, printed before its
summary: per build the time to build and to test, per meson suite the sum
of its tests' durations, the ten slowest meson tests and the ten slowest
Criterion tests over every build. It reads what the run leaves behind
(BUILD/meson-logs/testlog.json, BUILD/tests/tap/*.tap); it never decides a
verdict, so a build that left nothing behind is shown without tests.

usage: tests/timing.py TOTAL_S BUSY BUILD:LABEL:BUILD_S:TEST_S...
"""
import glob
import json
import os
import re
import sys

# Criterion's TAP line for a test: "ok - suite::name  (12.34s)"
TAP_TIME = re.compile(r"^(?:not )?ok\b.*? - (\S+::\S+).*\((\d+(?:\.\d+)?)s\)")


def dur(s):
    """Seconds as 1h 2m 3s / 2m 3s / 3.4s, for a reader, not a parser."""
    s = float(s)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m}m {sec}s" if h else f"{m}m {sec}s"


def meson_tests(build):
    """(suite, name, seconds, result) per test in the build's testlog.json."""
    path = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.isfile(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            # "ringcache:unit / journal" -> suite "unit", name "journal"
            head, _, name = t["name"].rpartition(" / ")
            suite = head.rpartition(":")[2] or "-"
            out.append((suite, name.strip(), float(t.get("duration") or 0),
                        t.get("result", "?")))
    return out


def criterion_tests(build):
    """(binary, test, seconds) per timed line in the build's TAP files."""
    out = []
    for tap in sorted(glob.glob(os.path.join(build, "tests", "tap", "*.tap"))):
        binary = os.path.basename(tap)[:-4]
        with open(tap, errors="replace") as f:
            for line in f:
                m = TAP_TIME.match(line)
                if m:
                    out.append((binary, m.group(1), float(m.group(2))))
    return out


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    total, busy = float(argv[1]), int(argv[2])
    head = f"== timing: {dur(total)} in all"
    if busy:
        head += f", {busy} CPU-bound process{'es' if busy != 1 else ''} beside the tests"
    print(head)
    slow_meson, slow_criterion = [], []
    for spec in argv[3:]:
        build, label, build_s, test_s = spec.split(":")
        tests = meson_tests(build)
        what = "fuzzed" if build == "build-fuzz" else "tested"
        print(f"  {build:<11} built in {dur(build_s)}, {what} in {dur(test_s)}")
        suites = {}
        for suite, name, secs, result in tests:
            n, s = suites.get(suite, (0, 0.0))
            suites[suite] = (n + 1, s + secs)
            slow_meson.append((secs, label + name, result))
        for suite, (n, secs) in sorted(suites.items(), key=lambda kv: -kv[1][1]):
            print(f"    {suite:<12} {dur(secs):>9}  {n} test{'s' if n != 1 else ''}")
        for binary, test, secs in criterion_tests(build):
            slow_criterion.append((secs, f"{label}{binary}: {test}"))
    if slow_meson:
        print("  slowest meson tests:")
        for secs, name, result in sorted(slow_meson, reverse=True)[:10]:
            note = "" if result in ("OK", "SKIP") else f"  ({result})"
            print(f"    {dur(secs):>9}  {name}{note}")
    if slow_criterion:
        print("  slowest Criterion tests:")
        for secs, name in sorted(slow_criterion, reverse=True)[:10]:
            print(f"    {dur(secs):>9}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
