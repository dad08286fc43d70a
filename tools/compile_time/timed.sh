#!/bin/sh
# A compiler launcher that times every compile of a build: each line of $SPECVERIFY_COMPILE_LOG
# (default /tmp/specverify_compiles.log) is `<seconds> <object>`. Configure a fresh build tree with
#   cmake --preset release -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/tools/compile_time/timed.sh \
#         -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/tools/compile_time/timed.sh
# build it, then `sh tools/compile_time/timed.sh --summary` sums the log by kind of source.
log=${SPECVERIFY_COMPILE_LOG:-/tmp/specverify_compiles.log}
if [ "${1:-}" = "--summary" ]; then
  awk '{ kind = "other"
         if ($2 ~ /specverify_instances_/) { kind = $2; sub(/.*specverify_instances_/, "instances ", kind); sub(/\.dir.*/, "", kind) }
         else if ($2 ~ /specverify_c_api_/) kind = "C API entry points"
         else if ($2 ~ /isa_hash/) kind = "tests/isa"
         else if ($2 ~ /\.cu\.o$/) kind = "CUDA sources"
         else if ($2 ~ /specverify_python/) kind = "Python module"
         else if ($2 ~ /test_/) kind = "test sources"
         s[kind] += $1; n[kind]++; all += $1 }
       END { for (k in s) printf "%8.1f s %4d  %s\n", s[k], n[k], k; printf "%8.1f s        every compile\n", all }' "$log" | sort -rn
  exit 0
fi
start=$(date +%s.%N)
"$@"
rc=$?
out=""
prev=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
awk -v a="$start" -v b="$(date +%s.%N)" -v o="$out" 'BEGIN { printf "%.2f %s\n", b - a, o }' >> "$log"
exit $rc
