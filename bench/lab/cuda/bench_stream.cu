// bench_stream.cu — how fast can a kernel read a KV cache's bytes, by load pattern?  For
// bench/lab/stream_floor.py (issue 5, the fp16-store goal: docs/performance.md).
//
// torch SDPA reads an fp16 cache at 4.3–4.5 TB/s; our fp16-store decode at 3.4–3.8, and so did the
// loads-only F0 level of bench_floor.cu (3.2–3.4), whatever the arithmetic.  So the question is the
// pattern, not the work: these kernels read a buffer of bytes and XOR-fold them (the sink keeps the
// loads alive; its value means nothing), each with one of the patterns a decode could use:
//   stream_ldg<U>:     grid-stride, 16 bytes a thread per load, U loads in flight per thread (F0's
//                      pattern with U = 8);
//   stream_cpasync<S>: a warp per contiguous chunk (a split), tiles of `tile` bytes through S
//                      shared-memory stages by cp.async (16 bytes a lane a copy), consumed from
//                      shared memory (the decode kernels' pattern with S = 1: the next tile is
//                      issued once this one is read);
//   stream_bulk<S>:    the same chunks and stages, each tile one cp.async.bulk by lane 0 on the
//                      stage's mbarrier (sm_90's copy unit; no per-16-byte instruction).
// A CTA holds `blockDim.x / 32` independent warps (their own chunks and stages).
#include "common.cuh"
#include "cp_async.cuh"

// the 16-byte pieces of `n` bytes at `p` (16-byte aligned), lane-strided, XOR-folded into `acc`
WC_D u32 fold_smem(const uint4* p, int n16, int lane, u32 acc) {
    for (int i = lane; i < n16; i += 32) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    return acc;
}

template <int U>
__device__ __forceinline__ void stream_ldg_body(const uint4* __restrict__ src, i64 n16, u32* __restrict__ sink) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    u32 acc = 0;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sink[(i64)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// cp.async stages: warp w of the grid reads bytes [w·chunk, (w + 1)·chunk) in tiles of `tile` bytes
// (chunk a multiple of tile, tile of 512); stage k of the warp's S at smem + (warp·S + k)·tile
template <int S>
__device__ __forceinline__ void stream_cpasync_body(const char* __restrict__ src, i64 chunk, int tile,
                                                    u32* __restrict__ sink) {
    extern __shared__ __align__(16) char sm_[];
    const int lane = threadIdx.x & 31, wl = threadIdx.x >> 5;
    const i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + wl;
    const char* base = src + w * chunk;
    char* stg = sm_ + (i64)wl * S * tile;
    const int ntiles = (int)(chunk / tile), n16 = tile / 16;
    auto issue = [&](int t) {
        char* dst = stg + (t % S) * tile;
        const char* s0 = base + (i64)t * tile;
        for (int i = lane; i < n16; i += 32) cp_async16(dst + 16 * i, s0 + 16 * i);
    };
#pragma unroll
    for (int t = 0; t < S; ++t) {
        if (t < ntiles) issue(t);
        cp_async_commit();
    }
    u32 acc = 0;
    for (int t = 0; t < ntiles; ++t) {
        cp_async_wait_group<S - 1>();
        __syncwarp();
        acc = fold_smem(reinterpret_cast<const uint4*>(stg + (t % S) * tile), n16, lane, acc);
        __syncwarp();
        if (t + S < ntiles) issue(t + S);
        cp_async_commit();
    }
    sink[(i64)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int S>
__device__ __forceinline__ void stream_bulk_body(const char* __restrict__ src, i64 chunk, int tile,
                                                 u32* __restrict__ sink) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) char sm_[];
    __shared__ __align__(8) unsigned long long bars[32][S];
    const int lane = threadIdx.x & 31, wl = threadIdx.x >> 5;
    const i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + wl;
    const char* base = src + w * chunk;
    char* stg = sm_ + (i64)wl * S * tile;
    const int ntiles = (int)(chunk / tile), n16 = tile / 16;
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < S; ++k) mbar_init(smem_addr(&bars[wl][k]), 1);
        mbar_fence_init();
    }
    __syncwarp();
    auto issue = [&](int t) {  // lane 0
        const u32 bar = smem_addr(&bars[wl][t % S]);
        mbar_expect_tx(bar, (u32)tile);
        bulk_copy_g2s(smem_addr(stg + (t % S) * tile), base + (i64)t * tile, (u32)tile, bar);
    };
    if (lane == 0)
        for (int t = 0; t < S && t < ntiles; ++t) issue(t);
    u32 acc = 0;
    for (int t = 0; t < ntiles; ++t) {
        mbar_wait(smem_addr(&bars[wl][t % S]), (u32)((t / S) & 1));
        acc = fold_smem(reinterpret_cast<const uint4*>(stg + (t % S) * tile), n16, lane, acc);
        __syncwarp();  // every lane has read the stage before it is refilled
        if (lane == 0 && t + S < ntiles) issue(t + S);
    }
    sink[(i64)blockIdx.x * blockDim.x + threadIdx.x] = acc;
#else
    (void)src, (void)chunk, (void)tile, (void)sink;
#endif
}

#define WC_STREAM_LDG(U)                                                                                  \
    extern "C" __global__ void stream_ldg_u##U(const uint4* __restrict__ src, i64 n16, u32* __restrict__ sink) { \
        stream_ldg_body<U>(src, n16, sink);                                                               \
    }
WC_STREAM_LDG(1)
WC_STREAM_LDG(4)
WC_STREAM_LDG(8)
WC_STREAM_LDG(16)

#define WC_STREAM_STAGED(KIND, S)                                                                          \
    extern "C" __global__ void stream_##KIND##_s##S(const char* __restrict__ src, i64 chunk, int tile,      \
                                                   u32* __restrict__ sink) {                              \
        stream_##KIND##_body<S>(src, chunk, tile, sink);                                                   \
    }
WC_STREAM_STAGED(cpasync, 1)
WC_STREAM_STAGED(cpasync, 2)
WC_STREAM_STAGED(cpasync, 3)
WC_STREAM_STAGED(cpasync, 4)
WC_STREAM_STAGED(bulk, 1)
WC_STREAM_STAGED(bulk, 2)
WC_STREAM_STAGED(bulk, 3)
WC_STREAM_STAGED(bulk, 4)
