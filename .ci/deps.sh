#!/bin/sh
# Installs the Debian packages specverify's build, tests, benchmarks and rule comparison need, and
# any named as arguments (.ci/run adds clang for its fuzz and tsan stages), if any is missing.
set -e
packages="cmake g++ pkg-config libxsimd-dev libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev fortunes gnuplot-nox
  pocketsphinx-en-us libsphinxbase-dev libcli11-dev nlohmann-json3-dev
  python3-dev python3-pybind11 python3-numpy python3-torch libdlpack-dev python3-pytest python3-venv python3-pip
  libopenmpi-dev openmpi-bin python3-mpi4py $*"
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
