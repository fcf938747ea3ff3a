#!/usr/bin/env bash
# The README's C example compiles as shown: the first ```c block of README.md, against the
# project's headers.   readme_c_example.sh SOURCE_DIR C_COMPILER
set -euo pipefail
src=$1 cc=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
awk '/^```c$/ && !done {f=1;next} /^```/ && f {f=0;done=1} f' "$src/README.md" >"$d/example.c"
grep -q 'int main' "$d/example.c" || { echo "no C example with a main() in README.md"; exit 1; }
"$cc" -std=c11 -Wall -Wextra -Werror -I"$src/include" -c "$d/example.c" -o "$d/example.o"
echo "ok: README.md's C example compiles"
