// griddep.cuh — programmatic dependent launch (sm_90+), for the kernels of a decode step that the
// launch layer starts with the programmatic-serialization attribute (witcert_cupy/_cuda/pdl.py).
//
// Such a launch may begin while the previous kernel of the stream still runs, once all that
// kernel's CTAs have called griddep_launch_dependents (or exited).  griddep_wait then holds the
// thread until that kernel has completed and its writes are visible.  So every kernel launched this
// way calls griddep_wait before its first global read or write: its inputs (q, the page table, a
// stage's partials) and its outputs (o_part, which the previous step's merge may still be reading)
// are then ordered exactly as in a plain launch, and only the launch latency and the CTAs' start
// overlap the previous kernel.  Without the attribute both instructions do nothing.
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__
WC_D void griddep_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Why only the wait: a kernel may also signal early (griddepcontrol.launch_dependents), so that the
// next kernel's CTAs take SM slots while this one still runs, and the steps got slower: with the
// merge signalling at its start INT8 steps at B = 1 took 1.5–13 µs more (28/4 32k 74.4 µs against
// 61.8 without PDL); with stage 1 signalling early, 32/8 at B = 1 took 4–5 µs more; signals at the
// kernels' late points (stage 1 after its tile loop, the merge before its o loop) gained nothing.
// Signalled at exit (no explicit signal), PDL still overlaps the launch itself: 0.4–0.6 µs less per
// INT8 step at B = 1, 0.5–0.8 µs per fp16 step, the same at B ≥ 8.
#else
WC_D void griddep_wait() {}
#endif
