// cp_async.cuh — asynchronous global → shared copies (sm_80+), shared by the kernels that stage
// the next tile's rows while computing this one (decode_v2.cu, decode_f16.cu, extend_tc.cu).
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__
WC_D u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// 16 bytes, bypassing L1 (streamed codes are read once)
WC_D void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
}

// 16 bytes, or 16 zero bytes when !valid (nothing is read: a row past a split's end lands as zeros,
// so a product with its zero weight cannot turn a non-finite stored value into NaN)
WC_D void cp_async16_zfill(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16u : 0u));
}

// the same at shared address `sbase` + OFF (an immediate of the instruction: a tile's rows at fixed
// offsets from one base take no register each)
template <int OFF>
WC_D void cp_async16_zfill_at(u32 sbase, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1], 16, %2;" ::"r"(sbase), "l"(src), "r"(valid ? 16u : 0u),
                 "n"(OFF));
}

// 16 bytes from global address `src` + GOFF to shared address `sbase` + SOFF (both immediates of
// the instruction: a run of rows at fixed offsets from one source and one destination base)
template <int SOFF, int GOFF>
WC_D void cp_async16_at(u32 sbase, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%3], 16;" ::"r"(sbase), "l"(src), "n"(SOFF), "n"(GOFF));
}

WC_D void cp_async8(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_addr(dst)), "l"(src));
}

WC_D void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src));
}

WC_D void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// all but this thread's N most recent groups have landed and are visible to it
template <int N>
WC_D void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// this thread's copies have landed and are visible to it (other threads' need a barrier)
WC_D void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#endif
