"""CUDA C++ sources: one preprocessing step, two compilers.

* `load(path)` compiles for the GPU in this machine through CuPy (`cupy.RawModule`, NVRTC) and
  returns the module whose kernels the launchers call.
* `compile_cubin(path, arch)` compiles for any architecture (sm_75, sm_80, sm_90, ...) without a
  GPU, through NVRTC from `cuda-bindings`; `ladder.sass` disassembles the result.

Both see the same text: `source(path)` inlines the project's own `#include "..."` files, so
CuPy's kernel cache (keyed on the source string) notices an edit to any included file.
System headers (`<cuda_fp16.h>`, `<mma.h>`) come from the CUDA include directory found by
`include_dir()`, which NVRTC needs on `-I` for `<mma.h>`.
"""
from __future__ import annotations

import functools
import os
import re
import site
import sys
from pathlib import Path

from ladder.world import NotAvailable, require_gpu

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels" / "cuda"
COMMON_OPTIONS = ("-std=c++17",)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


class CompileError(RuntimeError):
    pass


def resolve(path: str | os.PathLike) -> Path:
    """A path relative to kernels/cuda/ (e.g. 'vector_add/1_scalar.cu') or an absolute one."""
    p = Path(path)
    return p if p.is_absolute() else KERNELS_DIR / p


def source(path: str | os.PathLike) -> str:
    """The file's text with its local `#include "..."` files inlined (each once, with #line marks)."""
    seen: set[Path] = set()

    def expand(file: Path) -> str:
        file = file.resolve()
        if file in seen:
            return ""
        seen.add(file)
        text = file.read_text()

        def inline(m: re.Match) -> str:
            inc = file.parent / m.group(1)
            if not inc.exists():
                raise CompileError(f"{file.name}: included file {m.group(1)!r} not found")
            return f'#line 1 "{inc.name}"\n{expand(inc)}\n#line {text[:m.end()].count(chr(10)) + 1} "{file.name}"'

        return _INCLUDE.sub(inline, text)

    return expand(resolve(path))


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
def _load_cached(text: str, options: tuple[str, ...]):
    import cupy
    return cupy.RawModule(code=text, options=options, backend="nvrtc")


def load(path: str | os.PathLike, defines: dict | None = None):
    """Compile `path` for this GPU through CuPy and return the `cupy.RawModule`."""
    require_gpu(f"Running {Path(path).name}")
    try:
        import cupy
    except ImportError as e:
        raise NotAvailable("CuPy is not installed: `./run lab` installs the build matching your "
                           "torch's CUDA (cupy-cuda12x or cupy-cuda13x).") from e
    major = cupy.cuda.runtime.runtimeGetVersion() // 1000
    options = COMMON_OPTIONS + (f"-I{include_dir(major)}",) + defines_options(defines)
    try:
        return _load_cached(source(path), options)
    except cupy.cuda.compiler.CompileException as e:
        raise CompileError(str(e)) from None


def launch(module, kernel: str, grid: int | tuple, block: int | tuple, args: tuple, shared_bytes: int = 0):
    """Launch a kernel of `module` on torch's current stream (so torch and CuPy work stay ordered).

    Tensors are passed zero-copy; scalars must carry their C type (np.int64, np.float32, ...).
    """
    import cupy
    import torch
    args = tuple(cupy.asarray(a) if isinstance(a, torch.Tensor) else a for a in args)
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    with stream:
        module.get_function(kernel)(grid, block, args, shared_mem=shared_bytes)


# ---------------------------------------------------------------- compile-only (no GPU needed)

@functools.lru_cache(maxsize=None)
def compile_cubin(path: str | os.PathLike, arch: str, defines: tuple[tuple[str, str], ...] = ()) -> bytes:
    """Compile `path` to a cubin for `arch` ('sm_75', 'sm_80', 'sm_90', ...) with NVRTC; no GPU needed."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise NotAvailable("Compile-only needs 'cuda-bindings' and 'cuda-toolkit[nvrtc]'.") from e
    _, major, _ = nvrtc.nvrtcVersion()
    text = source(path).encode()
    options = [o.encode() for o in COMMON_OPTIONS + (f"--gpu-architecture={arch}", f"-I{include_dir(major)}")
               + defines_options(dict(defines))]
    err, prog = nvrtc.nvrtcCreateProgram(text, Path(path).name.encode(), 0, [], [])
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CompileError(f"{Path(path).name} for {arch}:\n{log.decode(errors='replace').rstrip(chr(0))}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
