#!/bin/sh
# Installs what the fuzz and tsan stages of .ci/run need beyond .ci/deps.sh: clang++ and its
# runtime libraries (libFuzzer), if missing.
set -e
packages="clang libclang-rt-14-dev"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends $missing
fi
