// cp_async.cuh — asynchronous global → shared copies (sm_80+), shared by the kernels that stage
// the next tile's rows while computing this one (decode_v2.cu, decode_f16.cu, extend_tc.cu); and
// the sm_90 bulk copy on an mbarrier that decode_merge (decode.cu) prefetches a cell's rows with; and
// the L2 prefetch of rows a kernel reads with plain loads later (decode_i8.cuh's exact tier).
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__
WC_D u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// the 128-byte line holding `p` brought into L2 (no register written, nothing waits for it)
WC_D void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

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

// 8 bytes, or 8 zero bytes when !valid (nothing is read)
WC_D void cp_async8_zfill(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 8u : 0u));
}

WC_D void cp_async8(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_addr(dst)), "l"(src));
}

// 4 bytes, or 4 zero bytes when !valid (nothing is read)
WC_D void cp_async4_zfill(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4u : 0u));
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

#if __CUDA_ARCH__ >= 900
// One bulk copy (sm_90's tensor memory access unit) from global to shared memory, completing on an
// mbarrier: one instruction from one thread for a whole block, where cp.async takes one per 16
// bytes per thread and holds the threads that issue them while the load/store queue drains.
// Protocol: one thread mbar_init(bar, 1), mbar_fence_init(), mbar_expect_tx(bar, bytes),
// bulk_copy_g2s(...); after a CTA barrier any thread may mbar_wait(bar, 0), which returns once the
// bytes have landed and makes them visible to that thread.

// an mbarrier at shared address `bar` expecting `count` arrivals per phase
WC_D void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// the initialisation visible to the bulk copy unit
WC_D void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// this thread's arrival, and `bytes` more for the phase to wait for
WC_D void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from `src` to shared address `dst`,
// counted on the mbarrier at `bar`
WC_D void bulk_copy_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// until the mbarrier's phase of parity `parity` has completed
WC_D void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}
#endif
#endif
