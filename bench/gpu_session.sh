#!/usr/bin/env bash
# One call on a GPU machine: the environment, the GPU test suite, the compute-sanitizer fuzz, the
# decode kernels' compile check at every G (CI compiles their G classes) and
# (unless MODE is `tests`) the product benchmarks, everything written under $OUT.
#   bash bench/gpu_session.sh [tests|bench|full]
#     tests: GPU tests and the memcheck fuzz; bench: the benchmarks only; full: both (the default)
set -u
MODE=${1:-full}
case "$MODE" in tests|bench|full) ;; *) echo "usage: bash bench/gpu_session.sh [tests|bench|full]" >&2; exit 2 ;; esac
export PYTHONPATH=.:tests PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/numba_cache} OPENBLAS_NUM_THREADS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import sys, cupy, numpy, numba; print('python', sys.version.split()[0], '| cupy', cupy.__version__, '| numpy', numpy.__version__, '| numba', numba.__version__)"
  git log -1 --format='commit %H %s' 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [ "$MODE" != bench ]; then
  echo "== GPU tests"
  python3 -m pytest -m gpu tests/ -q -rf -n 8 -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  tail -3 "$OUT/gpu_tests.log"
  echo "== compute-sanitizer memcheck fuzz"
  # (API errors not reported: cuda.bindings probes every driver entry point with cuGetProcAddress at
  # its first call, and a driver older than the bindings answers "invalid argument" for the newer
  # ones; a failed call of ours raises in Python and ends the fuzz with a nonzero code)
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 python3 tests/gpu_fuzz.py 12 \
    > "$OUT/sanitizer.log" 2>&1
  echo "sanitizer exit code $?" | tee -a "$OUT/sanitizer.log"
  echo "== the decode kernels compiled at every G (CI compiles their G classes), a G per compile"
  WITCERT_COMPILE_EVERY_G=1 python3 -m pytest tests/test_cuda_compile.py -q -rf -n 16 -p no:cacheprovider \
    -k "every_g or decode_f16" > "$OUT/compile_every_g.log" 2>&1
  tail -1 "$OUT/compile_every_g.log"
fi
[ "$MODE" = tests ] && exit 0
echo "== benchmarks"
python3 bench/decode.py --shapes 8/32/8/32768,8/28/4/32768,1/32/8/4096,32/32/8/32768 --reps 20 --out "$OUT" \
  > "$OUT/bench_decode.log" 2>&1; tail -4 "$OUT/bench_decode.log"
python3 bench/decode.py --configs --reps 20 --out "$OUT" > "$OUT/bench_decode_configs.log" 2>&1
tail -3 "$OUT/bench_decode_configs.log"
python3 bench/write.py --out "$OUT" > "$OUT/bench_write.log" 2>&1; tail -3 "$OUT/bench_write.log"
python3 bench/extend.py --out "$OUT" > "$OUT/bench_extend.log" 2>&1; tail -3 "$OUT/bench_extend.log"
python3 bench/telemetry_gate.py --out "$OUT" > "$OUT/bench_telemetry_gate.log" 2>&1; tail -3 "$OUT/bench_telemetry_gate.log"
python3 bench/looseness.py --backend cuda --shapes demo,2/32/8/32768,4/28/4/32768,1/32/8/4096,1/28/4/32768 \
  --workers 5 --out "$OUT" > "$OUT/bench_looseness.log" 2>&1; tail -2 "$OUT/bench_looseness.log"
python3 bench/soundness.py --backend cuda --cells 1050000 --workers 8 --out "$OUT" > "$OUT/bench_soundness.log" 2>&1
tail -1 "$OUT/bench_soundness.log"
