#!/usr/bin/env python3
"""check_dashboard.py - contrib/grafana/ringcache-dashboard.json is a
dashboard Grafana can import (JSON, panels with PromQL targets on the
$datasource variable) and every metric it queries is one ringcached
exports: declared in the sources (src/engine/metrics_table.h's X lines,
the names src/server/*.c emit), and, given a build, in the # TYPE lines of
a real ringcached's exposition (`ringcache stats --prometheus`; the
daemon needs no S3 for that). A histogram stands for its _bucket, _sum
and _count series.

usage: check_dashboard.py SOURCE_DIR [BUILD_DIR]
(TAP on stdout and $RINGCACHE_TAP_FILE)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

SRC = sys.argv[1]
BUILD = sys.argv[2] if len(sys.argv) > 2 else None
DASH = os.path.join(SRC, 'contrib', 'grafana', 'ringcache-dashboard.json')
results = []


def check(ok, name, why=''):
    results.append((bool(ok), name))
    print(('ok' if ok else 'not ok') + ' - ' + name + ('' if ok else ': ' + why))


def families(text):
    """{name: type} from Prometheus text's # TYPE lines."""
    return dict(re.findall(r'^# TYPE (\S+) (\S+)$', text, re.M))


def series_names(fams):
    names = set()
    for name, kind in fams.items():
        names.add(name)
        if kind == 'histogram':
            names |= {name + '_bucket', name + '_sum', name + '_count'}
    return names


def source_names():
    names = set()
    table = open(os.path.join(SRC, 'src', 'engine', 'metrics_table.h')).read()
    # X(field, type, "name", ...), lines continued with a backslash.
    names |= set(re.findall(r'X\(\w+,[\s\\]*\w+,[\s\\]*"(ringcache_\w+)"',
                            table))
    kinds = {}
    for f in sorted(os.listdir(os.path.join(SRC, 'src', 'server'))):
        if f.endswith('.c'):
            text = open(os.path.join(SRC, 'src', 'server', f)).read()
            names |= set(re.findall(r'"(ringcache_\w+)', text))
            # name[] = "ringcache_x"; head(o, name, "histogram", ...)
            for n in re.findall(r'"(ringcache_\w+)";\s*head\(\w+, \w+, '
                                r'"histogram"', text):
                kinds[n] = 'histogram'
    return series_names({n: kinds.get(n, 'x') for n in names})


def live_names():
    """The families a ringcached of BUILD exposes, started on a config
    with one dataset and an S3 endpoint nothing serves."""
    with tempfile.TemporaryDirectory(
            dir=os.environ.get('RINGCACHE_TEST_TMP')) as d:
        sock, conf = os.path.join(d, 'rc.sock'), os.path.join(d, 'rc.conf')
        with open(conf, 'w') as f:
            f.write(f'[daemon]\nsocket = {sock}\nmemory = 64M\n'
                    '[s3]\nendpoint = http://127.0.0.1:9\nregion = us-east-1\n'
                    'credentials = anonymous\n'
                    '[dataset ds]\nuri = s3://nothing/ds/\n')
        os.chmod(conf, 0o600)
        log = open(os.path.join(d, 'log'), 'w')
        daemon = subprocess.Popen([os.path.join(BUILD, 'ringcached'), '-c', conf],
                                  stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and daemon.poll() is None:
                r = subprocess.run([os.path.join(BUILD, 'ringcache'), '-s', sock,
                                    'stats', '--prometheus'],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    return families(r.stdout)
                time.sleep(0.1)
            return None
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)


def main():
    try:
        dash = json.load(open(DASH))
        check(True, 'the dashboard is JSON')
    except (OSError, ValueError) as e:
        check(False, 'the dashboard is JSON', str(e))
        return finish()
    panels = [p for p in dash.get('panels', []) if p.get('type') != 'row']
    targets = [t for p in panels for t in p.get('targets', [])]
    check(len(panels) >= 8 and all(p.get('targets') for p in panels),
          f'{len(panels)} panels, each with a query', 'a panel without targets')
    check(any(v.get('type') == 'datasource' and v.get('name') == 'datasource'
              for v in dash.get('templating', {}).get('list', [])) and
          all(p.get('datasource', {}).get('uid') == '${datasource}'
              for p in panels),
          'every panel queries the $datasource variable (importable anywhere)',
          'a panel names a fixed data source')
    ids = [p.get('id') for p in dash['panels']]
    check(len(ids) == len(set(ids)), 'panel ids are unique', str(ids))
    used = set()
    for t in targets:
        used |= set(re.findall(r'\bringcache_[a-z0-9_]+', t.get('expr', '')))
    for v in dash.get('templating', {}).get('list', []):
        used |= set(re.findall(r'\bringcache_[a-z0-9_]+', str(v.get('query', ''))))
    # What the issue asks the dashboard to show.
    for needed in ('ringcache_read_wait_seconds_bucket', 'ringcache_cache_hits_total',
                   'ringcache_s3_bytes_total', 'ringcache_s3_slowdowns_total',
                   'ringcache_writeback_backlog_bytes'):
        check(needed in used, f'the dashboard shows {needed}')
    src = source_names()
    check(len(src) > 40, f'the sources declare {len(src)} series names',
          'metrics_table.h / src/server/*.c not parsed: update source_names()')
    missing = sorted(used - src)
    check(not missing, f'each of the {len(used)} metrics the dashboard '
          'queries is declared in the sources', 'unknown: ' + ', '.join(missing))
    if BUILD:
        fams = live_names()
        if fams is None:
            check(False, 'a ringcached of the build serves stats --prometheus')
        else:
            live = series_names(fams)
            missing = sorted(used - live)
            check(not missing, f'each of them is in a real ringcached\'s '
                  f'exposition ({len(fams)} families)',
                  'not exported: ' + ', '.join(missing))
    return finish()


def finish():
    tap = os.environ.get('RINGCACHE_TAP_FILE')
    if tap:
        os.makedirs(os.path.dirname(tap), exist_ok=True)
        with open(tap, 'w') as f:
            f.write(f'1..{len(results)}\n')
            for i, (ok, name) in enumerate(results, 1):
                f.write(f"{'ok' if ok else 'not ok'} {i} - {name}\n")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == '__main__':
    sys.exit(main())
