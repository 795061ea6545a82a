// bench_floor.cu — the arithmetic floor of a certified INT8 decode, for bench/decode_floor.py
// (issue 5: "if a goal is out of reach, the notes must show the measured floor and why").
//
// Each level streams a KV cache laid out like one layer of the pool (rows of 128 int8 codes, NG
// fp16 scales per row) with 16-byte loads and does strictly less work per element than any decode
// that meets SPEC §2–§6, so its time lower-bounds every such kernel on the same bytes:
//   L0: the loads only (codes + scales, XOR-folded): the bytes floor;
//   L1: + one Philox4x32-10 call per 16 codes (SPEC §2: the dither stream at 8 bits);
//   L2: + x̂ = fl(s·(k − ξ)) in fp32 (dequant.cuh: the shipped 4 instructions per element);
//   L3: + G fp32 FMAs per element (a decode multiplies each K̂ element by G query heads and each V̂
//       element by G probabilities; here into G·4 register accumulators: no shared memory, no
//       reductions, no softmax, no certificate).
// A thread takes half a row (64 channels, 4 Philox calls), grid-stride.  The sink is written so
// nothing is dead code; its value means nothing.
// The fp16-store ladder (bench_floor_f16_*) does the same for rows of 128 fp16 values (an
// Fp16Pool): F0 the loads; F1 + the fp32 conversion; F3 + G fp32 FMAs per element.
#include "common.cuh"
#include "philox.cuh"
#include "dequant.cuh"

#define BF_THREADS 256
#define BF_D 128

// the G·4 FMA coefficients (runtime values, so nothing folds) and zeroed accumulators
template <int G>
__device__ __forceinline__ void bf_start(const float* __restrict__ coef, float (&cf)[G][4], float (&acc)[G][4]) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            cf[g][e] = coef[4 * g + e];
            acc[g][e] = 0.0f;
        }
}

// everything a thread computed, into the sink (so no level is dead code)
template <int G>
__device__ __forceinline__ void bf_finish(u32 fold, const float (&acc)[G][4], float* __restrict__ sink) {
    float r = (float)fold;
#pragma unroll
    for (int g = 0; g < G; ++g) r += acc[g][0] + acc[g][1] + acc[g][2] + acc[g][3];
    sink[(i64)blockIdx.x * BF_THREADS + threadIdx.x] = r;
}

template <int LEVEL, int G>
__device__ __forceinline__ void bench_floor_body(const i8* __restrict__ codes, const u16* __restrict__ scales,
                                                 i64 rows, int gs_shift, u32 k0, u32 k1,
                                                 const float* __restrict__ coef, float* __restrict__ sink) {
    const int NG = BF_D >> gs_shift;
    float cf[G][4], acc[G][4];
    bf_start<G>(coef, cf, acc);
    u32 fold = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        const i64 row = it >> 1;
        const int c0 = (int)(it & 1) * 64;
        int4 raw[4];
        u16 sr[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            raw[k] = reinterpret_cast<const int4*>(codes + row * BF_D + c0)[k];
            sr[k] = scales[row * NG + ((c0 + 16 * k) >> gs_shift)];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (LEVEL == 0) {
                fold ^= (u32)raw[k].x ^ (u32)raw[k].y ^ (u32)raw[k].z ^ (u32)raw[k].w ^ (u32)sr[k];
                continue;
            }
            const u32x4 w = philox10((u32)row, dither_ctr1(0, (c0 >> 4) + k), 0u, 0u, k0, k1);
            if (LEVEL == 1) {
                fold ^= (u32)raw[k].x ^ (u32)raw[k].y ^ (u32)raw[k].z ^ (u32)raw[k].w ^ (u32)sr[k] ^ w.x ^ w.y ^
                        w.z ^ w.w;
                continue;
            }
            const u32 cw[4] = {(u32)raw[k].x, (u32)raw[k].y, (u32)raw[k].z, (u32)raw[k].w};
            const u32 xw[4] = {w.x, w.y, w.z, w.w};
            float x[16];
            dequant16_u8(cw, xw, f16_to_f32(sr[k]), x);
#pragma unroll
            for (int e = 0; e < 16; ++e) {
                if (LEVEL == 2) {
                    acc[0][e & 3] += x[e];
                } else {
#pragma unroll
                    for (int g = 0; g < G; ++g) acc[g][e & 3] = __fmaf_rn(cf[g][e & 3], x[e], acc[g][e & 3]);
                }
            }
        }
    }
    bf_finish<G>(fold, acc, sink);
}

template <int LEVEL, int G>
__device__ __forceinline__ void bench_floor_f16_body(const u16* __restrict__ vals, i64 rows,
                                                     const float* __restrict__ coef, float* __restrict__ sink) {
    float cf[G][4], acc[G][4];
    bf_start<G>(coef, cf, acc);
    u32 fold = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        const uint4* src = reinterpret_cast<const uint4*>(vals + (it >> 1) * BF_D + (int)(it & 1) * 64);
        uint4 raw[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) raw[k] = src[k];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const u32 wd[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
            if (LEVEL == 0) {
                fold ^= wd[0] ^ wd[1] ^ wd[2] ^ wd[3];
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float x = f16_to_f32((u16)(wd[e / 2] >> (16 * (e % 2))));
                    if (LEVEL == 1) {
                        acc[0][e & 3] += x;
                    } else {
#pragma unroll
                        for (int g = 0; g < G; ++g) acc[g][e & 3] = __fmaf_rn(cf[g][e & 3], x, acc[g][e & 3]);
                    }
                }
            }
        }
    }
    bf_finish<G>(fold, acc, sink);
}

#define WC_FLOOR_F16_ENTRY(NAME, LEVEL, G)                                                                  \
    extern "C" __global__ void __launch_bounds__(BF_THREADS) NAME(                                         \
        const u16* __restrict__ vals, i64 rows, const float* __restrict__ coef, float* __restrict__ sink) { \
        bench_floor_f16_body<LEVEL, G>(vals, rows, coef, sink);                                            \
    }

WC_FLOOR_F16_ENTRY(bench_floor_f16_l0, 0, 1)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l1, 1, 1)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l3_g4, 3, 4)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l3_g7, 3, 7)

#define WC_FLOOR_ENTRY(NAME, LEVEL, G)                                                                      \
    extern "C" __global__ void __launch_bounds__(BF_THREADS) NAME(                                         \
        const i8* __restrict__ codes, const u16* __restrict__ scales, i64 rows, int gs_shift, u32 k0, u32 k1, \
        const float* __restrict__ coef, float* __restrict__ sink) {                                        \
        bench_floor_body<LEVEL, G>(codes, scales, rows, gs_shift, k0, k1, coef, sink);                     \
    }

WC_FLOOR_ENTRY(bench_floor_l0, 0, 1)
WC_FLOOR_ENTRY(bench_floor_l1, 1, 1)
WC_FLOOR_ENTRY(bench_floor_l2, 2, 1)
WC_FLOOR_ENTRY(bench_floor_l3_g4, 3, 4)
WC_FLOOR_ENTRY(bench_floor_l3_g7, 3, 7)
