"""What numba-cuda users write, on vmgpu's libcuda.so.1: each check runs a kernel and
compares with NumPy, printing "ok NAME" or "FAIL NAME: why"; the last line is
"numba_wide: N checks, M failed". Exit status 0 only when none failed.
Usage: LD_LIBRARY_PATH=<dir with libcuda.so.1> python3 numba_wide.py FIXTURES_DIR
(FIXTURES_DIR holds link_lib.cu and link_lib.ptx, see tests/python)."""
import math
import os
import sys
import traceback

import numpy as np
from numba import cuda, float32, float64, int32, uint32

HERE = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
checks = []


def check(fn):
    checks.append(fn)
    return fn


def close(got, want, rtol=1e-6, atol=0.0):
    if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        bad = np.argwhere(~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
        i = tuple(bad[0])
        raise AssertionError(f"at {i}: got {got[i]!r}, want {want[i]!r} ({len(bad)} differ)")


def equal(got, want):
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i = tuple(bad[0])
        raise AssertionError(f"at {i}: got {got[i]!r}, want {want[i]!r} ({len(bad)} differ)")


@check
def vector_add_and_grid():
    @cuda.jit
    def k(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 0.5, dtype=np.float32)
    out = np.zeros_like(a)
    k[8, 128](a, b, out)
    equal(out, a + b)


@check
def two_dimensional_grid():
    @cuda.jit
    def k(m):
        x, y = cuda.grid(2)
        if x < m.shape[0] and y < m.shape[1]:
            m[x, y] = x * 100 + y

    m = np.zeros((37, 45), dtype=np.int32)
    k[(3, 3), (16, 16)](m)
    equal(m, np.add.outer(np.arange(37) * 100, np.arange(45)).astype(np.int32))


@check
def shared_memory_block_reduction():
    @cuda.jit
    def k(a, out):
        s = cuda.shared.array(128, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * cuda.blockDim.x + t
        s[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
        step = 64
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    a = np.arange(1000, dtype=np.float32) % 7
    out = np.zeros(8, dtype=np.float32)
    k[8, 128](a, out)
    want = np.array([a[i * 128:(i + 1) * 128].sum() for i in range(8)], dtype=np.float32)
    close(out, want)


@check
def dynamic_shared_memory():
    @cuda.jit
    def k(out):
        s = cuda.shared.array(0, int32)
        t = cuda.threadIdx.x
        s[t] = t * 3
        cuda.syncthreads()
        out[t] = s[cuda.blockDim.x - 1 - t]

    out = np.zeros(64, dtype=np.int32)
    k[1, 64, 0, 64 * 4](out)
    equal(out, (63 - np.arange(64)) * 3)


@check
def local_arrays():
    @cuda.jit
    def k(out):
        i = cuda.grid(1)
        loc = cuda.local.array(8, int32)
        for j in range(8):
            loc[j] = i * j
        acc = 0
        for j in range(8):
            acc += loc[7 - j] * (j + 1)
        out[i] = acc

    out = np.zeros(64, dtype=np.int32)
    k[2, 32](out)
    want = np.array([sum(i * (7 - j) * (j + 1) for j in range(8)) for i in range(64)])
    equal(out, want.astype(np.int32))


@check
def atomics():
    @cuda.jit
    def k(counts, total, fmax, imin, cas):
        i = cuda.grid(1)
        cuda.atomic.add(counts, i % 10, 1)
        cuda.atomic.add(total, 0, 0.5)
        cuda.atomic.max(fmax, 0, float32(i) * 0.25)
        cuda.atomic.min(imin, 0, 1000 - i)
        cuda.atomic.compare_and_swap(cas, 0, i)

    counts = np.zeros(10, dtype=np.int32)
    total = np.zeros(1, dtype=np.float64)
    fmax = np.zeros(1, dtype=np.float32)
    imin = np.full(1, 10 ** 6, dtype=np.int32)
    cas = np.zeros(1, dtype=np.int32)
    k[4, 256](counts, total, fmax, imin, cas)
    equal(counts, np.full(10, 1024 // 10, dtype=np.int32) + (np.arange(10) < 1024 % 10))
    close(total, np.array([512.0]))
    close(fmax, np.array([1023 * 0.25], dtype=np.float32))
    equal(imin, np.array([1000 - 1023], dtype=np.int32))
    if cas[0] < 0 or cas[0] > 1023:
        raise AssertionError(f"cas left {cas[0]}")


@check
def warp_intrinsics():
    @cuda.jit
    def k(out, ballots, shfl, anys, alls, matched):
        t = cuda.threadIdx.x
        lane = t % 32
        mask = 0xFFFFFFFF
        ballots[t] = cuda.ballot_sync(mask, lane % 3 == 0)
        shfl[t] = cuda.shfl_down_sync(mask, lane * 10, 1)
        anys[t] = cuda.any_sync(mask, lane == 5)
        alls[t] = cuda.all_sync(mask, lane < 32)
        v = lane
        off = 16
        while off > 0:
            v += cuda.shfl_xor_sync(mask, v, off)
            off //= 2
        out[t] = v
        m, _ = cuda.match_all_sync(mask, 7)
        matched[t] = m

    n = 64
    out = np.zeros(n, dtype=np.int32)
    ballots = np.zeros(n, dtype=np.uint32)
    shfl = np.zeros(n, dtype=np.int32)
    anys = np.zeros(n, dtype=np.int32)
    alls = np.zeros(n, dtype=np.int32)
    matched = np.zeros(n, dtype=np.uint32)
    k[1, n](out, ballots, shfl, anys, alls, matched)
    equal(out, np.full(n, sum(range(32)), dtype=np.int32))
    want_ballot = sum(1 << l for l in range(32) if l % 3 == 0)
    equal(ballots, np.full(n, want_ballot, dtype=np.uint32))
    lanes = np.arange(n) % 32
    equal(shfl, np.where(lanes < 31, (lanes + 1) * 10, lanes * 10).astype(np.int32))
    equal(anys, np.ones(n, dtype=np.int32))
    equal(alls, np.ones(n, dtype=np.int32))
    equal(matched, np.full(n, 0xFFFFFFFF, dtype=np.uint32))


@check
def bit_intrinsics():
    @cuda.jit
    def k(a, ffs, popc, clz, brev):
        i = cuda.grid(1)
        if i < a.size:
            ffs[i] = cuda.ffs(a[i])
            popc[i] = cuda.popc(a[i])
            clz[i] = cuda.clz(a[i])
            brev[i] = cuda.brev(a[i])

    a = np.array([0, 1, 2, 3, 8, 0x80000000, 0xFFFFFFFF, 12345, 0x10, 6], dtype=np.uint32)
    ffs = np.zeros_like(a)
    popc = np.zeros_like(a)
    clz = np.zeros_like(a)
    brev = np.zeros_like(a)
    k[1, 32](a, ffs, popc, clz, brev)

    def ffs_ref(x):
        x = int(x)
        return 0 if x == 0 else (x & -x).bit_length()

    equal(ffs, np.array([ffs_ref(x) for x in a], dtype=np.uint32))
    equal(popc, np.array([bin(int(x)).count("1") for x in a], dtype=np.uint32))
    equal(clz, np.array([32 - int(x).bit_length() for x in a], dtype=np.uint32))
    equal(brev, np.array([int(f"{int(x):032b}"[::-1], 2) for x in a], dtype=np.uint32))


def math_check(dtype, rtol):
    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        if i < x.size:
            v = x[i]
            out[0, i] = math.sin(v)
            out[1, i] = math.cos(v)
            out[2, i] = math.tan(v)
            out[3, i] = math.exp(v * 0.1)
            out[4, i] = math.log(abs(v) + 1.0)
            out[5, i] = math.sqrt(abs(v))
            out[6, i] = math.atan2(v, 3.0)
            out[7, i] = math.pow(abs(v) + 1.0, 0.75)
            out[8, i] = math.tanh(v * 0.1)
            out[9, i] = math.floor(v) + math.ceil(v * 0.5)

    x = np.concatenate([np.linspace(-10, 10, 200), np.array([1e4, -1e5, 123456.75, 0.0])]).astype(dtype)
    out = np.zeros((10, x.size), dtype=dtype)
    k[2, 128](x, out)
    xd = x.astype(np.float64)
    want = np.array([
        np.sin(xd), np.cos(xd), np.tan(xd), np.exp(xd * 0.1), np.log(np.abs(xd) + 1.0),
        np.sqrt(np.abs(xd)), np.arctan2(xd, 3.0), np.power(np.abs(xd) + 1.0, 0.75),
        np.tanh(xd * 0.1), np.floor(xd) + np.ceil(xd * 0.5),
    ])
    for row, name in enumerate("sin cos tan exp log sqrt atan2 pow tanh floor+ceil".split()):
        try:
            close(out[row].astype(np.float64), want[row], rtol=rtol, atol=rtol)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}")


@check
def math_library_f32():
    math_check(np.float32, 1e-5)


@check
def math_library_f64():
    math_check(np.float64, 1e-13)


@check
def device_functions():
    @cuda.jit(device=True)
    def poly(x):
        return 3 * x * x + 2 * x + 1

    @cuda.jit(device=True)
    def twice(x):
        return poly(x) + poly(x + 1)

    @cuda.jit
    def k(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = twice(a[i])

    a = np.arange(100, dtype=np.int64)
    out = np.zeros_like(a)
    k[1, 128](a, out)
    p = lambda x: 3 * x * x + 2 * x + 1
    equal(out, p(a) + p(a + 1))


@check
def fp16():
    from numba.cuda import fp16 as h

    @cuda.jit
    def k(a, b, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = h.hfma(a[i], b[i], a[i])

    a = np.linspace(-2, 2, 64).astype(np.float16)
    b = np.linspace(1, 3, 64).astype(np.float16)
    out = np.zeros_like(a)
    k[1, 64](a, b, out)
    want = (a.astype(np.float32) * b.astype(np.float32) + a.astype(np.float32)).astype(np.float16)
    close(out.astype(np.float32), want.astype(np.float32), rtol=1e-3)


@check
def link_a_cu_and_a_ptx_file():
    scale = cuda.declare_device("scale", "float32(float32)")
    shift = cuda.declare_device("shift", "float32(float32)")

    @cuda.jit(link=[os.path.join(HERE, "link_lib.cu"), os.path.join(HERE, "link_shift.ptx")])
    def k(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = shift(scale(a[i]))

    a = np.arange(50, dtype=np.float32)
    out = np.zeros_like(a)
    k[1, 64](a, out)
    equal(out, a * 3.0 + 0.5)


@check
def streams_and_events():
    @cuda.jit
    def inc(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    s1, s2 = cuda.stream(), cuda.stream()
    host = np.arange(4096, dtype=np.int32)
    d1 = cuda.to_device(host, stream=s1)
    d2 = cuda.to_device(host * 2, stream=s2)
    start, end = cuda.event(), cuda.event()
    start.record(s1)
    for _ in range(5):
        inc[16, 256, s1](d1)
        inc[16, 256, s2](d2)
    end.record(s1)
    done = cuda.event()
    done.record(s2)
    done.wait(s1)
    r1 = d1.copy_to_host(stream=s1)
    s1.synchronize()
    r2 = d2.copy_to_host()
    end.synchronize()
    ms = cuda.event_elapsed_time(start, end)
    equal(r1, host + 5)
    equal(r2, host * 2 + 5)
    if not ms >= 0.0:
        raise AssertionError(f"elapsed {ms}")


@check
def device_arrays_and_copies():
    a = np.random.RandomState(1).rand(300).astype(np.float64)
    d = cuda.to_device(a)
    e = cuda.device_array_like(d)
    e.copy_to_device(d)
    b = e.copy_to_host()
    equal(b, a)
    z = cuda.device_array(10, dtype=np.int16)
    z[:] = 3
    equal(z.copy_to_host(), np.full(10, 3, dtype=np.int16))


@check
def pinned_and_mapped_host_memory():
    p = cuda.pinned_array(100, dtype=np.float32)
    p[:] = np.arange(100)
    d = cuda.to_device(p)
    back = cuda.pinned_array(100, dtype=np.float32)
    d.copy_to_host(back)
    equal(back, np.arange(100, dtype=np.float32))


def main():
    failed = 0
    for fn in checks:
        try:
            fn()
            print(f"ok   {fn.__name__}", flush=True)
        except Exception as e:  # a failing check is reported, the others still run
            failed += 1
            msg = f"{type(e).__name__}: {e}".splitlines()
            print(f"FAIL {fn.__name__}: {msg[0] if msg else ''}", flush=True)
            if os.environ.get("NUMBA_WIDE_TRACE"):
                traceback.print_exc()
    print(f"numba_wide: {len(checks)} checks, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
