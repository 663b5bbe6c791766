"""A problem is one computation (vector add, matmul, attention) and its ladder of rungs.

It knows its FLOPs and the fewest bytes it must move (each input read once, the output written
once), so every rung gets the same roofline coordinates; it makes inputs, a reference and an
output buffer, and lists the shapes to check (ragged) and to time (chip-filling).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from ladder.runtime.hardware import GPU

# Kernel modules that register problems, in lesson order.
KERNEL_MODULES = ["kernels.vector_add", "kernels.matmul", "kernels.matmul_bias_relu", "kernels.attention",
                  "kernels.attention_backward"]


@dataclass
class Rung:
    backend: str                 # "cuda", "triton" or "torch" (the reference library)
    name: str                    # "1_scalar": number first, so sorting gives the ladder
    run: Callable                # run(*inputs, out=None) -> out
    source: str | None = None    # the file that holds the rung (diffs, SASS)
    needs: str | None = None     # GPU feature the rung relies on ("cp.async", "bf16", ...)
    fallback: tuple[str, str] | None = None  # (feature, what runs instead on a GPU without it)
    slow: bool = False           # too slow for the size sweep: timed at the benchmark shapes only
    searches: bool = False       # picks its configuration per shape by a search: nothing to compile ahead
    # why the rung cannot run at one shape (e.g. "N/A: needs 412 GiB"), or None: `record` skips that shape, says why
    unavailable_at: Callable[[tuple], str | None] | None = None
    # an anchor that can only copy its result into `out` (SDPA): timed and profiled returning its own output, so
    # that its time is its kernels', not theirs plus a copy
    own_output: bool = False
    # a Triton rung whose PTX goes through a pass of ours (ladder.ptx): what its recorded rows say of it, "ptx_pass":
    # ptx_pass() (the pass's name and content hash, what it changed at the rung's last launch); None: the rung runs
    # what Triton compiles, and a Triton row says "ptx_pass": null
    ptx_pass: Callable[[], dict] | None = None

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.name}"

    def timed_call(self, inputs: tuple, out) -> Callable[[], object]:
        """What a timing or a profile runs: run(*inputs, out=out), or run(*inputs) for an `own_output` anchor."""
        if self.own_output:
            return lambda: self.run(*inputs)
        return lambda: self.run(*inputs, out=out)

    def unavailable_reason(self, gpu: GPU | None) -> str | None:
        if gpu is not None and gpu.emulated_on and self.backend != "cuda":
            # Triton and PyTorch build for the GPU they find: what would run is the real GPU's code, not the
            # emulated one's, so it would check nothing new. Only our CUDA C++ is compiled for the emulated GPU.
            return (f"N/A on this GPU ({gpu.name}): {self.backend} compiles for the real GPU, "
                    f"not for {gpu.arch}; only CUDA C++ rungs run under emulation")
        if self.needs and gpu is not None and not gpu.has(self.needs):
            return f"N/A on this GPU ({gpu.name}, {gpu.arch}): needs {self.needs}"
        return None

    def fallback_note(self, gpu: GPU | None) -> str | None:
        """What runs instead of the rung's idea on a GPU that lacks its feature (said in the output)."""
        if self.fallback and gpu is not None and not gpu.has(self.fallback[0]):
            return f"{gpu.arch} has no {self.fallback[0]}: runs {self.fallback[1]}"
        return None


@dataclass
class Problem:
    name: str
    flops: Callable[[tuple], float]
    min_bytes: Callable[[tuple], float]
    make_inputs: Callable[[tuple, str, torch.Generator], tuple]
    reference: Callable[..., torch.Tensor]       # higher-precision result, from the inputs
    new_output: Callable[[tuple, str], torch.Tensor]
    check_shapes: list[tuple]                    # ragged: multiples of no tile or vector width
    bench_shapes: list[tuple]                    # big enough to fill the chip
    interpret_shapes: list[tuple]                # small enough for Triton's CPU interpreter
    compute_roof: str                            # ceiling key of the unit doing the math
    sweep_shapes: list[tuple] = field(default_factory=list)  # size sweep for the rungs not marked slow
    tune: Callable[[list[str]], list] | None = None  # tune(rung labels): searches to run before timing -> reports
    # the smallest shape whose launches compile to what `shape`'s do (the same specializations): runner.compile_ahead
    compile_shape: Callable[[tuple], tuple] | None = None
    # measure(rung labels) -> {row kind of ladder.results (e.g. "memory"): rows}: what `record` keeps besides timings
    measure: Callable[[list[str]], dict[str, list[dict]]] | None = None
    rungs: list[Rung] = field(default_factory=list)

    def only(self, *backends: str) -> "Problem":
        """The same problem with only the rungs of these backends ("cuda", "triton", "torch") or labels
        ("triton:6_autotuned")."""
        return replace(self, rungs=[r for r in self.rungs if r.backend in backends or r.label in backends])

    def span(self, backend: str, first: str, last: str) -> "Problem":
        """The same problem with `backend`'s rungs from `first` to `last` (ladder order) and the other backends'
        rungs: one part of a ladder that two lessons share."""
        names = [r.name for r in self.rungs if r.backend == backend]
        kept = set(names[names.index(first):names.index(last) + 1])
        return replace(self, rungs=[r for r in self.rungs if r.backend != backend or r.name in kept])

    def intensity(self, shape: tuple) -> float:
        return self.flops(shape) / self.min_bytes(shape)

    def rung(self, backend: str, name: str) -> Rung:
        for r in self.rungs:
            if r.backend == backend and r.name == name:
                return r
        raise UnknownName(f"{self.name} has no rung {backend}:{name}; it has "
                       + ", ".join(r.label for r in self.rungs))


def same_specialization(n: int) -> int:
    """The smallest size a kernel compiled for size `n` is compiled the same for: Triton specializes an integer
    argument on being 1 and on being a multiple of 16, so 4096 -> 16, 1000 -> 24, 4097 -> 17 (under 32: itself)."""
    return n if n < 32 else 16 + n % 16


class UnknownName(KeyError):
    """A problem or rung name that does not exist; its message lists the names that do."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


_REGISTRY: dict[str, Problem] = {}


def register(problem: Problem) -> Problem:
    _REGISTRY[problem.name] = problem
    return problem


def problems() -> dict[str, Problem]:
    """Every problem, in lesson order (whatever order their modules were first imported in)."""
    for module in KERNEL_MODULES:
        importlib.import_module(module)
    lesson_order = [m.removeprefix("kernels.") for m in KERNEL_MODULES]
    ranked = sorted(_REGISTRY, key=lambda n: lesson_order.index(n) if n in lesson_order else len(lesson_order))
    return {name: _REGISTRY[name] for name in ranked}


def get(name: str) -> Problem:
    found = problems()
    if name not in found:
        raise UnknownName(f"no problem {name!r}; known: {', '.join(found)}")
    return found[name]
