// Host-side check of cuda/philox.cuh: prints Philox outputs for the SPEC §1 known-answer inputs.
// Built and run by tests/test_cuda_compile.py (no GPU needed: host code only).
#include <cstdio>
#include "philox.cuh"

int main() {
    const u32 in[4][7] = {
        {0u, 0u, 0u, 0u, 0u, 0u, 10u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 10u},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 10u},
        {0u, 0u, 0u, 0u, 0u, 0u, 7u},
    };
    for (int i = 0; i < 4; ++i) {
        const u32* c = in[i];
        u32x4 o = c[6] == 10u ? philox10(c[0], c[1], c[2], c[3], c[4], c[5])
                              : philox4x32_rounds(c[0], c[1], c[2], c[3], c[4], c[5], (int)c[6]);
        std::printf("%u %08x %08x %08x %08x\n", c[6], o.x, o.y, o.z, o.w);
    }
    // the dither field of SPEC §2 on the host: ξ numerators of lane 0..3 at 8 bits for word 0x04030201
    u32x4 w = {0x04030201u, 0u, 0u, 0u};
    for (int lane = 0; lane < 4; ++lane) std::printf("xi %d\n", (int)(xi_of(w, lane, 8) * 512.0f));
    return 0;
}
