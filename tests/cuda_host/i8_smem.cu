// Prints sizeof(I8Smem<D>) of decode_stage1_i8 (cuda/decode_i8.cuh), I8_EXACT_SMEM(D) (what the
// exact tier adds), I8_TIER_A_SMEM(D, NB) at 8 and 64 bands and I8_OUTL_SMEM(D, NP2) at 4 and
// I8_OUTL_MAX outlier channels for each head dim, and sizeof(I8Smem<D, 16>) (16-bit dither):
// "D bytes exact a8 a64 o4 omax bytes16",
// for the launch layer's mirror, witcert_cupy/_cuda/geometry.py's i8_smem_bytes
// (tests/test_cuda_compile.py).
#include <cstdio>
#include "decode_i8_geometry.cuh"

int main() {
    std::printf("64 %zu %d %d %d %d %d %zu\n", sizeof(I8Smem<64>), I8_EXACT_SMEM(64), I8_TIER_A_SMEM(64, 8),
                I8_TIER_A_SMEM(64, 64), I8_OUTL_SMEM(64, 4), I8_OUTL_SMEM(64, I8_OUTL_MAX), sizeof(I8Smem<64, 16>));
    std::printf("128 %zu %d %d %d %d %d %zu\n", sizeof(I8Smem<128>), I8_EXACT_SMEM(128), I8_TIER_A_SMEM(128, 8),
                I8_TIER_A_SMEM(128, 64), I8_OUTL_SMEM(128, 4), I8_OUTL_SMEM(128, I8_OUTL_MAX), sizeof(I8Smem<128, 16>));
    std::printf("256 %zu %d %d %d %d %d %zu\n", sizeof(I8Smem<256>), I8_EXACT_SMEM(256), I8_TIER_A_SMEM(256, 8),
                I8_TIER_A_SMEM(256, 64), I8_OUTL_SMEM(256, 4), I8_OUTL_SMEM(256, I8_OUTL_MAX), sizeof(I8Smem<256, 16>));
    return 0;
}
