#!/usr/bin/env bash
# One device call (see the device notes: few, full calls): environment, the GPU test suite, the
# compute-sanitizer fuzz, and the benchmarks.  Everything lands under $OUT (at most 8 files).
#   bash bench/gpu_session.sh [tests|issue4|issue5|issue6|issue8|tp|splits|floor|parts|decode|quick|full]   (tests: no benchmarks; tp: + NCCL run)
#   parts: bench/decode_parts.py (small-batch step vs stage 1 by split count), optional VARIANTS as floor
#   decode: PROBE="2,16,16" tests/gpu_spec9_probe.py, bench/decode_parts.py, the full bench/decode.py
#   floor: the decode's measured floor ladder (bench/decode_floor.py); VARIANTS="'' V2_KUNROLL=1" adds
#   bench/decode_variants.py with those compile-time variants
set -u
MODE=${1:-quick}
export PYTHONPATH=.:tests PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/cupy_cache NUMBA_CACHE_DIR=/tmp/numba_cache
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=name,uuid,serial,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import sys, cupy, numpy, numba, torch; print('python', sys.version.split()[0], '| cupy', cupy.__version__, '| numpy', numpy.__version__, '| numba', numba.__version__, '| torch', torch.__version__)"
  nvcc --version | tail -1
  git log -1 --format='commit %H %s' 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== GPU tests"
python3 -m pytest -m gpu tests/ -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "== compute-sanitizer memcheck fuzz"
compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 python3 tests/gpu_fuzz.py 30 \
  > "$OUT/sanitizer.log" 2>&1
echo "sanitizer exit code $?" >> "$OUT/sanitizer.log"
tail -8 "$OUT/sanitizer.log"
[ "$MODE" = tests ] && exit 0
run_parts() {  # bench/decode_parts.py: small-batch step vs stage 1 by split count
  python3 bench/decode_parts.py --out "$OUT" 2>&1 | tee "$OUT/bench_parts.log" | grep -v "^\[" | tail -40
}
run_variants() {  # bench/decode_variants.py with the compile-time VARIANTS, if any
  if [ -n "${VARIANTS:-}" ]; then
    eval "python3 bench/decode_variants.py $VARIANTS --out \"$OUT\"" 2>&1 | tee "$OUT/bench_variants.log" | grep variant
  fi
}
if [ "$MODE" = issue5 ]; then
  echo "== write path, decode (quick shapes) and extend benchmarks"
  {  # one log: 8 files at most come back
    python3 bench/write.py --out "$OUT" 2>&1
    python3 bench/decode.py --quick --out "$OUT" 2>&1
    [ -z "${SKIP_EXTEND:-}" ] && python3 bench/extend.py --out "$OUT" 2>&1
    if [ -n "${PROFILE_WRITE:-}" ]; then
      echo "== Nsight Compute: the write kernel"
      ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section InstructionStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis -k regex:write_rows -c 1 python3 bench/profile_write.py 2>&1
    fi
  } | tee "$OUT/bench.log" | grep -v "^\[decode\]\|^\[extend\]" | tail -70
  exit 0
fi
if [ "$MODE" = splits ]; then
  echo "== decode split-count sweep (small batches)"
  python3 bench/decode.py --splits --out "$OUT" 2>&1 | tee "$OUT/bench_splits.log" | tail -40
  exit 0
fi
if [ "$MODE" = floor ]; then
  echo "== decode floor ladder (INT8 and fp16-store), SDPA and our decodes beside"
  python3 bench/decode_floor.py --out "$OUT" 2>&1 | tee "$OUT/bench_floor.log" | grep -v "^\[" | tail -70
  run_variants
  exit 0
fi
if [ "$MODE" = decode ]; then
  echo "== SPEC 9 margins of both stage-1 kernels (PROBE=\"G,PAGE,BITS ...\")"
  for c in ${PROBE:-}; do python3 tests/gpu_spec9_probe.py ${c//,/ } 2>&1; done | tee "$OUT/probe.log"
  echo "== small-batch decode parts, then the full decode sweep"
  run_parts
  python3 bench/decode.py --out "$OUT" 2>&1 | tee "$OUT/bench_decode.log" | grep -v "^\[" | tail -45
  exit 0
fi
if [ "$MODE" = parts ]; then
  echo "== small-batch decode: step vs stage 1 by split count; optional VARIANTS (bench/decode_variants.py)"
  run_parts
  run_variants
  exit 0
fi
if [ "$MODE" = issue6 ]; then
  echo "== extend (prefill) benchmark"
  python3 bench/extend.py --out "$OUT" 2>&1 | tee "$OUT/bench_extend.log" | tail -14
  exit 0
fi
echo "== telemetry and gate benchmark"
python3 bench/telemetry_gate.py --out "$OUT" 2>&1 | tee "$OUT/bench_telemetry_gate.log" | tail -12
[ "$MODE" = issue4 ] && exit 0
if [ "$MODE" = issue8 ]; then
  echo "== llama decoder: every test of tests/test_llama.py (transformers cross-check included) and the CLI on cuda"
  python3 -m pytest tests/test_llama.py -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/llama_tests.log" | tail -20
  python3 python/llama_numpy.py --make-tiny /tmp/tiny >/dev/null
  for g in "" --gate; do python3 python/llama_numpy.py --model /tmp/tiny --prompt-len 48 --steps 32 --backend cuda $g \
      --json "$OUT/llama-cuda${g}.json" 2>&1 | tail -3; done
  exit 0
fi
if [ "$MODE" = tp ]; then
  echo "== tensor-parallel decode (NCCL, one process per GPU)"
  NCCL_NVLS_ENABLE=0 python3 python/tp_decode.py --worlds 1,2,4 --check --out "$OUT/tp" 2>&1 | tee "$OUT/tp_decode.log" | tail -8
  rm -f "$OUT"/tp/*.npz
  exit 0
fi
echo "== benchmarks ($MODE)"
if [ "$MODE" = full ]; then
  python3 bench/decode.py --out "$OUT" 2>&1 | tee "$OUT/bench_decode.log" | tail -60
else
  python3 bench/decode.py --quick --out "$OUT" 2>&1 | tee "$OUT/bench_decode.log" | tail -30
fi
python3 bench/write.py --out "$OUT" 2>&1 | tail -6
if [ "$MODE" = full ]; then python3 bench/decode.py --sweep --out "$OUT" 2>&1 | tail -30; fi
