#!/usr/bin/env python3
"""A small GPU load with nothing but the driver: the CUDA driver API through ctypes, and a
kernel written in PTX that the driver compiles (no CUDA toolkit, no PyTorch).

    python3 benches/gpu_load.py [--seconds 50] [--device 0] [--kind tensor|fma]

`tensor` (the default, sm_80 and later) keeps the tensor cores busy with `mma.sync`, so
GPM's tensor activity and DCGM_FI_PROF_PIPE_TENSOR_ACTIVE move; `fma` is a plain FP32 loop
(utilisation without tensor work); when the tensor kernel cannot be loaded the FMA one is used.
Prints one line per second: kernels launched and the kind.
"""

import argparse
import ctypes
import sys
import time

HEAD = rb"""
.version 7.0
.target sm_80
.address_size 64
"""

FMA = HEAD + rb"""
.visible .entry fma_spin(.param .u64 out, .param .u32 iters)
{
    .reg .pred p;
    .reg .f32 a, b, c;
    .reg .u32 i, n;
    .reg .u64 ptr;
    ld.param.u64 ptr, [out];
    ld.param.u32 n, [iters];
    mov.f32 a, 0f3F800000;
    mov.f32 b, 0f3F7FFFFF;
    mov.f32 c, 0f00000000;
    mov.u32 i, 0;
LOOP_F:
    fma.rn.f32 c, a, b, c;
    fma.rn.f32 a, c, b, a;
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP_F;
    cvta.to.global.u64 ptr, ptr;
    st.global.f32 [ptr], c;
    ret;
}
"""

TENSOR = HEAD + rb"""
.visible .entry tensor_spin(.param .u64 out, .param .u32 iters)
{
    .reg .pred p;
    .reg .b32 a<4>, b<2>;
    .reg .f32 d<4>;
    .reg .u32 i, n;
    .reg .u64 ptr;
    ld.param.u64 ptr, [out];
    ld.param.u32 n, [iters];
    mov.b32 a0, 0x3C003C00;
    mov.b32 a1, 0x3C003C00;
    mov.b32 a2, 0x3C003C00;
    mov.b32 a3, 0x3C003C00;
    mov.b32 b0, 0x3C003C00;
    mov.b32 b1, 0x3C003C00;
    mov.f32 d0, 0f00000000;
    mov.f32 d1, 0f00000000;
    mov.f32 d2, 0f00000000;
    mov.f32 d3, 0f00000000;
    mov.u32 i, 0;
LOOP_T:
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0, b1}, {d0, d1, d2, d3};
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP_T;
    cvta.to.global.u64 ptr, ptr;
    st.global.f32 [ptr], d0;
    ret;
}
"""


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUDA error {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=50.0)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--kind", choices=["tensor", "fma"], default="tensor")
    args = ap.parse_args()
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        sys.exit(f"gpu_load: no CUDA driver library: {e}")
    dev, ctx, mod, fn, buf = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    check(cu.cuInit(0), "cuInit")
    check(cu.cuDeviceGet(ctypes.byref(dev), args.device), "cuDeviceGet")
    check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    kind = args.kind
    if kind == "tensor":
        rc = cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(TENSOR))
        if rc == 0:
            check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"tensor_spin"), "cuModuleGetFunction")
        else:
            print(f"gpu_load: the tensor kernel does not load (CUDA error {rc}); using FMA", flush=True)
            kind = "fma"
    if kind == "fma":
        check(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(FMA)), "cuModuleLoadData (PTX JIT)")
        check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"fma_spin"), "cuModuleGetFunction")
    check(cu.cuMemAlloc_v2(ctypes.byref(buf), 4), "cuMemAlloc")
    sms = ctypes.c_int()
    # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    check(cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev), "cuDeviceGetAttribute")
    iters = ctypes.c_uint32(200_000)
    out = ctypes.c_uint64(buf.value)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(iters), ctypes.c_void_p))
    end = time.monotonic() + args.seconds
    launched, last = 0, time.monotonic()
    while time.monotonic() < end:
        check(cu.cuLaunchKernel(fn, sms.value * 4, 1, 1, 128, 1, 1, 0, None, params, None), "cuLaunchKernel")
        check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        launched += 1
        if time.monotonic() - last >= 1.0:
            print(f"gpu_load: {launched} {kind} kernels on {sms.value} SMs", flush=True)
            last = time.monotonic()
    cu.cuMemFree_v2(buf)
    cu.cuCtxDestroy_v2(ctx)


if __name__ == "__main__":
    main()
