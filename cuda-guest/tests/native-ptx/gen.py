"""Regenerates kernels.ptx from kernels.cu with NVRTC (pip wheel nvidia-cuda-nvrtc-cu12).

    python3 gen.py [path/to/libnvrtc.so.12]
"""
import ctypes, os, sys

here = os.path.dirname(os.path.abspath(__file__))
lib = sys.argv[1] if len(sys.argv) > 1 else "libnvrtc.so.12"
nvrtc = ctypes.CDLL(lib)
src = open(os.path.join(here, "kernels.cu"), "rb").read()
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernels.cu", 0, None, None) == 0
opts = [b"--gpu-architecture=compute_52", b"-default-device"]
arr = (ctypes.c_char_p * len(opts))(*opts)
r = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(prog, log)
if r != 0:
    sys.exit("nvrtc failed: " + log.value.decode())
nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
ptx = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetPTX(prog, ptx)
open(os.path.join(here, "kernels.ptx"), "w").write(ptx.value.decode())
