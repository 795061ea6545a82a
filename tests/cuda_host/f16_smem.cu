// Prints decode_stage1_f16's launch geometry as the kernel source computes it (host side of its
// constexpr helpers): "G NB tier_a -> pipes smem_bytes min_blocks", for the launch layer's
// mirror in witcert_cupy/_cuda/ (tests/test_cuda_compile.py).
#include <cstdio>
#include "decode_f16_geometry.cuh"

int main() {
    for (int G = 1; G <= 8; ++G)
        for (int NB : {1, 2, 16, 64})
            for (int a = 0; a <= 1; ++a)
                std::printf("%d %d %d -> %d %d %d %d\n", G, NB, a, F16_PIPES, f16_smem_bytes(G, NB, a),
                            f16_min_blocks(false), f16_min_blocks(true));
    return 0;
}
