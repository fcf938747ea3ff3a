#!/bin/bash
# Proves that umap-bench's checks are not vacuous: with one word of the file corrupted, a
# sequential read of the whole file must report WRONG DATA READ, and a write run must report
# VERIFY FAILED, for each backend; umap-bench must exit 1 each time.
# Usage: detects_corruption.sh UMAP_BENCH FILE
set -u
bench=$1
file=$2
mkdir -p "$(dirname "$file")"
trap 'rm -f "$file"' EXIT
fail=0
for backend in umap mmap pread pread+direct uring; do
  for access in read write; do
    out=$("$bench" --file "$file" --file-size 4M --cache 1M --threads 2 --ops 512 \
          --repeats 1 --pattern sequential --access "$access" --backends "$backend" \
          --check-reads all --TEST-corrupt-word 12345 2>&1)
    rc=$?
    if [ "$access" = read ]; then want="WRONG DATA READ"; else want="VERIFY FAILED"; fi
    if [ $rc -ne 1 ] || ! grep -q "$want" <<<"$out"; then
      echo "FAIL: $backend $access: exit $rc, expected 1 and '$want' in:"
      echo "$out"
      fail=1
    else
      echo "ok: $backend $access: $(grep -o "$want[^;]*" <<<"$out" | head -1 | cut -c1-160)"
    fi
  done
done
exit $fail
