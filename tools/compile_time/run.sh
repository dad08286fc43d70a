#!/bin/sh
# Compile time of an engine's translation unit (consumer.cpp), header-only against
# specverify::compiled (-DSPECVERIFY_COMPILED: the built-in rules' verify declared extern), one
# after the other in one run, each the fastest of N (default 3). Run from the repository root:
#   sh tools/compile_time/run.sh [N]    (CXX and CXXFLAGS as in the environment)
set -eu
n=${1:-3}
cxx=${CXX:-g++}
flags=${CXXFLAGS:--O3 -DNDEBUG -march=native}
src=tools/compile_time/consumer.cpp
best() {
  b=""
  i=0
  while [ "$i" -lt "$n" ]; do
    s=$(date +%s.%N)
    # shellcheck disable=SC2086
    $cxx -std=c++17 $flags -Iinclude "$@" -c "$src" -o /dev/null
    t=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    if [ -z "$b" ] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
    i=$((i + 1))
  done
  echo "$b"
}
header_only=$(best)
compiled=$(best -DSPECVERIFY_COMPILED)
printf '%s %s, fastest of %s\nheader-only            %6.1f s\nspecverify::compiled   %6.1f s  (%.2fx)\n' \
  "$cxx" "$flags" "$n" "$header_only" "$compiled" "$(awk -v c="$compiled" -v h="$header_only" 'BEGIN { print c / h }')"
