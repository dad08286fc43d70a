#!/usr/bin/env bash
# Everything CUDA on a machine with an NVIDIA GPU, in one command (issue 18):
#   configure and build the CUDA targets (and the Python module), run every CUDA test, run
#   compute-sanitizer memcheck, racecheck and synccheck on each CUDA test binary, run the Python
#   tests, run the CUDA benchmarks (bench_cuda, and the engine-style PyTorch path where torch has
#   CUDA), and write report.md and report.json with every step's log into one folder.
#
#   tools/gpu_check.sh [--out DIR] [--build-dir DIR] [--no-build] [--jobs N] [--python PY] [--quick]
#                      [--step-timeout S] [--sanitize-timeout S] [--sanitize-filter F] [--racecheck-filter F]
#
#   --out DIR        report folder (default gpu_check_report/<UTC date-time>)
#   --build-dir DIR  build folder (default build/gpu-check); an existing one is reused
#   --no-build       skip configure and build (use what --build-dir holds)
#   --jobs N         parallel build jobs (default: all cores)
#   --python PY      the interpreter for the module and pytest (default: python3)
#   --quick          benchmarks with a short minimum time, the PyTorch path with 10 repetitions (same shapes)
#   --step-timeout S a step that runs longer than S seconds is stopped and reported as timed out,
#                    so one slow step (a sanitizer on a long suite) still leaves a report (default: none)
#   --sanitize-timeout S  the same for each sanitizer run (default: the step timeout)
#   --sanitize-filter F   the gtest filter memcheck and synccheck use (default: every test)
#   --racecheck-filter F  the gtest filter racecheck uses (default: one test of each kernel family;
#                    racecheck checks every shared-memory access and ran over 20 s on one such test)
#
# Exit status: 0 when every step passed; 1 when a step failed; 2 when no CUDA device was found
# (everything is still built, and the steps that need a device are reported as "no device").
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

OUT="" BUILD="build/gpu-check" BUILD_STEPS=1 JOBS=$(nproc 2>/dev/null || echo 4) PY=python3 QUICK=0
STEP_TIMEOUT=0 SANITIZE_TIMEOUT="" SANITIZE_FILTER="*"
RACECHECK_FILTER="CpuMatch.EveryRuleGivesTheCpuTokens:SplitRows.ABadValueIsReportedAsByOneBlock:TreeOutputs.*:LogitsCpuMatch.OneHotDrafts:LogitsBadInput.NaNTargetLogitIsNamed"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --no-build) BUILD_STEPS=0; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
    --sanitize-timeout) SANITIZE_TIMEOUT=$2; shift 2 ;;
    --sanitize-filter) SANITIZE_FILTER=$2; shift 2 ;;
    --racecheck-filter) RACECHECK_FILTER=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 64 ;;
  esac
done
SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-$STEP_TIMEOUT}
OUT=${OUT:-gpu_check_report/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STEPS="$OUT/steps.tsv"
: > "$STEPS"
FAILED=0

# step NAME COMMAND...: runs COMMAND with its output in NAME.log; records status and seconds.
step() {
  local name=$1 start end rc status
  shift
  echo "== $name"
  start=$(date +%s.%N)
  if [ "$STEP_TIMEOUT" -gt 0 ]; then
    timeout --kill-after=10 "$STEP_TIMEOUT" "$@" > "$OUT/$name.log" 2>&1
  else
    "$@" > "$OUT/$name.log" 2>&1
  fi
  rc=$?
  end=$(date +%s.%N)
  if [ $rc -eq 0 ]; then
    status=pass
  elif [ "$STEP_TIMEOUT" -gt 0 ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
    status="timed out after ${STEP_TIMEOUT} s"; FAILED=1
  else
    status="fail (exit $rc)"; FAILED=1
  fi
  awk -v n="$name" -v s="$status" -v a="$start" -v b="$end" 'BEGIN { printf "%s\t%s\t%.1f\n", n, s, b - a }' >> "$STEPS"
  echo "   $status, log: $OUT/$name.log"
}
skip() {  # skip NAME WHY
  printf '%s\t%s\t0\n' "$1" "$2" >> "$STEPS"
  echo "== $1: $2"
}

# The device, and the architecture to build for (sm_XY from its compute capability).
DEVICE=0 ARCH=80 GPU="none"
if command -v nvidia-smi > /dev/null && nvidia-smi -L > "$OUT/nvidia-smi.log" 2>&1 && grep -q '^GPU' "$OUT/nvidia-smi.log"; then
  DEVICE=1
  GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  case "$CAP" in ''|*[!0-9]*) ARCH=native ;; *) ARCH=$CAP ;; esac
fi
echo "gpu_check: device: $GPU; CUDA architecture $ARCH; report in $OUT"

CUDA_TESTS=(test_cuda_verify test_cuda_trees test_cuda_logits)
if [ $BUILD_STEPS -eq 1 ]; then
  step configure cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSPECVERIFY_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DSPECVERIFY_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$PY")"
  step build cmake --build "$BUILD" -j "$JOBS" --target "${CUDA_TESTS[@]}" bench_cuda specverify_python \
    reference_verify reference_batches
fi

# A device the CUDA runtime can open (nvidia-smi may see a GPU that a container cannot use):
# bench_cuda asks cudaGetDeviceCount and says so when there is none.
if [ $DEVICE -eq 1 ] && [ -x "$BUILD/bench/bench_cuda" ] &&
   "$BUILD/bench/bench_cuda" --benchmark_list_tests 2>&1 | tee "$OUT/device_query.log" | grep -q "no CUDA device"; then
  DEVICE=0
fi
if [ $DEVICE -eq 0 ]; then
  echo "gpu_check: NO CUDA DEVICE FOUND (nvidia-smi or the CUDA runtime sees none): the targets are built; the steps that need a device are skipped"
fi

for t in "${CUDA_TESTS[@]}"; do
  bin="$BUILD/tests/cuda/$t"
  if [ ! -x "$bin" ]; then skip "$t" "not built"; continue; fi
  if [ $DEVICE -eq 0 ]; then skip "$t" "no device"; continue; fi
  step "$t" "$bin" --gtest_output="json:$OUT/$t.json"
done

# The Python suite (its CUDA tests skip themselves with a reason where the module has no CUDA part).
if [ -d "$BUILD/python/specverify" ]; then
  step pytest env PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 \
    SPECVERIFY_REFERENCE_VERIFY="$BUILD/python/reference_verify" \
    SPECVERIFY_REFERENCE_BATCHES="$BUILD/python/reference_batches" \
    "$PY" -m pytest -q -p no:cacheprovider "$ROOT/python/tests" -rs
else
  skip pytest "module not built"
fi

if [ ! -x "$BUILD/bench/bench_cuda" ]; then
  skip bench_cuda "not built"
elif [ $DEVICE -eq 0 ]; then
  skip bench_cuda "no device"
else
  MIN_TIME=()
  [ $QUICK -eq 1 ] && MIN_TIME=(--benchmark_min_time=0.05)
  step bench_cuda "$BUILD/bench/bench_cuda" --benchmark_format=json --benchmark_out="$OUT/bench_cuda.json" \
    --benchmark_out_format=json "${MIN_TIME[@]}"
fi
if [ $DEVICE -eq 0 ]; then
  skip bench_cuda_torch "no device"
else
  QUICK_ARG=()
  [ $QUICK -eq 1 ] && QUICK_ARG=(--reps 10)
  step bench_cuda_torch "$PY" "$ROOT/python/bench/bench_cuda_torch.py" --json "$OUT/bench_cuda_torch.json" "${QUICK_ARG[@]}"
fi

# The sanitizers last: the slowest steps, so the tests and benchmarks have reported before them.
for t in "${CUDA_TESTS[@]}"; do
  bin="$BUILD/tests/cuda/$t"
  [ -x "$bin" ] && [ $DEVICE -eq 1 ] || continue
  for tool in memcheck racecheck synccheck; do
    if ! command -v compute-sanitizer > /dev/null; then skip "$t.$tool" "no compute-sanitizer"; continue; fi
    filter=$SANITIZE_FILTER
    [ $tool = racecheck ] && filter=$RACECHECK_FILTER
    STEP_TIMEOUT=$SANITIZE_TIMEOUT step "$t.$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 "$bin" \
      --gtest_brief=1 --gtest_filter="$filter"
  done
done

# The report: the steps' table, then the benchmarks side by side (python3 only for formatting).
STATUS=$FAILED
[ $DEVICE -eq 0 ] && STATUS=2
GPU="$GPU" STATUS=$STATUS OUT="$OUT" python3 - <<'EOF' || { echo "gpu_check: could not write the report" >&2; STATUS=1; }
import json, os
out, gpu, status = os.environ["OUT"], os.environ["GPU"], int(os.environ["STATUS"])
steps = [dict(zip(("step", "status", "seconds"), line.rstrip("\n").split("\t")))
         for line in open(os.path.join(out, "steps.tsv")) if line.strip()]
for s in steps:
    s["seconds"] = float(s["seconds"])
    s["log"] = s["step"] + ".log" if os.path.exists(os.path.join(out, s["step"] + ".log")) else None
verdict = {0: "every step passed", 1: "a step FAILED", 2: "NO CUDA DEVICE FOUND: built only"}[status]
md = [f"# gpu_check report", "", f"Device: {gpu}", "", f"Result: **{verdict}**", "",
      "| step | status | seconds |", "|---|---|---|"]
md += [f"| {s['step']} | {s['status']} | {s['seconds']:.1f} |" for s in steps]

bench = []
path = os.path.join(out, "bench_cuda.json")
if os.path.exists(path):
    for b in json.load(open(path)).get("benchmarks", []):
        parts = dict(kv.split(":") for kv in b["name"].split("/") if ":" in kv)
        bench.append({"name": b["name"].split("/B:")[0], "B": int(parts.get("B", 0)), "V": int(parts.get("V", 0)),
                      "K": int(parts.get("K", 0)), "verify_us": b.get("real_time"), "read_us": b.get("read_us"),
                      "verify_GBps": b.get("verify_GB/s"),
                      "accept": b.get("accept/draft")})
torch_us, python_us = {}, {}
path = os.path.join(out, "bench_cuda_torch.json")
if os.path.exists(path):
    for r in json.load(open(path))["results"]:
        torch_us[(r["name"], r["B"], r["V"], r["K"])] = r["torch_us"]
        python_us[(r["name"], r["B"], r["V"], r["K"])] = r.get("python_us")
if bench:
    md += ["", "## Benchmarks (bench_cuda; us per verify; read: a device read pass of the bytes the walk must read;"
           " torch: the engine-style PyTorch CUDA path on the same shapes; python: sv.verify from Python on CUDA"
           " tensors, probability rows)", "",
           "| benchmark | B | V | K | verify us | read us | verify / read | torch us | torch / verify | python us "
           "| accept/draft |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in bench:
        key = (b["name"], b["B"], b["V"], b["K"])
        t, py = torch_us.get(key), python_us.get(key)
        ratio = b["verify_us"] / b["read_us"] if b["read_us"] else float("nan")
        speed = t / b["verify_us"] if t and b["verify_us"] else None
        b["torch_us"], b["python_us"] = t, py
        md.append(f"| {b['name']} | {b['B']} | {b['V']} | {b['K']} | {b['verify_us']:.1f} | {b['read_us']:.1f} | "
                  f"{ratio:.2f} | {'' if t is None else f'{t:.1f}'} | {'' if speed is None else f'{speed:.1f}x'} | "
                  f"{'' if py is None else f'{py:.1f}'} | {b['accept']:.2f} |")
md += ["", "Logs: one `<step>.log` per step in this folder."]
open(os.path.join(out, "report.md"), "w").write("\n".join(md) + "\n")
json.dump({"device": gpu, "status": status, "verdict": verdict, "steps": steps, "benchmarks": bench},
          open(os.path.join(out, "report.json"), "w"), indent=1)
EOF
case $STATUS in
  0) echo "gpu_check: all steps passed" ;;
  2) echo "gpu_check: NO CUDA DEVICE FOUND (built only; exit 2)" ;;
  *) echo "gpu_check: a step FAILED" ;;
esac
echo "gpu_check: report: $OUT/report.md (and report.json, one log per step)"
exit $STATUS
