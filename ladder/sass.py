"""What the compiler made of a kernel, without a GPU: SASS and its opcode counts.

CUDA C++ is compiled by NVRTC (`ladder.runtime.cuda.compile_cubin`), Triton by `triton.compile` for a
chosen target; both cubins are disassembled by the `cuobjdump` that ships inside Triton's wheel.
The counts are the signature each rung leaves: load width (LDG.E.128 vs LDG.E.U16), shared
memory (LDS/STS) and barriers (BAR), tensor cores (HMMA, HGMMA), async copies (LDGSTS, UTMALDG).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime import interpreter
from triton.runtime.jit import JITFunction

from ladder.runtime import cuda
from ladder.runtime.errors import NotAvailable


ARCHS = ("sm_75", "sm_80", "sm_90")
# An instruction line: "/*0480*/  [@P0 | @!PT ...] OPCODE ...". "@!PT" (never true) marks padding
# the compiler leaves between code blocks: it never runs, so it is not counted.
_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?!@!PT\s)(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_FUNC = re.compile(r"Function : (\S+)")
# Opcode families a lesson talks about; `Sass.count("LDG")` counts every LDG.* variant.
_LOAD_BITS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}


@functools.lru_cache(maxsize=None)
def cuobjdump() -> str:
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("cuobjdump")
    if not found:
        raise NotAvailable("cuobjdump not found (it ships inside Triton's wheel on Linux).")
    return found


@dataclass
class Sass:
    """Disassembly of one cubin, split per kernel."""
    arch: str
    functions: dict[str, str] = field(default_factory=dict)
    shared_bytes: int | None = None  # Triton kernels: the shared memory the compiler allocated
    resources: dict[str, int] | None = None  # resource_usage of a one-kernel cubin: registers, stack bytes

    @property
    def text(self) -> str:
        return "\n".join(self.functions.values())

    def opcodes(self, function: str | None = None) -> Counter:
        text = self.functions[function] if function else self.text
        return Counter(m.group(1) for m in _LINE.finditer(text))

    def count(self, family: str, function: str | None = None) -> int:
        """Instructions whose opcode is `family` or starts with `family.` (e.g. 'LDG', 'HMMA')."""
        return sum(n for op, n in self.opcodes(function).items()
                   if op == family or op.startswith(family + "."))

    def global_load_bits(self, function: str | None = None) -> set[int]:
        """Widths, in bits, of the global loads (LDG) in the code: 16 for fp16 scalars, 128 for 16-byte vectors."""
        bits = set()
        for op in self.opcodes(function):
            if op == "LDG" or op.startswith("LDG."):
                mods = op.split(".")[1:]
                bits.add(next((_LOAD_BITS[m] for m in mods if m in _LOAD_BITS), 32))
        return bits


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """cuobjdump's answer to `flag` ('-sass', '-res-usage') about a cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "k.cubin"
        f.write_bytes(cubin)
        return subprocess.run([cuobjdump(), flag, str(f)], capture_output=True, text=True, check=True).stdout


def disassemble(cubin: bytes, arch: str) -> Sass:
    out = _cuobjdump(cubin, "-sass")
    sass = Sass(arch)
    parts = _FUNC.split(out)
    for name, body in zip(parts[1::2], parts[2::2]):
        sass.functions[name] = body
    return sass


_RESOURCES = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> dict[str, int]:
    """What the compiler gave the (first) kernel of a cubin, per thread: registers, and the stack and local
    memory that hold what did not fit in them (spills)."""
    out = _cuobjdump(cubin, "-res-usage")
    found = _RESOURCES.search(out)
    if found is None:
        raise ValueError(f"no resource usage in cuobjdump's answer: {out[:200]!r}")
    return dict(zip(("registers", "stack_bytes", "shared_bytes", "local_bytes"), map(int, found.groups())))


def cuda_sass(path: str | os.PathLike, arch: str, defines: dict | None = None) -> Sass:
    """SASS of a CUDA C++ file compiled for `arch` (no GPU needed), with the registers and stack it was given."""
    cubin = cuda.compile_cubin(path, arch, tuple(sorted((defines or {}).items())))
    sass = disassemble(cubin, arch)
    sass.resources = resource_usage(cubin)
    return sass


@contextlib.contextmanager
def _compilable(fn):
    """Make the interpreter's changes to triton.language invisible while compiling.

    Under TRITON_INTERPRET=1 every @triton.jit function, triton.language's own helpers included
    (tl.zeros, tl.sum, x.sum(), tl.cdiv, ...), is an InterpretedFunction, which the compiler would run
    as Python: JITFunctions stand in for them. And a jit function called from inside an interpreted
    kernel (tl.cdiv, min, a helper of ours) leaves the language's builtins wrapped for the interpreter
    (Triton 3.4-3.7 never restore those wrappers): the originals stand in for them.
    """
    def interpreted(value):  # the function itself, or the one a tl.tensor member method forwards to
        cells = [c.cell_contents for c in getattr(value, "__closure__", None) or ()]
        return next((v for v in [value] + cells if isinstance(v, interpreter.InterpretedFunction)), None)

    def wrapped_builtin(value):  # interpreter._patch_attr's wrapper keeps the builtin as `member`
        code = getattr(value, "__code__", None)
        if code is not None and code.co_filename == interpreter.__file__:
            return (getattr(value, "__kwdefaults__", None) or {}).get("member")
        return None

    places = {tl, tl.core, tl.standard, tl.math, tl.tensor, tl.core.tensor_descriptor_base,
              sys.modules[fn.__module__]}
    originals, compilable = [], {}
    for place in places:
        for name, value in list(vars(place).items()):
            if f := interpreted(value):
                replacement = compilable.setdefault(id(f), JITFunction(f.fn, **f.kwargs))
            elif (builtin := wrapped_builtin(value)) is not None:
                replacement = builtin
            else:
                continue
            originals.append((place, name, value))
            setattr(place, name, replacement)
    try:
        yield
    finally:
        for place, name, value in originals:
            setattr(place, name, value)


def triton_compile(kernel, signature: dict[str, str], constexprs: dict, arch: str,
                   divisible_by_16: tuple[str, ...] = (), num_warps: int = 4, num_stages: int = 3):
    """A Triton kernel compiled for `arch` (no GPU needed), as the runtime would specialize it: Triton's compiled
    kernel (its .asm["ptx"], ["cubin"], its .metadata).

    `divisible_by_16` names the pointer/integer arguments Triton may assume are multiples of 16
    (it specializes on that at run time: aligned pointers, sizes that are multiples of 16).
    `num_warps` and `num_stages` are the launch options of the same names (defaults: Triton's).
    """
    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):  # heuristics, autotune, interpreter
        kernel = kernel.fn
    fn = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel)
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in divisible_by_16}  # by the kernel's order
    sig = {k: ("constexpr" if k in constexprs else v) for k, v in signature.items()}
    src = ASTSource(fn, signature=sig, constexprs=constexprs, attrs=attrs)
    capability = int(arch.removeprefix("sm_").rstrip("a"))
    with _compilable(fn.fn):
        return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})


def compiled_sass(compiled, arch: str) -> Sass:
    """The SASS of a Triton compiled kernel (triton_compile's), with the shared memory it allocated and the
    registers and stack the compiler gave it."""
    sass = disassemble(compiled.asm["cubin"], arch)
    sass.shared_bytes = compiled.metadata.shared
    sass.resources = resource_usage(compiled.asm["cubin"])
    return sass


def triton_sass(kernel, signature: dict[str, str], constexprs: dict, arch: str,
                divisible_by_16: tuple[str, ...] = (), num_warps: int = 4, num_stages: int = 3) -> Sass:
    """SASS of a Triton kernel compiled for `arch`, as the runtime would specialize it (triton_compile)."""
    return compiled_sass(triton_compile(kernel, signature, constexprs, arch, divisible_by_16, num_warps, num_stages),
                         arch)
