#!/usr/bin/env python3
"""The code's shape, checked on every `make test` (docs/design.md, "The runtime's rooms").

Usage: tests/ci/code_shape.py [REPO_ROOT]

Fails, naming each offender, when
  (a) a non-test source file (.cc, .h, .c outside tests/) is longer than 800 lines;
  (b) a non-test function is longer than 100 lines. Functions are found the way the code
      is written (clang-format, Google style): a definition starts at column 0, outside a
      class body, and ends at the first line that is a column-0 "}";
  (c) runtime/'s top level holds more than 12 source files (the owner and the C API; the
      rest lives in rooms);
  (d) a file of runtime/ other than the owner's own (runtime/runtime*.cc) and the C API
      (runtime/umap_c*.cc) includes runtime/runtime.h: a room gets a narrow interface,
      not the owner.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
MAX_RUNTIME_TOP_FILES = 12
# Files of runtime/ besides the owner and the C API allowed to include runtime/runtime.h:
# none (a room gets its narrow interface: MappingHost, SizerHost, StatsSource,
# FaultSignalTarget).
RUNTIME_H_ALLOWED = set()
SOURCE = re.compile(r"\.(cc|h|c)$")
NOT_A_FUNCTION = re.compile(r"(namespace|class|struct|enum|union|extern|typedef|#|//)")


def sources(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if SOURCE.search(f) and not f.startswith("tests/")]


def long_functions(lines):
    """(first line number, length, signature) of each function longer than the limit."""
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        starts = (line and not line[0].isspace() and line.rstrip().endswith("{")
                  and not NOT_A_FUNCTION.match(line)
                  and "(" in "".join(lines[max(0, i - 6):i + 1]))
        if starts:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("}"):
                j += 1
            n = j - i + 1
            if n > MAX_FUNCTION_LINES:
                found.append((i + 1, n, line.strip()[:90]))
            i = j
        i += 1
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    problems = []
    files = sources(root)
    for f in files:
        with open(os.path.join(root, f), errors="replace") as fh:
            lines = fh.read().split("\n")
        if len(lines) - 1 > MAX_FILE_LINES:
            problems.append(f"{f}: {len(lines) - 1} lines (at most {MAX_FILE_LINES})")
        for at, n, sig in long_functions(lines):
            problems.append(f"{f}:{at}: a function of {n} lines (at most "
                            f"{MAX_FUNCTION_LINES}): {sig}")
    top = [f for f in files if f.startswith("runtime/") and f.count("/") == 1]
    if len(top) > MAX_RUNTIME_TOP_FILES:
        problems.append(f"runtime/ top level: {len(top)} source files (at most "
                        f"{MAX_RUNTIME_TOP_FILES}; put the rest in a room): {' '.join(top)}")
    for f in files:
        if not f.startswith("runtime/") or re.match(r"runtime/(runtime|umap_c)[^/]*$", f):
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            includes = '#include "runtime/runtime.h"' in fh.read()
        if includes and f not in RUNTIME_H_ALLOWED:
            problems.append(f"{f} includes runtime/runtime.h: give it the narrow interface "
                            "it needs (as Mapping has MappingHost)")
    for p in problems:
        print(p)
    if problems:
        print(f"code_shape: {len(problems)} problem(s)")
        return 1
    print(f"code_shape: {len(files)} source files checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
