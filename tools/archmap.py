#!/usr/bin/env python3
"""archmap.py - checks that docs/ARCHITECTURE.md names the tree as it is.

Two rules:
  1. Every file path the document names in backquotes exists: `a/b.c`
     (or a bare `b.c`, or a glob `s3_*.c`) must be the tail of some path of
     the tree, so a file moved to another folder or renamed, or a folder
     named wrong (`src/server/metrics_table.h` for src/engine's), fails.
  2. Every file under src/ is named in the file map (section "File map"),
     by its path or a tail of it.
A backquoted word counts as a path when it holds a "/" or ends in one of
the extensions below; words with an upper-case placeholder (PREFIX,
TARGET), absolute paths and URLs are not paths of the tree.

usage: tools/archmap.py [SOURCE_ROOT]; exit 0 when the map is true. With
RINGCACHE_TAP_FILE set, writes one TAP line per rule (tests/run counts
them)."""
import fnmatch
import os
import re
import subprocess
import sys

from tapreport import report

DOC = "docs/ARCHITECTURE.md"
EXTS = (".c", ".h", ".cpp", ".py", ".sh", ".md", ".map", ".in", ".build",
        ".txt", ".conf", ".json", ".yaml", ".yml", ".gp", ".supp", ".5",
        ".8", ".1", ".service", ".allow")
TICKED = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.*+-]+(/[A-Za-z0-9_.*+-]*)*$")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z0-9_]{2,}(/|$)")


def tree(root):
    """The tree's files, relative to root: git's list where there is one,
    else a walk that skips hidden and build folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co",
                              "--exclude-standard"], capture_output=True,
                             text=True, check=True).stdout
        files = [f for f in out.splitlines() if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".") and
                   not os.path.exists(os.path.join(d, x, "meson-private"))]
        rel = os.path.relpath(d, root)
        files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return files


def paths_named(text):
    """The backquoted words of text that name a path of the tree."""
    out = []
    for t in TICKED.findall(text):
        t = t.strip()
        if not PATHLIKE.match(t) or t.startswith("/") or ".." in t or \
                PLACEHOLDER.search(t):
            continue
        if "/" in t or t.endswith(EXTS):
            out.append(t)
    return out


def names_file(word, path):
    """Whether word (a path tail or a glob) names the file path."""
    if any(c in word for c in "*?["):
        parts = path.split("/")
        n = word.count("/") + 1
        return len(parts) >= n and fnmatch.fnmatchcase(
            "/".join(parts[-n:]), word)
    return path == word or path.endswith("/" + word)


def names(word, path):
    """Whether word names path or a folder above it."""
    folder = word.rstrip("/")
    return names_file(word, path) or \
        ("/" + path).find("/" + folder + "/") >= 0


def file_map(text):
    m = re.search(r"^## [0-9. ]*File map\s*$(.*?)(?=^## |\Z)", text,
                  re.M | re.S)
    return m.group(1) if m else ""


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = tree(root)
    with open(os.path.join(root, DOC), encoding="utf-8") as f:
        text = f.read()
    results = []

    missing = sorted({w for w in paths_named(text)
                      if not any(names(w, p) for p in files)})
    results.append((f"every path {DOC} names exists",
                    [f"`{w}`: no such file or folder in the tree"
                     for w in missing]))

    fmap = file_map(text)
    words = paths_named(fmap)
    unnamed = sorted(p for p in files if p.startswith("src/") and
                     not any(names_file(w, p) for w in words))
    errs = [f"{p}: not in the file map" for p in unnamed]
    if not fmap:
        errs = [f"{DOC} has no \"File map\" section"]
    results.append((f"{DOC}'s file map names every file of src/", errs))

    return report("archmap", results)


if __name__ == "__main__":
    sys.exit(main())
