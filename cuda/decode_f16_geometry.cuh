// decode_f16_geometry.cuh — decode_stage1_f16's launch geometry (cuda/decode_f16.cu): tile, splits
// per CTA, dynamic shared memory and the register budget's CTAs per SM, as constexpr functions of
// the template arguments.  A header of its own so that the host can run them too: the launch
// layer's mirror (witcert_cupy/_cuda.py) is checked against them (tests/cuda_host/f16_smem.cu).
#pragma once

#define F16_TILE 32
#define F16_D 128

// One-warp pipelines per CTA (W = 1): each warp serves its own split with its own tile buffers,
// the CTA loads the query (and the band norms) once.  Why: registers allow 12 one-warp pipelines
// per SM (168 each), shared memory 10 one-warp CTAs (21 KB each plus the 1 KB the SM keeps per
// CTA); three CTAs of four fit 12 (bench/NOTES.md, session 11).
#ifndef F16_PIPES
#define F16_PIPES 4
#endif
__host__ __device__ constexpr int f16_pipes(int W) { return W == 1 ? F16_PIPES : 1; }

// 32-bit words per staged K row: a quarter-warp's 16-byte reads of 8 rows (lane = token) fall on
// distinct banks
__host__ __device__ constexpr int f16_kp(int W) { return F16_D / W / 2 + 4; }

// per warp: its K tile [32][KP] and V tile [32][128/(2W)] (words of fp16 pairs) and its copy of the
// probabilities [G][32] (float)
__host__ __device__ constexpr int f16_warp_bytes(int G, int W) {
    return F16_TILE * (f16_kp(W) + F16_D / W / 2) * 4 + G * F16_TILE * 4;
}

// dynamic shared memory in bytes, in this order: the query [G][128] (float); each warp's
// f16_warp_bytes; W = 2: the partial dot products [2 parities][W][G][32] (float); with a Tier-A
// certificate each pipeline's K witness rows [32][NB] (u16), then the heads' band norms [G][NB]
// (float).  Every part starts 16-byte aligned.
__host__ __device__ constexpr int f16_smem_bytes(int G, int W, int NB, bool tier_a) {
    return G * F16_D * 4 + W * f16_pipes(W) * f16_warp_bytes(G, W) + (W == 2 ? 2 * W * G * F16_TILE * 4 : 0) +
           (tier_a ? f16_pipes(W) * F16_TILE * NB * 2 + G * NB * 4 : 0);
}

// CTAs per SM the register budget is set for.  The register file is four quadrants, one per
// scheduler, so n warps per SM allow 16384 / (⌈n/4⌉·32) registers a thread.  Without a
// certificate: W = 2, 8 CTAs (16 warps, 128 registers; shared memory allows 8–10) up to G = 7 and
// 6 at G = 8 (168: NVRTC 13.0 spills at 128); W = 1, 12 warps (168).  With one, λ's per-lane running
// sums (3·G registers) spill under those caps from G = 6 or 7 up (ptxas, CUDA 13.0): W = 2 takes 6
// CTAs up to G = 6 (168), else 4 (255); W = 1 no cap.
__host__ __device__ constexpr int f16_min_blocks(int G, int W, bool cert) {
    return cert ? (W == 1 ? 1 : (G <= 6 ? 6 : 4)) : (W == 1 ? 12 / F16_PIPES : (G <= 7 ? 8 : 6));
}
