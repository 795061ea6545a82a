// decode_f16_geometry.cuh — decode_stage1_f16's launch geometry (cuda/decode_f16.cu): tile, splits
// per CTA, dynamic shared memory and the register budget's CTAs per SM, as constexpr functions of
// the template arguments.  A header of its own so that the host can run them too: the launch
// layer's mirror (witcert_cupy/_cuda/) is checked against them (tests/cuda_host/f16_smem.cu).
#pragma once

#define F16_TILE 32
#define F16_D 128

// One-warp pipelines per CTA: each warp serves its own split with its own tile buffers, the CTA
// loads the query (and the band norms) once.  Why: registers allow 12 one-warp pipelines per SM
// (168 each), shared memory 10 one-warp CTAs (21 KB each plus the 1 KB the SM keeps per CTA); three
// CTAs of four fit 12 (docs/performance.md).
#define F16_PIPES 4

// 32-bit words per staged K row: a quarter-warp's 16-byte reads of 8 rows (lane = token) fall on
// distinct banks
#define F16_KP (F16_D / 2 + 4)

// per warp: its K tile [32][KP] and V tile [32][64] (words of fp16 pairs) and its copy of the
// probabilities [G][32] (float)
__host__ __device__ constexpr int f16_warp_bytes(int G) { return F16_TILE * (F16_KP + F16_D / 2) * 4 + G * F16_TILE * 4; }

// dynamic shared memory in bytes, in this order: the query [G][128] (float); each warp's
// f16_warp_bytes; with a Tier-A certificate each pipeline's K witness rows [32][NB] (u16), then the
// heads' band norms [G][NB] (float).  Every part starts 16-byte aligned.
__host__ __device__ constexpr int f16_smem_bytes(int G, int NB, bool tier_a) {
    return G * F16_D * 4 + F16_PIPES * f16_warp_bytes(G) + (tier_a ? F16_PIPES * F16_TILE * NB * 2 + G * NB * 4 : 0);
}

// CTAs per SM the register budget is set for: 12 warps (168 registers) without a certificate; with
// one, λ's per-lane running sums (3·G registers) spill under that cap from G = 6 or 7 up (ptxas,
// CUDA 13.0): no cap.
__host__ __device__ constexpr int f16_min_blocks(bool cert) { return cert ? 1 : 12 / F16_PIPES; }
