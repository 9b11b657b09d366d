import ctypes, sys
lib = ctypes.CDLL("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
def compile(src, name, opts):
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
    assert r == 0, r
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
    if r != 0:
        print(log.value.decode()); sys.exit(1)
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(prog, buf)
    return buf.value.decode()
src = open(sys.argv[1]).read()
print(compile(src, sys.argv[1], ["--gpu-architecture=compute_80"] + sys.argv[3:]), file=open(sys.argv[2], "w"))
