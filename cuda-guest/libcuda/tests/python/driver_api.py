"""NVIDIA's Python bindings (cuda-bindings 12.x) on the shim: they resolve every entry
point through cuGetProcAddress_v2. Vector add with the PTX given as argv[1].
Usage: LD_LIBRARY_PATH=<dir with libcuda.so.1> python3 driver_api.py vector_add.ptx"""
import sys
import ctypes
from cuda.bindings import driver as cu

def ok(r):
    err = r[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"error {err}")
    return r[1:] if len(r) > 2 else (r[1] if len(r) == 2 else None)

ok(cu.cuInit(0))
print("driver", ok(cu.cuDriverGetVersion()))
dev = ok(cu.cuDeviceGet(0))
name = ok(cu.cuDeviceGetName(64, dev))
print("name", name.split(b"\0")[0].decode())
ctx = ok(cu.cuCtxCreate(0, dev))
ptx = open(sys.argv[1], "rb").read() + b"\0"
mod = ok(cu.cuModuleLoadData(ptx))
fn = ok(cu.cuModuleGetFunction(mod, b"vector_add"))
n = 1000
F = ctypes.c_float * n
a = F(*[float(i) for i in range(n)]); b = F(*([0.5] * n)); c = F()
nb = ctypes.sizeof(a)
da = ok(cu.cuMemAlloc(nb)); db = ok(cu.cuMemAlloc(nb)); dc = ok(cu.cuMemAlloc(nb))
stream = ok(cu.cuStreamCreate(0))
ok(cu.cuMemcpyHtoDAsync(da, ctypes.addressof(a), nb, stream))
ok(cu.cuMemcpyHtoDAsync(db, ctypes.addressof(b), nb, stream))
args = [ctypes.c_uint64(int(da)), ctypes.c_uint64(int(db)), ctypes.c_uint64(int(dc)), ctypes.c_int32(n)]
ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(x) for x in args])
ok(cu.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(ptrs), 0))
ok(cu.cuMemcpyDtoHAsync(ctypes.addressof(c), dc, nb, stream))
ok(cu.cuStreamSynchronize(stream))
assert all(c[i] == a[i] + b[i] for i in range(n)), list(c[:5])
err, s = cu.cuGetErrorName(cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)
print("errname", s)
free, total = ok(cu.cuMemGetInfo())
print("meminfo", free <= total)
ok(cu.cuCtxDestroy(ctx))
print("python: vector_add OK")
