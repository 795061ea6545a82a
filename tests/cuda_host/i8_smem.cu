// Prints, for each head dim D and G = 1..8 query heads per kv head, i8_smem_total of
// decode_stage1_i8 (cuda/decode_i8_geometry.cuh: what the kernel checks it was given) in the
// configurations tests/test_cuda_compile.py compares with witcert_cupy/_cuda/geometry.py's
// i8_smem_bytes: "D G plain exact a8 a64 o4 omax exact+a16 o4+a16 bits16 bits16+exact bits16+omax".
#include <cstdio>
#include <utility>
#include "decode_i8_geometry.cuh"

template <int D, int G>
void row() {
    std::printf("%d %d %u %u %u %u %u %u %u %u %u %u %u\n", D, G, i8_smem_total<D, 8, G, false, false, false>(0, 0),
                i8_smem_total<D, 8, G, false, true, false>(0, 0), i8_smem_total<D, 8, G, true, false, false>(8, 0),
                i8_smem_total<D, 8, G, true, false, false>(64, 0), i8_smem_total<D, 8, G, false, false, true>(0, 4),
                i8_smem_total<D, 8, G, false, false, true>(0, I8_OUTL_MAX), i8_smem_total<D, 8, G, true, true, false>(16, 0),
                i8_smem_total<D, 8, G, true, false, true>(16, 4), i8_smem_total<D, 16, G, false, false, false>(0, 0),
                i8_smem_total<D, 16, G, false, true, false>(0, 0), i8_smem_total<D, 16, G, false, false, true>(0, I8_OUTL_MAX));
}

template <int D, int... G>
void rows(std::integer_sequence<int, G...>) {
    (row<D, G + 1>(), ...);
}

int main() {
    rows<64>(std::make_integer_sequence<int, 8>{});
    rows<128>(std::make_integer_sequence<int, 8>{});
    rows<256>(std::make_integer_sequence<int, 8>{});
    return 0;
}
