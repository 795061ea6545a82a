#!/usr/bin/env bash
# The SASS opcode histogram of one kernel instantiation (the device machine has cuobjdump):
#   bash bench/lab/sass_hist.sh cuda/decode_i8.cu 'decode_stage1_i8ILi4ELb1E' [extra nvcc options]
# Compiles the file with every instantiation for sm_90 (the library's options), then counts the
# opcodes of the functions whose mangled name contains the pattern.
set -eu
src=$1; pat=$2; shift 2
opts=$(python3 -c "from witcert_cupy import _cuda; print(' '.join(_cuda.options()))")
tmp=$(mktemp -d)
nvcc --cubin -arch=sm_90 -ftz=true $opts -DWITCERT_INSTANTIATE_ALL -I cuda "$@" "$src" -o "$tmp/k.cubin"
cuobjdump -sass "$tmp/k.cubin" | awk -v p="$pat" '/Function :/{on = index($0, p) > 0} on' \
  | grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_]+' | awk '{print $NF}' | sort | uniq -c | sort -rn
