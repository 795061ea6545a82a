#!/usr/bin/env bash
# SASS opcode counts of one kernel instantiation under compile-time variants, with the library's
# options (needs cuobjdump: the device machine has it; on a machine without one, the
# nvidia-cuda-cuobjdump wheel carries it, e.g. pip install --target /tmp/cuobj nvidia-cuda-cuobjdump and
# PATH=/tmp/cuobj/nvidia/cu13/bin:$PATH; CI does not need it).
#   bash bench/lab/sass_counts.sh cuda/decode_f16.cu decode_stage1_f16ILi7E "" "F16_CVT_SPLIT=0" ...
# Each variant is a comma-separated list of NAME=VALUE defines ('' = the shipped source).
set -eu
SRC=$1 FUN=$2
shift 2
OPTS=$(python3 -c "from witcert_cupy import _cuda; print(' '.join(_cuda.options()))")
for v in "$@"; do
  defs=""
  for d in ${v//,/ }; do defs="$defs -D$d"; done
  nvcc --cubin -arch=sm_90 -ftz=true $OPTS $defs -DWITCERT_INSTANTIATE_ALL -I cuda "$SRC" -o /tmp/sass_counts.cubin
  cuobjdump -sass /tmp/sass_counts.cubin | awk -v f="$FUN" '/Function : /{p = index($0, f) > 0} p' > /tmp/sass_counts.sass
  n=$(grep -cE '^ +/\*[0-9a-f]{4,}\*/' /tmp/sass_counts.sass || true)
  echo "== [${v:-shipped}] $FUN: $n instructions; top opcodes:"
  grep -oE '^ +/\*[0-9a-f]{4,}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_]+' /tmp/sass_counts.sass | awk '{print $NF}' |
    sort | uniq -c | sort -rn | head -20 | awk '{printf "%s %s; ", $2, $1} END {print ""}'
done
