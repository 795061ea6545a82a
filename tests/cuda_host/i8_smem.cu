// Prints sizeof(I8Smem<D>) of decode_stage1_i8 (cuda/decode_i8.cuh) for each head dim: "D bytes",
// for the launch layer's mirror, witcert_cupy/_cuda/geometry.py's i8_smem_bytes
// (tests/test_cuda_compile.py).
#include <cstdio>
#include "decode_i8_geometry.cuh"

int main() {
    std::printf("64 %zu\n128 %zu\n256 %zu\n", sizeof(I8Smem<64>), sizeof(I8Smem<128>), sizeof(I8Smem<256>));
    return 0;
}
