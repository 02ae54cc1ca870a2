"""tapreport.py - the verdict of the tree checks in tools/ (layers.py,
archmap.py, blocking.py): one TAP line per rule on stdout, each failure on stderr
prefixed with the tool's name, and the TAP lines also into
RINGCACHE_TAP_FILE when it is set (tests/run counts them)."""
import os
import sys


def report(tool, results):
    """results: [(rule, [failure, ...]), ...]. Returns the exit status:
    0 when no rule failed."""
    tap, failed = [f"1..{len(results)}"], 0
    for i, (name, errs) in enumerate(results, 1):
        tap.append(f"{'not ok' if errs else 'ok'} {i} - {name}")
        for e in errs:
            print(f"{tool}: {name}: {e}", file=sys.stderr)
        failed += bool(errs)
    print("\n".join(tap))
    if os.environ.get("RINGCACHE_TAP_FILE"):
        with open(os.environ["RINGCACHE_TAP_FILE"], "w") as f:
            f.write("\n".join(tap) + "\n")
    return 1 if failed else 0
