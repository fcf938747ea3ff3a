#!/usr/bin/env bash
# Installs the Debian 12 packages Umap builds, tests and benchmarks with. Idempotent: only
# calls apt-get when something is missing. Run as root (CI and the dev machines are root).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libabsl-dev librocksdb-dev liburing-dev libisal-dev libcli11-dev
      libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev libfuse3-dev
      glusterfs-server glusterfs-client e2fsprogs xfsprogs iproute2 psmisc procps util-linux
      gnuplot-nox python3 python3-numpy pandoc criu valgrind strace
      sqlite3 fio python3-lmdb python3-pytest python3-hypothesis)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
