"""CUDA C++ sources: one preprocessing step, two compilers.

* `load(path)` compiles for the GPU in this machine through CuPy (`cupy.RawModule`, NVRTC) and
  returns the module whose kernels the launchers call. Under KERNEL_LADDER_EMULATE=sm_75 (or sm_80)
  it compiles to PTX for compute_75 (`__CUDA_ARCH__` = 750), which the driver JIT-compiles for the
  real GPU: the emulated GPU's code path, run on this one.
* `compile_cubin(path, arch)` compiles for any architecture (sm_75, sm_80, sm_90, ...) without a
  GPU, through NVRTC from `cuda-bindings`; `ladder.sass` disassembles the result.

Both see the same text: `source(path)` inlines the project's own `#include "..."` files, so
CuPy's kernel cache (keyed on the source string) notices an edit to any included file.
System headers (`<cuda_fp16.h>`, `<mma.h>`) come from the CUDA include directory found by
`include_dir()`, which NVRTC needs on `-I` for `<mma.h>`.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import site
import sys
from pathlib import Path

import numpy as np
import torch

from ladder.runtime import hardware
from ladder.runtime.cache import CACHE_DIR
from ladder.runtime.errors import NotAvailable, Spills
from ladder.runtime.world import require_gpu

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels" / "cuda"
COMMON_OPTIONS = ("-std=c++17",)
LOCAL_INCLUDE = re.compile(r'^(\s*#\s*include\s+)"([^"]+)"(.*)$', re.M)  # the directive, the file, the rest


def cupy_extra() -> str:
    """The kernel-ladder extra whose CuPy matches torch's CUDA major version (they share the process and the
    driver): 12.x -> "cuda12" (cupy-cuda12x), 13.x -> "cuda13"; "" where torch has no CUDA or sees no GPU."""
    if not torch.version.cuda or not torch.cuda.is_available():
        return ""
    return {"12": "cuda12", "13": "cuda13"}.get(torch.version.cuda.split(".")[0], "")


class CompileError(RuntimeError):
    pass


def resolve(path: str | os.PathLike) -> Path:
    """A path relative to kernels/cuda/ (e.g. 'vector_add/1_scalar.cu') or an absolute one."""
    p = Path(path)
    return p if p.is_absolute() else KERNELS_DIR / p


def source(path: str | os.PathLike) -> str:
    """The file's text with its local `#include "..."` files inlined (each once, with #line marks)."""
    return _expand(path)[0]


def _expand(path: str | os.PathLike) -> tuple[str, tuple[Path, ...]]:
    """(text with local includes inlined, every file read)."""
    seen: list[Path] = []

    def expand(file: Path) -> str:
        file = file.resolve()
        if file in seen:
            return ""
        seen.append(file)
        text = file.read_text()

        def inline(m: re.Match) -> str:
            inc = file.parent / m.group(2)
            if not inc.exists():
                raise CompileError(f"{file.name}: included file {m.group(2)!r} not found")
            return f'#line 1 "{inc.name}"\n{expand(inc)}\n#line {text[:m.end()].count(chr(10)) + 1} "{file.name}"'

        return LOCAL_INCLUDE.sub(inline, text)

    text = expand(resolve(path))
    return text, tuple(seen)


def header_and_body(text: str) -> tuple[list[str], list[str]]:
    """A kernel file's lines: its leading comment block (the rung's idea, prediction and SASS signature) and the
    code after it, from its first line that is neither comment nor blank."""
    lines = text.splitlines()
    header = 0
    while header < len(lines) and lines[header].startswith("//"):
        header += 1
    start = header
    while start < len(lines) and not lines[start].strip():
        start += 1
    return lines[:header], lines[start:]


def _stamps(files: tuple[Path, ...]) -> tuple:
    return tuple((st.st_mtime_ns, st.st_size) for st in map(os.stat, files))


def defines_options(defines: dict | None) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))


def _header_major(include: Path) -> int | None:
    header = include / "cuda_runtime_api.h"
    if not header.exists():
        return None
    m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header.read_text(errors="ignore"))
    return int(m.group(1)) // 1000 if m else None


def _candidate_include_dirs() -> list[Path]:
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    dirs = [Path(r) / "include" for r in roots if r]
    for sp in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
        base = Path(sp) / "nvidia"
        dirs += [base / "cu13" / "include", base / "cu12" / "include", base / "cuda_runtime" / "include"]
        dirs.append(Path(sp) / "triton" / "backends" / "nvidia" / "include")
    return [d for d in dict.fromkeys(dirs) if (d / "mma.h").exists() and (d / "crt" / "mma.h").exists()]


@functools.lru_cache(maxsize=None)
def include_dir(cuda_major: int | None = None) -> str:
    """A CUDA include directory holding <mma.h> and <cuda_fp16.h>, matching `cuda_major` if given."""
    found = _candidate_include_dirs()
    if not found:
        raise NotAvailable("No CUDA headers with <mma.h> found: install 'cuda-toolkit[cudart,crt]' "
                           "(a dependency of kernel-ladder) or set CUDA_PATH.")
    matching = [d for d in found if _header_major(d) == cuda_major]
    return str((matching or found)[0])


# ---------------------------------------------------------------- running (CuPy, needs a GPU)

@functools.lru_cache(maxsize=None)
def _compile(text: str, options: tuple[str, ...], arch: str | None):
    import cupy   # optional: only where a GPU runs the kernels (load() says how to install it)
    if arch is None:  # CuPy picks this GPU's architecture
        return cupy.RawModule(code=text, options=options, backend="nvrtc")
    # a target CuPy does not choose itself (sm_90a: wgmma; compute_75: emulation): NVRTC directly, then load
    binary = _nvrtc(text, "kernel.cu", arch, options)
    suffix = "ptx" if arch.startswith("compute_") else "cubin"  # the driver JIT-compiles PTX as it loads it
    cache = CACHE_DIR / suffix
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{hashlib.sha256(binary).hexdigest()[:24]}.{suffix}"
    path.write_bytes(binary)
    return cupy.RawModule(path=str(path))


def _target(path, arch: str | None) -> str | None:
    """What `load` compiles for: `arch`, else the emulated GPU's PTX, else None (this GPU, CuPy's choice)."""
    gpu = hardware.detect()
    if gpu is None or gpu.emulated_on is None:
        return arch
    if arch is not None:  # only rung 7 names one (sm_90a), and its rung is N/A on the older GPUs emulated
        raise NotAvailable(f"{Path(path).name} is built for {arch}: not on the {gpu.name}")
    return "compute_" + gpu.arch.removeprefix("sm_")


_LOADED: dict[tuple, tuple] = {}  # (path, defines, target) -> (files, their stamps, module)


def load(path: str | os.PathLike, defines: dict | None = None, arch: str | None = None):
    """Compile `path` for this GPU through CuPy and return the `cupy.RawModule`.

    `arch` forces a target (e.g. 'sm_90a' for wgmma); by default it is this GPU's (the emulated one's
    PTX under KERNEL_LADDER_EMULATE). A second call with nothing changed on disk costs a few file stats:
    launchers call this on every run.
    """
    require_gpu(f"Running {Path(path).name}")
    arch = _target(path, arch)
    key = (str(path), tuple(sorted((defines or {}).items())), arch)
    hit = _LOADED.get(key)
    if hit and _stamps(hit[0]) == hit[1]:
        return hit[2]
    try:
        import cupy   # optional: installed only where torch has a CUDA build
    except ImportError as e:
        extra = cupy_extra() or "cuda12"
        raise NotAvailable(f"CuPy is not installed, so CUDA C++ cannot run here: `pip install cupy-{extra}x` "
                           f"(it matches this torch's CUDA; from a clone: `pip install -e \".[{extra}]\"`, or rerun "
                           "the notebook's first cell in Colab), then restart the kernel.") from e
    major = cupy.cuda.runtime.runtimeGetVersion() // 1000
    options = COMMON_OPTIONS + (f"-I{include_dir(major)}",) + defines_options(defines)
    text, files = _expand(path)
    stamps = _stamps(files)
    try:
        module = _compile(text, options, arch)
    except cupy.cuda.compiler.CompileException as e:
        raise CompileError(str(e)) from None
    _LOADED[key] = (files, stamps, module)
    return module


_STREAMS: dict[int, object] = {}


def int32s(*values) -> tuple:
    """Integer kernel arguments as the int32 the kernels declare (a Python int would not say its width)."""
    return tuple(np.int32(v) for v in values)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


_FUNCTIONS: dict[tuple, object] = {}  # (module, kernel, shared bytes) -> the kernel, its shared memory set


def launch(module, kernel: str, grid: int | tuple, block: int | tuple, args: tuple, shared_bytes: int = 0):
    """Launch a kernel of `module` on torch's current stream (so torch and CuPy work stay ordered).

    Tensors are passed as raw device pointers; scalars must carry their C type (np.int64, np.float32, ...).
    What does not change between launches (the kernel, its shared-memory opt-in, the stream's wrapper) is looked
    up once; what is left (55-140 µs a launch on the H100 hosts measured) ladder.timing keeps out of a kernel's time.
    """
    import cupy   # optional: only where a GPU runs the kernels
    args = tuple(np.uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args)
    handle = torch.cuda.current_stream().cuda_stream
    stream = _STREAMS.get(handle) or _STREAMS.setdefault(handle, cupy.cuda.ExternalStream(handle))
    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    key = (module, kernel, shared_bytes)
    function = _FUNCTIONS.get(key)
    if function is None:
        function = module.get_function(kernel)
        if shared_bytes > 48 * 1024:  # above 48 KiB a kernel must opt in to dynamic shared memory
            function.max_dynamic_shared_size_bytes = shared_bytes
        _FUNCTIONS[key] = function
    with stream:
        function(grid, block, args, shared_mem=shared_bytes)


# ---------------------------------------------------------------- compile-only (no GPU needed)

@functools.lru_cache(maxsize=None)
def without_spills(module, kernel: str):
    """`module`, once its `kernel` is known to keep every value in registers: a kernel with local memory (a
    register spill) raises Spills, which a search counts as pruned."""
    spilled = module.get_function(kernel).attributes["local_size_bytes"]
    if spilled:
        raise Spills(f"spills registers: {spilled} bytes of local memory per thread")
    return module


def compile_cubin(path: str | os.PathLike, arch: str, defines: tuple[tuple[str, str], ...] = (),
                  options: tuple[str, ...] = ()) -> bytes:
    """Compile `path` to a cubin for `arch` ('sm_75', 'sm_80', 'sm_90', 'sm_90a', ...) with NVRTC; no GPU needed.
    `options`: more NVRTC options (e.g. '--ptxas-options=--entry=matmul_grouped': that kernel's code only)."""
    try:
        from cuda.bindings import nvrtc   # here, so that a broken CUDA install fails with the message below
    except ImportError as e:
        raise NotAvailable("Compile-only needs 'cuda-bindings' and 'cuda-toolkit[nvrtc]'.") from e
    _, major, _ = nvrtc.nvrtcVersion()
    options = COMMON_OPTIONS + (f"-I{include_dir(major)}",) + defines_options(dict(defines)) + tuple(options)
    return _nvrtc(source(path), Path(path).name, arch, options)


def _nvrtc(text: str, name: str, arch: str, options: tuple[str, ...]) -> bytes:
    """NVRTC's output for `arch`: a cubin for a real architecture ('sm_80'), PTX for a virtual one ('compute_80')."""
    try:
        from cuda.bindings import nvrtc   # here, so that a broken CUDA install fails with the message below
    except ImportError as e:
        raise NotAvailable(f"Compiling for {arch} needs 'cuda-bindings' (a kernel-ladder dependency).") from e
    opts = [o.encode() for o in options + (f"--gpu-architecture={arch}",)]
    get_size, get = ((nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX) if arch.startswith("compute_")
                     else (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN))
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], [])
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CompileError(f"{name} for {arch}:\n{log.decode(errors='replace').rstrip(chr(0))}")
        _, size = get_size(prog)
        binary = b" " * size
        get(prog, binary)
        return binary
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
