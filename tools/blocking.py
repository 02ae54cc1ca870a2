#!/usr/bin/env python3
"""blocking.py - checks that no blocking call is reachable from a reactor.

A shard's reactor thread runs the shard loop and every callback the code
registers (rc_ev handlers, reactor timers, curl and upload completions,
fetch_ops, the done half of a worker job). None of them may wait for S3
or the disk: one slow request would stall every client of the shard.
This is a grep-level call graph of src/ (no preprocessor, no types):

  - a function's edges are the functions it names, called or not: a
    callback registered by name counts as reachable from its registrar
    (over-approximate: a name taken is a call that may happen);
  - except the names handed to another thread: the run half of
    workers_submit(pool, RUN, done, arg), pthread_create's start
    routine, and an upload's read_slow source (upload.h: the engine
    calls it only on the driver's hash workers);
  - the roots: shard_loop and every function whose name is taken (a
    callback) outside a thread hand-off, in a function or in a
    file-scope initializer (an ops table such as fetch_ops);
  - the sinks: the blocking calls below.

It prints each sink reachable from a root with one path. tools/
blocking.allow lists the known ones ("CALLER SINK  # why"): a new one
fails, and so does a listed one that is gone.

usage: tools/blocking.py [SOURCE_ROOT]; exit 0 when clean. With
RINGCACHE_TAP_FILE set, writes one TAP line per rule."""
import os
import re
import sys

from tapreport import report

LAYERS = ["common", "s3", "store", "engine", "server"]
SINKS = {
    "s3_perform": "a blocking S3 request with backoff sleeps",
    "curl_easy_perform": "a blocking HTTP transfer",
    "upload_run": "a blocking upload",
    "upload_copy_run": "a blocking copy",
    "upload_rename_completed": "a blocking rename",
    "upload_cleanup_abandoned": "blocking listings and aborts",
    "sleep_ms": "a sleep", "usleep": "a sleep", "nanosleep": "a sleep",
    "sleep": "a sleep",
    "fsync": "a disk sync", "fdatasync": "a disk sync",
    "pread": "a disk read", "pwrite": "a disk write",
    "curl_multi_poll": "a wait",
}
ROOTS = {"shard_loop"}
HANDOFF = [(re.compile(r"\bworkers_submit\s*\(\s*[^,]+,\s*(\w+)"), 1),
           (re.compile(r"\bpthread_create\s*\(\s*[^,]+,\s*[^,]+,\s*(\w+)"), 1),
           (re.compile(r"\.read_slow\s*=\s*(\w+)"), 1)]
# A name in a file-scope initializer: "= NAME," or "= &NAME}".
TABLE_ENTRY = re.compile(r"=\s*&?\s*(\w+)\s*[,}]")
DEF = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w \t\*]*?"
                 r"\b(\w+)\s*\(([^;{}]*)\)\s*\{", re.M)
IDENT = re.compile(r"(\.|->)?\s*\b([A-Za-z_]\w*)\b(\s*\()?")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do",
            "else", "case", "goto", "break", "continue"}


def strip(text):
    """Comments and string/char literals out, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """name -> body of each function defined in path, and the text
    outside them (declarations and file-scope initializers)."""
    with open(path, encoding="utf-8") as f:
        text = strip(f.read())
    text = re.sub(r"^\s*#.*(?:\\\n.*)*", "", text, flags=re.M)
    out, outside, pos = {}, [], 0
    for m in DEF.finditer(text):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        params = set(re.findall(r"(\w+)\s*(?:\[[^]]*\]\s*)?(?:,|$)",
                                m.group(2).strip()))
        params |= set(re.findall(r"\(\s*\*\s*(\w+)\s*\)", m.group(2)))
        out[name] = (text[m.end():i], params)
        outside.append(text[pos:m.start()])
        pos = i
    outside.append(text[pos:])
    return out, "".join(outside)


def graph(root):
    defs = {}   # (file, name) -> body
    tables = {}  # file -> its text outside functions
    for layer in LAYERS:
        d = os.path.join(root, "src", layer)
        for fn in sorted(os.listdir(d)):
            if fn.endswith((".c", ".h")):
                fns, tables[f"{layer}/{fn}"] = \
                    functions(os.path.join(d, fn))
                for name, body in fns.items():
                    defs[(f"{layer}/{fn}", name)] = body
    by_name = {}
    for (f, name) in defs:
        by_name.setdefault(name, []).append(f)

    def resolve(f, name):
        files = by_name.get(name)
        if not files:
            return None
        return (f, name) if f in files else (files[0], name)

    edges, roots = {}, set()
    for (f, name), (body, params) in defs.items():
        handed = {m.group(g) for rx, g in HANDOFF for m in rx.finditer(body)}
        out = set()
        for m in IDENT.finditer(body):
            member, ident, called = m.group(1), m.group(2), bool(m.group(3))
            if member or ident in KEYWORDS or ident in handed or \
                    ident in params:
                continue
            if ident in SINKS and called:
                out.add(("sink", ident))
                continue
            node = resolve(f, ident)
            if node and node != (f, name):
                out.add(node)
                if not called:
                    roots.add(node)
        edges[(f, name)] = out
    for f, text in tables.items():
        for m in TABLE_ENTRY.finditer(text):
            node = resolve(f, m.group(1))
            if node:
                roots.add(node)
    for (f, name) in defs:
        if name in ROOTS:
            roots.add((f, name))
    return edges, roots


def reachable_sinks(edges, roots):
    """(caller, sink) -> a path from a root, breadth first."""
    found, seen, queue = {}, set(roots), [(r, [r]) for r in sorted(roots)]
    while queue:
        node, path = queue.pop(0)
        for nxt in sorted(edges.get(node, ())):
            if nxt[0] == "sink":
                key = (node[1], nxt[1])
                found.setdefault(key, path)
            elif nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, path + [nxt]))
    return found


def load_allow(root):
    allow = set()
    path = os.path.join(root, "tools", "blocking.allow")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if len(words) == 2:
                    allow.add(tuple(words))
                elif words:
                    sys.exit(f"blocking.allow: cannot read: {line.strip()}")
    return allow


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    edges, roots = graph(root)
    found = reachable_sinks(edges, roots)
    allow = load_allow(root)
    new = []
    for (caller, sink), path in sorted(found.items()):
        if (caller, sink) in allow:
            continue
        chain = " -> ".join(f"{n}" for _, n in path)
        new.append(f"{caller} calls {sink} ({SINKS[sink]}), reached as "
                   f"{chain}")
    gone = [f"{c} {s}: gone, remove it from tools/blocking.allow"
            for c, s in sorted(allow) if (c, s) not in found]
    results = [("no blocking call reachable from a reactor callback "
                "(known ones in tools/blocking.allow)", new),
               ("tools/blocking.allow lists only calls that exist", gone)]
    return report("blocking", results)


if __name__ == "__main__":
    sys.exit(main())
