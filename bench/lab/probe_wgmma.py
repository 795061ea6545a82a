"""Device probe for the next extend kernel (issue 6): can this CuPy build sm_90a code (wgmma needs
it), and do our descriptors read the dequantized tile layout the way we think?

    PYTHONPATH=. python3 bench/lab/probe_wgmma.py

One warpgroup computes D1 = A·Bᵀ (A 64×128 from registers, B 64 tokens × 128 channels from shared
memory: the QK product, K-major B) with eight m64n64k16 wgmma, and D2 = P·V (P 64×64 from
registers, V 64 tokens × 128 channels: the PV product, MN-major B) with four m64n128k16 wgmma.
Both shared tiles use one layout, 8×8 core matrices of 128 bytes: element (t, c) at byte
(t/8)·2048 + (c/8)·128 + (t%8)·16 + (c%8)·2.  Prints which compile route worked and the errors
against float64."""

import inspect
import os
import sys
import tempfile

import numpy as np
import cupy as cp

SRC = r'''
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// no-swizzle descriptor: start, leading (LBO) and stride (SBO) byte offsets, all >> 4
__device__ __forceinline__ u64 gdesc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32);
}

#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

__device__ __forceinline__ void wg_m64n64k16(float (&d)[32], const u32 (&a)[4], u64 bdesc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
        : R8(0), R8(8), R8(16), R8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(0), "r"(acc));
}

__device__ __forceinline__ void wg_m64n128k16_t(float (&d)[64], const u32 (&a)[4], u64 bdesc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1, %69;\n}\n"
        : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(1), "r"(acc));
}

__device__ __forceinline__ u32 tile_off(int t, int c) { return (t >> 3) * 2048 + (c >> 3) * 128 + (t & 7) * 16 + (c & 7) * 2; }

// A fragment of rows 16w.. (m16n8k16 layout) for k-step j of a row-major [64][ld] fp16 matrix
__device__ __forceinline__ void afrag(u32 (&a)[4], const u16* M, int ld, int j) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, grp = lane >> 2, tig = lane & 3;
    const u16* r0 = M + (16 * w + grp) * ld + 16 * j + 2 * tig;
    const u16* r1 = r0 + 8 * ld;
    a[0] = r0[0] | ((u32)r0[1] << 16);
    a[1] = r1[0] | ((u32)r1[1] << 16);
    a[2] = r0[8] | ((u32)r0[9] << 16);
    a[3] = r1[8] | ((u32)r1[9] << 16);
}

// the warpgroup's accumulator (nb blocks of 8 columns) into a row-major [64][ld] matrix
__device__ __forceinline__ void store_acc(float* D, int ld, const float* d, int nb) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, grp = lane >> 2, tig = lane & 3;
    for (int j = 0; j < nb; ++j) {
        const int m = 16 * w + grp, n = 8 * j + 2 * tig;
        D[m * ld + n] = d[4 * j];
        D[m * ld + n + 1] = d[4 * j + 1];
        D[(m + 8) * ld + n] = d[4 * j + 2];
        D[(m + 8) * ld + n + 1] = d[4 * j + 3];
    }
}

extern "C" __global__ void __launch_bounds__(128) wg_probe(const u16* A, const u16* B, const u16* P, const u16* V,
                                                           float* D1, float* D2) {
    __shared__ __align__(1024) u16 sB[64 * 128];
    __shared__ __align__(1024) u16 sV[64 * 128];
    for (int i = threadIdx.x; i < 64 * 128; i += 128) {
        const int t = i / 128, c = i % 128;
        sB[tile_off(t, c) / 2] = B[i];
        sV[tile_off(t, c) / 2] = V[i];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    u32 a[8][4];
    for (int j = 0; j < 8; ++j) afrag(a[j], A, 128, j);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int j = 0; j < 8; ++j) wg_m64n64k16(d, a[j], gdesc(smem_u32(sB) + 256 * j, 128, 2048), j > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store_acc(D1, 64, d, 8);
    float o[64];
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    u32 p[4][4];
    for (int kk = 0; kk < 4; ++kk) afrag(p[kk], P, 64, kk);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg_m64n128k16_t(o, p[kk], gdesc(smem_u32(sV) + 4096 * kk, 2048, 128), kk > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store_acc(D2, 128, o, 16);
}
'''


def routes():
    from cupy.cuda import compiler

    print("cupy", cp.__version__, "| _get_arch():", compiler._get_arch())
    for name in ("_get_arch", "_get_arch_for_options_for_nvrtc"):
        f = getattr(compiler, name, None)
        if f is not None:
            try:
                print(f"--- {name}\n" + inspect.getsource(f)[:1500])
            except Exception as e:  # noqa: BLE001
                print(name, "source unavailable:", e)

    def plain():
        return cp.RawModule(code=SRC, options=("-std=c++17",))

    def option_arch():
        return cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90a"))

    def patched_arch():
        old = compiler._get_arch
        compiler._get_arch = lambda: "90a"
        try:
            return cp.RawModule(code=SRC, options=("-std=c++17",))
        finally:
            compiler._get_arch = old

    def direct_nvrtc():
        from cupy.cuda import nvrtc

        prog = nvrtc.createProgram(SRC, "wg_probe.cu", [], [])
        try:
            nvrtc.compileProgram(prog, ["-std=c++17", "--gpu-architecture=sm_90a"])
        except Exception:
            print(nvrtc.getProgramLog(prog)[:2000])
            raise
        cubin = nvrtc.getCUBIN(prog)
        path = os.path.join(tempfile.mkdtemp(), "wg_probe.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return cp.RawModule(path=path)

    for name, build in (("plain", plain), ("option -arch=sm_90a", option_arch), ("_get_arch -> 90a", patched_arch),
                        ("nvrtc direct, cubin", direct_nvrtc)):
        try:
            mod = build()
            fn = mod.get_function("wg_probe")
            print(f"route [{name}]: compiled")
            yield name, fn
        except Exception as e:  # noqa: BLE001
            print(f"route [{name}]: {type(e).__name__}: {str(e)[:600]}")


def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 128)).astype(np.float16)
    B = rng.standard_normal((64, 128)).astype(np.float16)
    P = rng.uniform(0, 1, (64, 64)).astype(np.float16)
    V = rng.standard_normal((64, 128)).astype(np.float16)
    ref1 = A.astype(np.float64) @ B.astype(np.float64).T
    ref2 = P.astype(np.float64) @ V.astype(np.float64)
    ok = False
    for name, fn in routes():
        d1 = cp.zeros((64, 64), cp.float32)
        d2 = cp.zeros((64, 128), cp.float32)
        args = [cp.asarray(x.view(np.uint16)) for x in (A, B, P, V)]
        fn((1,), (128,), (*args, d1, d2))
        cp.cuda.Device().synchronize()
        e1 = float(np.abs(d1.get() - ref1).max() / np.abs(ref1).max())
        e2 = float(np.abs(d2.get() - ref2).max() / np.abs(ref2).max())
        print(f"route [{name}]: QK (K-major B) rel err {e1:.2e}, PV (MN-major B) rel err {e2:.2e}")
        ok = ok or (e1 < 1e-5 and e2 < 1e-5)
    print("wgmma probe:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
