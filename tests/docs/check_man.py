#!/usr/bin/env python3
"""check_man.py - the manual pages (docs/man) render cleanly and say what
the code does: every key the config parser accepts (the key tables of
src/common/config.c) has its entry in ringcache.conf(5), under its
section, and no entry names a key the parser lacks; every key is in
contrib/ringcache.conf too; every option of ringcached and ringcache
(their getopt_long tables) and every command of ringcache (cli.c's
dispatch) is in their page. Renders with groff -ww (all warnings) and,
where man-db is installed, `man --warnings -l` as Debian's lintian does.

usage: check_man.py SOURCE_DIR     (TAP on stdout and $RINGCACHE_TAP_FILE)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..')
MAN = os.path.join(SRC, 'docs', 'man')
PAGES = ['ringcached.8', 'ringcache.1', 'ringcache.conf.5']
results = []


def check(ok, name, why=''):
    results.append((bool(ok), name, why))
    print(('ok' if ok else 'not ok') + ' - ' + name + ('' if ok else ': ' + why))


def read(*path):
    with open(os.path.join(SRC, *path), encoding='utf-8') as f:
        return f.read()


def parser_keys():
    """{table: [keys]} from config.c's key_spec tables."""
    src = read('src', 'common', 'config.c')
    tables = {}
    for t in ('daemon_keys', 's3_keys', 'dataset_keys'):
        m = re.search(r'static const struct key_spec ' + t +
                      r'\[\] = \{(.*?)\n\t\{0\},', src, re.S)
        tables[t] = re.findall(r'\b(?:FN|U32|BOOL|STR)\("([a-z0-9_]+)"',
                               m.group(1)) if m else []
    return tables


def man_entries(text):
    """{section heading: [keys]}: the bold words of each .TP entry's first
    line before its "(default", in the page's [daemon], [s3] and
    [dataset NAME] sections."""
    entries, section, lines = {}, None, text.split('\n')
    for i, line in enumerate(lines):
        if line.startswith('.SH '):
            section = line[4:].strip().strip('"')
            entries.setdefault(section, [])
        elif line == '.TP' and section and i + 1 < len(lines):
            head = lines[i + 1]
            macro, _, rest = head.partition(' ')
            if macro not in ('.B', '.BR'):
                continue
            # .BR alternates bold and roman: the keys are the bold words
            # before the first "(" (".BR a ", " b " (default " 0 )").
            for n, a in enumerate(shlex.split(rest)):
                if '(' in a:
                    break
                if macro == '.B' or n % 2 == 0:
                    entries[section] += [k for k in re.split(r'[,\s]+', a)
                                         if k]
    return entries


def render(page):
    path = os.path.join(MAN, page)
    if not shutil.which('groff'):
        check(False, f'{page}: groff renders it',
              'groff missing (contrib/install-deps.sh: groff-base)')
        return
    r = subprocess.run(['groff', '-ww', '-z', '-man', path],
                       capture_output=True, text=True)
    check(r.returncode == 0 and not r.stderr.strip(),
          f'groff -ww -z -man {page} renders without a warning',
          r.stderr.strip()[:400])
    if shutil.which('man'):
        r = subprocess.run(['man', '--warnings', '-l', path],
                           capture_output=True, text=True,
                           env=dict(os.environ, MANWIDTH='80', LC_ALL='C.UTF-8'))
        check(r.returncode == 0 and not r.stderr.strip() and
              'NAME' in r.stdout,
              f'man --warnings -l {page} renders without a warning',
              r.stderr.strip()[:400])


def options(c_file):
    """The long options of a getopt_long table, and its short ones."""
    src = read(*c_file.split('/'))
    longs = re.findall(r'\{"([a-z-]+)", (?:no|required|optional)_argument',
                       src)
    return longs


def main():
    for p in PAGES:
        render(p)

    tables = parser_keys()
    for t, keys in tables.items():
        check(len(keys) >= 10, f'config.c {t}: the table parses '
              f'({len(keys)} keys)', 'the key table was not found: '
              'update parser_keys() to its new form')
    conf5 = man_entries(read('docs', 'man', 'ringcache.conf.5'))
    example = read('contrib', 'ringcache.conf')
    for t, section in (('daemon_keys', '[daemon]'), ('s3_keys', '[s3]'),
                       ('dataset_keys', '[dataset NAME]')):
        documented = conf5.get(section, [])
        missing = [k for k in tables[t] if k not in documented]
        check(tables[t] and not missing,
              f'ringcache.conf(5) {section} has an entry for each of the '
              f'{len(tables[t])} keys', 'no entry for ' + ', '.join(missing) +
              f': add a .TP entry under .SH {section} in '
              'docs/man/ringcache.conf.5')
        stale = [k for k in documented if k not in tables[t]]
        check(not stale, f'ringcache.conf(5) {section} names no key the '
              'parser lacks', 'not in config.c: ' + ', '.join(stale))
        missing = [k for k in tables[t]
                   if not re.search(r'(^|[\s;#,])' + k + r'\b', example, re.M)]
        check(not missing, f'contrib/ringcache.conf mentions each {section} '
              'key', 'missing: ' + ', '.join(missing))

    pages = {'ringcached.8': 'src/server/main.c',
             'ringcache.1': 'src/client/cli.c'}
    for page, c_file in pages.items():
        text = read('docs', 'man', page)
        longs = options(c_file)
        missing = [o for o in longs if '\\-\\-' + o.replace('-', '\\-')
                   not in text]
        check(longs and not missing, f'{page} describes the {len(longs)} '
              f'long options of {c_file}', 'missing: --' + ', --'.join(missing))
    cli = read('src', 'client', 'cli.c')
    commands = re.findall(r'strcmp\(cmd, "([a-z]+)"\) == 0', cli)
    ring1 = read('docs', 'man', 'ringcache.1')
    cmd_section = ring1.split('.SH COMMANDS', 1)[-1].split('\n.SH ', 1)[0]
    missing = [c for c in commands
               if not re.search(r'^\.(B|BR|BI) ' + c + r'\b', cmd_section, re.M)]
    check(len(commands) >= 5 and not missing,
          f'ringcache.1 COMMANDS has each of the {len(commands)} commands '
          'of cli.c', 'missing: ' + ', '.join(missing))

    tap = os.environ.get('RINGCACHE_TAP_FILE')
    if tap:
        os.makedirs(os.path.dirname(tap), exist_ok=True)
        with open(tap, 'w') as f:
            f.write(f'1..{len(results)}\n')
            for i, (ok, name, why) in enumerate(results, 1):
                f.write(f"{'ok' if ok else 'not ok'} {i} - {name}\n")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == '__main__':
    sys.exit(main())
