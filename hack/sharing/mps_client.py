#!/usr/bin/env python3
"""One CUDA client for prove-mps.sh, on the CUDA driver API through ctypes (no nvcc, no CUDA toolkit).

  mps_client.py alloc <MiB>          allocate <MiB> on device 0; exit 0 if it succeeded, 3 if the driver
                                     refused it (CUDA_ERROR_OUT_OF_MEMORY), 1 on any other error
  mps_client.py spin <blocks/SM> <iterations>
                                     run a busy FMA kernel (PTX, JIT-compiled by the driver) on every SM
                                     and print the seconds it took

Run under MPS, the client takes its limits from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE like any CUDA program.
"""
import ctypes
import sys
import time

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16

# A kernel that keeps its thread busy for `iters` dependent FMAs, then stores one result per block.
PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 iters)
{
  .reg .pred p<2>;
  .reg .b32 r<4>;
  .reg .f32 f<3>;
  .reg .b64 rd<3>;
  ld.param.u64 rd1, [out];
  ld.param.u32 r1, [iters];
  mov.f32 f1, 0f3F800000;
  mov.f32 f2, 0f3F000000;
  mov.u32 r2, 0;
LOOP:
  fma.rn.f32 f1, f1, f2, f2;
  add.u32 r2, r2, 1;
  setp.lt.u32 p0, r2, r1;
  @p0 bra LOOP;
  mov.u32 r3, %tid.x;
  setp.ne.u32 p1, r3, 0;
  @p1 bra DONE;
  cvta.to.global.u64 rd2, rd1;
  st.global.f32 [rd2], f1;
DONE:
  ret;
}
"""


def check(cu, what, rc):
    if rc != CUDA_SUCCESS:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what}: {name.value.decode() if name.value else rc}")


def context():
    cu = ctypes.CDLL("libcuda.so.1")
    check(cu, "cuInit", cu.cuInit(0))
    dev = ctypes.c_int()
    check(cu, "cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check(cu, "cuCtxCreate", cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
    return cu, dev


def alloc(mib):
    cu, _ = context()
    ptr = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))
    if rc == CUDA_ERROR_OUT_OF_MEMORY:
        print(f"alloc {mib} MiB: refused (CUDA_ERROR_OUT_OF_MEMORY)")
        return 3
    check(cu, f"cuMemAlloc {mib} MiB", rc)
    # Touch it, so a lazily backed allocation is really backed.
    check(cu, "cuMemsetD8", cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(mib << 20)))
    check(cu, "cuCtxSynchronize", cu.cuCtxSynchronize())
    print(f"alloc {mib} MiB: ok")
    return 0


def spin(blocks_per_sm, iters):
    cu, dev = context()
    sms = ctypes.c_int()
    check(cu, "cuDeviceGetAttribute", cu.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(cu, "cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)))
    check(cu, "cuModuleGetFunction", cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"))
    out = ctypes.c_uint64()
    check(cu, "cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(4)))
    n = ctypes.c_uint32(iters)
    args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p), ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    grid = sms.value * blocks_per_sm

    def launch():
        check(cu, "cuLaunchKernel", cu.cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, None, args, None))
        check(cu, "cuCtxSynchronize", cu.cuCtxSynchronize())

    launch()  # warm-up: JIT, MPS server start
    start = time.perf_counter()
    launch()
    took = time.perf_counter() - start
    print(f"{took:.4f}")
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] == "alloc":
        return alloc(int(argv[1]))
    if len(argv) == 3 and argv[0] == "spin":
        return spin(int(argv[1]), int(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
