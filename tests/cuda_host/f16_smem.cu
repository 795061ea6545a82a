// Prints decode_stage1_f16's launch geometry as the kernel source computes it (host side of its
// constexpr helpers): "G W NB tier_a -> pipes smem_bytes min_blocks", for the launch layer's
// mirror in witcert_cupy/_cuda.py (tests/test_cuda_compile.py).
#include <cstdio>
#include "decode_f16_geometry.cuh"

int main() {
    for (int G = 1; G <= 8; ++G)
        for (int W = 1; W <= 2; ++W)
            for (int NB : {1, 2, 16, 64})
                for (int a = 0; a <= 1; ++a)
                    std::printf("%d %d %d %d -> %d %d %d %d\n", G, W, NB, a, f16_pipes(W), f16_smem_bytes(G, W, NB, a),
                                f16_min_blocks(G, W, false), f16_min_blocks(G, W, true));
    return 0;
}
