"""What every llama.cpp side of the comparison scripts runs first (llama-cpp-python, in the
interpreter given by --llama-python, through `python -c`).

ggml's extra buffer types are turned off: the comparison is with llama.cpp's CPU kernels, and
where the CPU reports AMX, ggml's AMX repacking crashed the process on a virtual machine
(ggml_backend_amx_mul_mat, SIGSEGV at the first decode) while the CPU kernels ran.
"""

CPU_KERNELS = """
import llama_cpp as _top
import llama_cpp.llama_cpp as _lc
_defaults = _lc.llama_model_default_params
def _cpu_kernels_params():
    p = _defaults()
    if hasattr(p, "use_extra_bufts"):
        p.use_extra_bufts = False
    return p
_lc.llama_model_default_params = _cpu_kernels_params
_top.llama_model_default_params = _cpu_kernels_params
"""
