// griddep.cuh — programmatic dependent launch (sm_90+), for the kernels of a decode step that the
// launch layer starts with the programmatic-serialization attribute (witcert_cupy/_launch.py).
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

// the next kernel of the stream may be scheduled once every CTA of this one has called this (or
// exited).  Signalled at the start, the next kernel's CTAs take SM slots while this one still runs,
// and the steps got slower: with the merge signalling early (the next step's stage 1 then waits on
// the SMs through the merge) INT8 steps at B = 1 took 1.5–13 µs more (run 115: 28/4 32k 74.4 µs
// against 61.8 without PDL); with stage 1 signalling early, 32/8 at B = 1 took 4–5 µs more.  Why
// was not measured.  Signalled at exit (the default: no explicit signal), PDL still overlaps the
// launch itself: 0.4–0.6 µs less per INT8 step at B = 1, 0.5–0.8 µs per fp16 step, the same at
// B ≥ 8 (run 115).
WC_D void griddep_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// where a kernel signals: GD_AT_EXIT (no explicit signal), GD_AT_START, or GD_AT_LATE, a point
// near its end that the kernel names (griddep_late)
#define GD_AT_EXIT 0
#define GD_AT_START 1
#define GD_AT_LATE 2

// at a kernel's start: wait, then signal now (GD_AT_START) or later
WC_D void griddep_enter(int at) {
    griddep_wait();
    if (at == GD_AT_START) griddep_launch_dependents();
}

// at the kernel's late point: signal there (GD_AT_LATE)
WC_D void griddep_late(int at) {
    if (at == GD_AT_LATE) griddep_launch_dependents();
}
#endif

// where the stage-1 kernels and decode_merge signal (bench/decode_variants.py GD_STAGE1_EARLY=1
// and GD_MERGE_EARLY=1 time the start, =2 the late points; the measurements above).  The late
// points: decode_stage1_v2 after its tile loop, decode_merge before its o loop; decode_stage1 and
// decode_stage1_f16 have none (2 signals at their exit)
#ifndef GD_STAGE1_EARLY
#define GD_STAGE1_EARLY GD_AT_EXIT
#endif
#ifndef GD_MERGE_EARLY
#define GD_MERGE_EARLY GD_AT_EXIT
#endif
