# run 49: SPEC §9 margins of decode_stage1_v2 under three readings of the rule, on the exact
# workloads of test_staged_tile_kernel_agrees_with_the_general_one and on 10 redraws of four of them
export PYTHONPATH=.:tests PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/cc NUMBA_CACHE_DIR=/tmp/nc
for c in "1 16 8" "1 1 8" "2 16 8" "2 1 8" "4 16 8" "4 1 8" "5 16 8" "5 1 8" "8 16 8" "8 1 8" "4 16 16" "7 1 16" \
         "2 16 16" "1 16 24" "4 1 24" "8 16 24"; do
  timeout 40 python3 tests/gpu_spec9_probe.py $c 1
done > $OUT/probe_cases.log 2>&1
for c in "2 16 8" "2 16 16" "2 16 24" "7 1 8"; do timeout 60 python3 tests/gpu_spec9_probe.py $c 10; done 2>&1 | tee $OUT/probe_seeds.log
