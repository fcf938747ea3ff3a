#!/usr/bin/env python3
"""Every source file and qualified name the docs cite exists.

Usage: tests/ci/doc_names.py [REPO_ROOT]   (default: the repository this script is in)

Scans README.md and docs/*.md (not docs/results/, which is history: it names what existed
when it was measured) outside fenced code blocks, and checks
  (a) repository paths in backticks (`runtime/fault/mapping.cc`, `bench/run-standard.sh build`,
      `docs/io.md`) and relative markdown links ([x](design.md), [y](results/z.md)):
      the file or directory exists;
  (b) C++ qualified names in backticks (`Journal::Commit`, `Runtime::EvictBatchSize`): the
      last component occurs as a word in a source file (*.cc, *.h, *.hpp, *.c, *.py, *.sh)
      that also holds the component before it.
Exits 1 listing doc:line and each name that does not resolve. Python standard library only.
"""

import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# A backticked path is checked when its first component is one of the repository's own
# top-level entries (so `/proc/self/smaps`, `build/bench/umap-bench` and `bench/results/...`,
# which runs create, are not).
GENERATED = ("build", "bench/results", "build-release", "build-asan")
SOURCE_EXT = (".cc", ".h", ".hpp", ".c", ".py", ".sh")
SKIP_DIRS = {".git", "docs", "node_modules"}

# Qualified names that are not ours: other libraries' APIs.
EXTERNAL_PREFIXES = ("std::", "absl::", "rocksdb::", "testing::", "boost::", "fmt::")
# Names cited on purpose that are not in the sources, each with the reason.
ALLOWLIST = {
}

PATH_RE = re.compile(r"^\.?[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_.+-]+)+/?$")
QUAL_RE = re.compile(r"(?<![A-Za-z0-9_:])((?:[A-Za-z_][A-Za-z0-9_]*::)+~?[A-Za-z_][A-Za-z0-9_]*)")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
TICK_RE = re.compile(r"`([^`]+)`")


def docs_to_scan():
    out = [os.path.join(ROOT, "README.md")]
    d = os.path.join(ROOT, "docs")
    out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md"))
    return [p for p in out if os.path.isfile(p)]


def top_level():
    return {e for e in os.listdir(ROOT) if not e.startswith(".") or e in (".github", ".ci")}


def load_sources():
    texts = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith("build")
                       and not (rel == "." and d.startswith(".") and d not in (".github", ".ci"))]
        for f in filenames:
            if f.endswith(SOURCE_EXT):
                try:
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                        texts.append(fh.read())
                except OSError:
                    pass
    return texts


def lines_outside_fences(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


def path_exists(token, doc_dir, tops):
    token = token.rstrip(".,;:)")
    token = re.sub(r":\d+(-\d+)?$", "", token)  # file.cc:123
    if any(c in token for c in "*{}<>$"):
        return None  # a pattern or a placeholder, not a path
    if token.startswith("./"):
        token = token[2:]
    first = token.split("/")[0]
    if first not in tops or token.startswith(GENERATED) or "/" not in token.rstrip("/"):
        return None
    return os.path.exists(os.path.join(ROOT, token))


def main():
    tops = top_level()
    sources = load_sources()
    word_cache = {}

    def files_with(word):
        if word not in word_cache:
            rx = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(word) + r"(?![A-Za-z0-9_])")
            word_cache[word] = {i for i, t in enumerate(sources) if rx.search(t)}
        return word_cache[word]

    problems = []
    checked = 0
    for doc in docs_to_scan():
        rel_doc = os.path.relpath(doc, ROOT)
        doc_dir = os.path.dirname(doc)
        for n, line in lines_outside_fences(doc):
            for m in LINK_RE.finditer(line):
                target = m.group(1).split("#")[0]
                if not target or re.match(r"^[a-z]+:", target):
                    continue
                checked += 1
                if not os.path.exists(os.path.normpath(os.path.join(doc_dir, target))):
                    problems.append(f"{rel_doc}:{n}: link to a missing file: {target}")
            for m in TICK_RE.finditer(line):
                span = m.group(1)
                for token in span.split():
                    if PATH_RE.match(token.rstrip(".,;:)")):
                        ok = path_exists(token, doc_dir, tops)
                        if ok is None:
                            continue
                        checked += 1
                        if not ok:
                            problems.append(f"{rel_doc}:{n}: no such file: {token}")
                for q in QUAL_RE.findall(span):
                    if q.startswith(EXTERNAL_PREFIXES) or q in ALLOWLIST:
                        continue
                    parts = q.split("::")
                    last, owner = parts[-1].lstrip("~"), parts[-2]
                    checked += 1
                    if not owner:  # ::name, a global
                        if not files_with(last):
                            problems.append(f"{rel_doc}:{n}: not in the sources: {q}")
                        continue
                    if not (files_with(last) & files_with(owner)):
                        problems.append(f"{rel_doc}:{n}: not in the sources: {q}")
    for p in problems:
        print(p)
    print(f"doc_names: {checked} names checked in README.md and docs/*.md, "
          f"{len(problems)} not found")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
