#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR WORKDIR VERSION SOVERSION PLAIN_MMAP
#
# Installs the build into a temporary prefix and uses it as a user outside the tree would:
#   1. the installed files are the expected ones (headers of include/umap/ only, the
#      library with its soname, umap.pc, the CMake package, the tools, the man pages) and
#      nothing of the test variants;
#   2. libumap.so exports exactly the functions umap.h declares, under version UMAP_0;
#   3. the C header compiles alone with nothing but libc (C99, -pedantic);
#   4. a C program (tests/install/map_write_sync.c) builds with pkg-config, shared and
#      static, and runs: map a file, write, umsync, read back, check the file;
#   5. a CMake project (tests/install/consumer, C++ with umap/umap.hpp) builds with
#      find_package(umap) and runs the same;
#   6. CPack builds the three .debs, whose contents (dpkg-deb -c) and fields are checked;
#   7. the installed libumap_preload.so puts Umap under an unmodified program's mmap() of a
#      file under UMAP_PATHS (tests/preload/plain_mmap.c, built without Umap), the bytes
#      reach the file, and the installed umap-stat shows the program's Umap mapping.
set -u  # no pipefail: pipelines end in grep -q or head, judged by their output
build=$1 src=$2 work=$3 version=$4 soversion=$5 plain_mmap=$6
prefix=$work/prefix
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
check() {  # check DESCRIPTION COMMAND...: runs the command, logs its output on failure
  local what=$1
  shift
  if out=$("$@" 2>&1); then pass "$what"; else fail "$what: $(echo "$out" | tail -15)"; fi
}

rm -rf "$work" && mkdir -p "$work" || exit 1
if ! out=$(cmake --install "$build" --prefix "$prefix" 2>&1); then
  echo "FAIL: cmake --install: $out"
  exit 1
fi
pass "cmake --install --prefix $prefix"
libdir=$(cd "$prefix" && ls -d lib*/ | head -1)
libdir=$prefix/${libdir%/}
[ -f "$libdir/libumap.so.$version" ] || libdir=$(dirname "$(find "$prefix" -name "libumap.so.$version" | head -1)")

# 1. What is installed.
expect_files=(
  include/umap/umap.h include/umap/umap_types.h include/umap/umap.hpp
  "${libdir#$prefix/}/libumap.so.$version" "${libdir#$prefix/}/libumap.so.$soversion"
  "${libdir#$prefix/}/libumap.so" "${libdir#$prefix/}/libumap.a"
  "${libdir#$prefix/}/pkgconfig/umap.pc" "${libdir#$prefix/}/cmake/umap/umapConfig.cmake"
  "${libdir#$prefix/}/cmake/umap/umapConfigVersion.cmake"
  "${libdir#$prefix/}/cmake/umap/umapTargets.cmake"
  "${libdir#$prefix/}/cmake/umap/umapStaticTargets.cmake"
  "${libdir#$prefix/}/libumap_preload.so"
  bin/umap-recover bin/umap-stat bin/umap-ctl bin/umap-bench share/man/man1/umap-recover.1
  share/man/man1/umap-stat.1 share/man/man3/umap.3)
for f in "${expect_files[@]}"; do
  [ -e "$prefix/$f" ] || [ -L "$prefix/$f" ] || fail "not installed: $f"
done
[ "$(readlink "$libdir/libumap.so.$soversion")" = "libumap.so.$version" ] ||
  fail "libumap.so.$soversion does not point at libumap.so.$version"
headers=$(cd "$prefix/include" && find . -type f | sort | tr '\n' ' ')
[ "$headers" = "./umap/umap.h ./umap/umap.hpp ./umap/umap_types.h " ] ||
  fail "installed headers are '$headers', expected umap.h umap.hpp umap_types.h only"
if found=$(find "$prefix" -name '*testing*' -o -name '*chaos*' -o -name '*faultinject*' | head -3) &&
   [ -n "$found" ]; then
  fail "test-only files installed: $found"
fi
pass "installed files: ${#expect_files[@]} expected, headers of include/umap/ only, no test variants"

# 2. The soname and the exported symbols.
soname=$(readelf -d "$libdir/libumap.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libumap.so.$soversion" ] && pass "SONAME $soname" ||
  fail "SONAME is '$soname', expected libumap.so.$soversion"
declared=$(grep -oE '^[a-z_][a-z_ *]*[ *](umap[a-z0-9_]*|uunmap|umsync)\(' "$prefix/include/umap/umap.h" |
  sed -E 's/.*[ *]([a-z0-9_]+)\($/\1/' | sort -u | tr '\n' ' ')
exported=$(nm -D --defined-only "$libdir/libumap.so.$version" | awk '$2 ~ /^[TWDBR]$/ {print $3}' |
  sed 's/@.*//' | grep -v '^UMAP_' | sort -u | tr '\n' ' ')
[ -n "$declared" ] && [ "$declared" = "$exported" ] &&
  pass "libumap.so exports exactly the C API: $exported" ||
  fail "exported symbols '$exported' differ from the functions umap.h declares '$declared'"
versioned=$(nm -D --defined-only --with-symbol-versions "$libdir/libumap.so.$version" 2>/dev/null |
  grep -c '@@UMAP_0$' || true)
[ "$versioned" -gt 0 ] && pass "symbols carry version UMAP_0 ($versioned)" ||
  fail "no symbol of version UMAP_0"
needed=$(readelf -d "$libdir/libumap.so.$version" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
  tr '\n' ' ')
for lib in librocksdb liburing libisal libabsl_; do
  [[ " $needed" == *" $lib"* ]] || fail "libumap.so does not depend on $lib (NEEDED: $needed)"
done
pass "libumap.so depends on Debian's shared libraries: $needed"

# 3. The C API needs nothing but libc.
export PKG_CONFIG_PATH=$libdir/pkgconfig
cflags=$(pkg-config --cflags umap)
cflags_dir=$(realpath -m "$(sed -n 's/^-I\([^ ]*\) *$/\1/p' <<<"$cflags")")
[ "$cflags_dir" = "$(realpath "$prefix/include")" ] && pass "pkg-config --cflags umap: $cflags" ||
  fail "pkg-config --cflags umap is '$cflags', expected -I$prefix/include alone"
check "umap.h compiles alone as C99 with libc only" \
  bash -c "printf '#include <umap/umap.h>\nint main(void) { return umap_default_runtime() == 0; }\n' |
    cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only $cflags -x c -"
check "umap_types.h compiles alone as C99" \
  bash -c "printf '#include <umap/umap_types.h>\numap_config c;\n' |
    cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only $cflags -x c -"

# 4. A C program built with pkg-config, against libumap.so and against libumap.a.
run_c() {  # run_c NAME: runs $work/NAME on a file and journal of its own
  local name=$1
  env LD_LIBRARY_PATH="$libdir" "$work/$name" "$work/$name.data" "$work/$name.journal"
}
check "C program built with pkg-config (shared)" \
  cc -std=c99 -Wall -Wextra -Werror $cflags "$src/tests/install/map_write_sync.c" \
  -o "$work/c_shared" $(pkg-config --libs umap)
if out=$(run_c c_shared 2>&1) && [[ "$out" == ok* ]]; then
  pass "C program (shared) runs: $out"
else
  fail "C program (shared): $out"
fi
if env LD_LIBRARY_PATH="$libdir" ldd "$work/c_shared" 2>/dev/null |
   grep -q "libumap.so.$soversion => $libdir/"; then
  pass "C program (shared) loads $libdir/libumap.so.$soversion"
else
  fail "C program (shared) does not load the installed libumap: $(env LD_LIBRARY_PATH="$libdir" ldd "$work/c_shared" | grep umap)"
fi
static_libs=$(pkg-config --libs --static umap | sed 's/-lumap\b/-l:libumap.a/')
check "C program built with pkg-config --static against libumap.a" \
  cc -std=c99 -Wall -Wextra -Werror $cflags "$src/tests/install/map_write_sync.c" \
  -o "$work/c_static" $static_libs
if out=$(run_c c_static 2>&1) && [[ "$out" == ok* ]] && ! ldd "$work/c_static" | grep -q libumap; then
  pass "C program (static, no libumap.so loaded) runs: $out"
else
  fail "C program (static): $out $(ldd "$work/c_static" 2>&1 | grep umap)"
fi

# 5. A CMake project with find_package(umap), C++ through umap/umap.hpp.
if out=$(cmake -S "$src/tests/install/consumer" -B "$work/consumer-build" -G Ninja \
           -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release 2>&1) &&
   out=$(cmake --build "$work/consumer-build" 2>&1); then
  pass "CMake project with find_package(umap) builds out of tree"
  for exe in consumer consumer_static; do
    if out=$(env LD_LIBRARY_PATH="$libdir" "$work/consumer-build/$exe" "$work/$exe.data" \
               "$work/$exe.journal" 2>&1) && [[ "$out" == ok* ]]; then
      pass "CMake project's $exe runs: $out"
    else
      fail "CMake project's $exe: $out"
    fi
  done
else
  fail "CMake project with find_package(umap): $(echo "$out" | tail -20)"
fi

# 6. The Debian packages.
if out=$(cd "$build" && cpack -G DEB -B "$work/deb" 2>&1); then
  pass "cpack -G DEB"
else
  fail "cpack -G DEB: $(echo "$out" | tail -20)"
fi
deb() { ls "$work"/deb/"$1"_"$version"*.deb 2>/dev/null | head -1; }
contents() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|'; }
lib_deb=$(deb "libumap$soversion") dev_deb=$(deb libumap-dev) tools_deb=$(deb umap-tools)
for d in "$lib_deb" "$dev_deb" "$tools_deb"; do
  [ -n "$d" ] || fail "missing .deb (found: $(ls "$work/deb" 2>/dev/null | tr '\n' ' '))"
done
if [ -n "$lib_deb" ] && [ -n "$dev_deb" ] && [ -n "$tools_deb" ]; then
  expect_in() {  # expect_in DEB PATH...
    local d=$1 c
    shift
    c=$(contents "$d")
    for p in "$@"; do
      grep -qE "^$p\$" <<<"$c" || fail "$(basename "$d") lacks $p"
    done
  }
  expect_in "$lib_deb" "/usr/lib.*/libumap\.so\.$version" "/usr/lib.*/libumap\.so\.$soversion" \
    "/usr/lib.*/libumap_preload\.so"
  expect_in "$dev_deb" /usr/include/umap/umap.h /usr/include/umap/umap_types.h \
    /usr/include/umap/umap.hpp "/usr/lib.*/libumap\.so" "/usr/lib.*/libumap\.a" \
    "/usr/lib.*/pkgconfig/umap\.pc" "/usr/lib.*/cmake/umap/umapConfig\.cmake" \
    "/usr/share/man/man3/umap\.3(\.gz)?"
  expect_in "$tools_deb" /usr/bin/umap-recover /usr/bin/umap-stat /usr/bin/umap-ctl \
    /usr/bin/umap-bench \
    "/usr/share/man/man1/umap-recover\.1(\.gz)?" "/usr/share/man/man1/umap-stat\.1(\.gz)?"
  if contents "$lib_deb" | grep -qE '\.(h|hpp|a)$|/bin/'; then
    fail "$(basename "$lib_deb") holds development files or tools"
  fi
  if contents "$lib_deb" "$dev_deb" "$tools_deb" 2>/dev/null | grep -qE 'testing|chaos'; then
    fail "a .deb holds test-only files"
  fi
  for d in "$lib_deb" "$dev_deb" "$tools_deb"; do
    echo "   $(basename "$d"): $(dpkg-deb -f "$d" Package Depends | tr '\n' ' ')"
  done
  dpkg-deb -f "$lib_deb" Depends | grep -q librocksdb ||
    fail "$(basename "$lib_deb") does not depend on librocksdb"
  dpkg-deb -f "$dev_deb" Depends | grep -q "libumap$soversion (= $version)" ||
    fail "$(basename "$dev_deb") does not depend on libumap$soversion (= $version)"
  pass "dpkg-deb -c: libumap$soversion, libumap-dev and umap-tools hold what they should"
fi

# The man pages are roff rendered from docs/ (pandoc), with the right titles.
grep -q '^\.TH "UMAP-RECOVER" "1"' "$prefix/share/man/man1/umap-recover.1" &&
  grep -q '^\.TH "UMAP-STAT" "1"' "$prefix/share/man/man1/umap-stat.1" &&
  grep -q '^\.TH "UMAP" "3"' "$prefix/share/man/man3/umap.3" &&
  grep -q 'umsync' "$prefix/share/man/man3/umap.3" &&
  pass "man pages: umap-recover(1), umap-stat(1) and umap(3) are roff" ||
  fail "man pages lack their .TH lines: $(head -c 300 "$prefix/share/man/man3/umap.3")"

# 7. The installed shim under an unmodified program, watched by the installed umap-stat.
shim_dir=$work/shim
mkdir -p "$shim_dir"
shim_env=(LD_PRELOAD="$libdir/libumap_preload.so" LD_LIBRARY_PATH="$libdir"
          UMAP_PATHS="$shim_dir" UMAP_JOURNAL_DIR="$work/shim.journal" UMAP_CACHE_BYTES=1M)
shim() {  # shim ARGS...: plain_mmap under the installed shim, Umap for files in $shim_dir
  env "${shim_env[@]}" "$plain_mmap" "$@"
}
check "plain_mmap writes and msyncs through the installed shim" \
  shim write "$shim_dir/matrix.bin" 4194304 7
check "the file holds the shim's bytes (verified without the shim)" \
  "$plain_mmap" verify "$shim_dir/matrix.bin" 4194304 7
coproc HOLD { exec env "${shim_env[@]}" "$plain_mmap" hold "$shim_dir/matrix.bin" 4194304 2>&1; }
hold_pid=$HOLD_PID
IFS= read -r -t 60 line <&"${HOLD[0]}"
if [[ "$line" == ready* ]]; then
  stat_out=$("$prefix/bin/umap-stat" --json "$hold_pid" 2>&1)
  if [[ "$stat_out" == *"$shim_dir/matrix.bin"* ]]; then
    pass "installed umap-stat shows the program's Umap mapping of $shim_dir/matrix.bin"
  else
    fail "installed umap-stat --json $hold_pid does not show $shim_dir/matrix.bin: $stat_out"
  fi
else
  fail "plain_mmap hold under the installed shim said '$line'"
fi
echo done >&"${HOLD[1]}" 2>/dev/null
wait "$hold_pid" 2>/dev/null || fail "plain_mmap hold under the installed shim failed ($?)"

echo "$failures failed"
[ "$failures" = 0 ]
