#!/usr/bin/env python3
"""layers.py - checks that the #include graph of src/ goes only downward.

The layers, bottom to top (meson.build): common < s3 < store < engine <
server. A file may include headers of its own layer or of one below,
never above; src/client (libringcache, the CLI) includes only include/ and
src/common. No header may include itself through others (a cycle between
files). And no two modules (name.c + name.h) may include each other
through any path. A struct type is named (defined, pointed to, taken)
only at or above a layer that defines it: the engine sees no server
struct, so it holds no session (the include rule alone is met by moving
a type down). tools/layers.allow lists the known exceptions (debts, each
with why): a new one fails, and so does a listed one that is gone.

usage: tools/layers.py [SOURCE_ROOT]; exit 0 when clean. With
RINGCACHE_TAP_FILE set, writes one TAP line per rule (tests/run counts
them)."""
import os
import re
import sys

from tapreport import report

LAYERS = ["common", "s3", "store", "engine", "server"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
STRUCT_DEF = re.compile(r'^\s*(?:typedef\s+)?struct\s+(\w+)\s*\{', re.M)
STRUCT_USE = re.compile(r'\bstruct\s+(\w+)')
COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)


def scan_types(root):
    """file -> (structs it defines, structs it names), comments out."""
    out = {}
    for layer in LAYERS:
        d = os.path.join(root, "src", layer)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    text = COMMENT.sub(" ", f.read())
                out[f"{layer}/{name}"] = (set(STRUCT_DEF.findall(text)),
                                          set(STRUCT_USE.findall(text)))
    return out


def upward_types(root):
    """"FILE names struct T" for each T defined only above FILE's layer."""
    files = scan_types(root)
    home = {}
    for f, (defs, _) in files.items():
        for t in defs:
            home.setdefault(t, set()).add(f.split("/")[0])
    bad = []
    for f, (_, uses) in sorted(files.items()):
        li = LAYERS.index(f.split("/")[0])
        for t in sorted(uses):
            layers = home.get(t)
            if layers and min(LAYERS.index(x) for x in layers) > li:
                bad.append(f"{f} names struct {t}")
    return bad


def scan(root):
    files = {}
    for layer in LAYERS + ["client"]:
        d = os.path.join(root, "src", layer)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    files[f"{layer}/{name}"] = INCLUDE.findall(f.read())
    return files


def resolve(files, name):
    """The src/ file a quoted include names (None: include/ or system)."""
    hits = [p for p in files if p.split("/", 1)[1] == name]
    return hits[0] if len(hits) == 1 else None


def find_cycle(graph):
    """One cycle of graph (node -> set of nodes) as a list, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def strongly_connected(graph):
    """Tarjan: the components of more than one node, sorted."""
    index, low, on, st, out, counter = {}, {}, set(), [], [], [0]

    def sc(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        st.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                sc(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            sc(v)
    return sorted(out)


def load_allow(root):
    """tools/layers.allow: "upward SRC DST", "cycle MODULE..." or "type
    FILE STRUCT" (FILE names a struct defined above it), each
    line a known debt (a comment says why); # starts a comment."""
    allow = {"upward": [], "cycle": [], "type": []}
    path = os.path.join(root, "tools", "layers.allow")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if words and words[0] == "upward" and len(words) == 3:
                    allow["upward"].append(f"{words[1]} includes {words[2]}")
                elif words and words[0] == "type" and len(words) == 3:
                    allow["type"].append(f"{words[1]} names struct {words[2]}")
                elif words and words[0] == "cycle":
                    allow["cycle"].append(sorted(words[1:]))
                elif words:
                    sys.exit(f"layers.allow: cannot read: {line.strip()}")
    return allow


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = scan(root)
    allow = load_allow(root)
    results = []

    upward = []
    for src, incs in files.items():
        layer = src.split("/")[0]
        for inc in incs:
            dst = resolve(files, inc)
            if not dst:
                continue
            dl = dst.split("/")[0]
            if layer == "client":
                bad = dl not in ("client", "common")
            elif dl == "client":
                bad = True
            else:
                bad = LAYERS.index(dl) > LAYERS.index(layer)
            if bad:
                upward.append(f"{src} includes {dst}")
    results.append(("includes go only downward "
                    "(common < s3 < store < engine < server; client apart)",
                    [u for u in upward if u not in allow["upward"]]))

    fgraph = {s: {resolve(files, i) for i in incs} - {None}
              for s, incs in files.items()}
    cyc = find_cycle(fgraph)
    results.append(("no file includes itself through others",
                    [" -> ".join(cyc)] if cyc else []))

    mod = lambda p: p.rsplit(".", 1)[0]
    mgraph = {}
    for s, deps in fgraph.items():
        mgraph.setdefault(mod(s), set()).update(
            mod(d) for d in deps if mod(d) != mod(s))
    comps = strongly_connected(mgraph)
    new = [" <-> ".join(c) for c in comps if c not in allow["cycle"]]
    results.append(("no new cycle between modules (name.c + name.h); "
                    "known ones in tools/layers.allow", new))
    types = upward_types(root)
    results.append(("a struct is named only at or above a layer that "
                    "defines it", [t for t in types if t not in allow["type"]]))
    gone = [" ".join(a) for a in allow["cycle"] if a not in comps]
    gone += [t for t in allow["type"] if t not in types]
    gone += [u for u in allow["upward"] if u not in upward]
    results.append(("tools/layers.allow lists only debts that exist",
                    [f"{g}: gone, remove it from tools/layers.allow"
                     for g in gone]))

    return report("layers", results)


if __name__ == "__main__":
    sys.exit(main())
