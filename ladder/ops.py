"""Our kernels as PyTorch operators, for a model to call: `matmul` and `attention`.

    from ladder import ops
    y = ops.matmul(x, layer.weight.t(), layer.bias, activation="gelu")   # nn.Linear's weight, not copied
    o = ops.attention(q, k, v, causal=True)                              # (B, H, S, D) views, any strides

Each is an operator of torch.library, `torch.ops.ladder.matmul` and `torch.ops.ladder.attention`, with a fake
implementation: torch.compile(fullgraph=True) keeps it in the graph, and a CUDA graph captures it. On a GPU it
is a `triton_op` whose kernel is called through `wrap_triton`, so Inductor sees the Triton kernel itself and
launches it from its own generated code. In the CPU world it is a `custom_op` with its own fake: there the
kernels run in Triton's interpreter, which torch cannot trace (`wrap_triton` hands an interpreted kernel back as
it is). matmul has its backward (through the same op, on transposed views; with a bias and GELU, where a gradient
is wanted, `ladder::matmul_gelu_and_input` also returns GELU's input, for its backward); attention returns,
beside O, the log-sum-exp of each query's scores, from which its backward (FlashAttention-2's, kernels/triton/
attention_backward.py, an operator too: `ladder::attention_backward`) recomputes the probabilities.

Which kernel runs: `backend(op)` says, and why (`describe()` for both; `matmul_choice(...)` per case).
  matmul     On a GPU from sm_80 on, per case (shape, A and B layouts, epilogue, dtype: ladder.dispatch.Case) the
             fastest of torch.matmul, Triton rung 6 (kernels/triton/matmul.py, persistent_kernel, its bias + ReLU / GELU
             epilogue fused) and, in an eager call on a GPU with the TMA (sm_90), rung 7 (tma_persistent: A
             row-major, B row-major or a weight's transpose, K and N padded into a copy where not a multiple of 8,
             bias and activation as torch ops), as this GPU's dispatch table measured them there: the first call
             in a case not yet measured times them (ladder.first_use: a few seconds, once per case and GPU, kept on
             disk); with KERNEL_LADDER_TUNE=0, torch.matmul wherever nothing was measured. On older GPUs (a T4,
             sm_75) torch.matmul: Triton's tl.dot runs on CUDA cores there and cuBLAS has the tensor cores. CPU:
             rung 6 in Triton's interpreter.
  attention  Triton rung 6 (kernels/triton/attention.py, flash_kernel) on every GPU (on sm_75 its tl.dot runs on
             CUDA cores: SDPA would be faster, but it returns no log-sum-exp); in fp16 on a GPU with wgmma (sm_90a),
             CUDA rung 15 (`ladder::attention_hopper`, a custom op: hopper_overlays/op_attention.cu) at a shape where
             this GPU measured it faster (`attention_kernel`: on first use, both checked then timed, kept on disk;
             under torch.compile when the graph is traced). CPU: the interpreter.
Under torch.compile the op picks between rung 6 and torch.matmul only (rung 7's launch, its K and N padded into copies
and its TMA descriptors built in Python at each call, is not written for wrap_triton), measuring a case on real
tensors of the traced shape when the graph is traced. Rung 12 is timed by the
sweep, not launched by the op: CUDA C++ launched through CuPy, with no fused epilogue. Under KERNEL_LADDER_EMULATE the
emulated GPU decides (sm_75: matmul by torch.matmul; sm_80: no rung 7), but Triton still compiles for the real GPU.

Rung 6's configuration (tiles, warps, stages) in a case is the fastest first-use tuning timed there (of the
proposals ladder.first_use makes), or the sweep's; until a case is measured, the op's own rule's (`rule_config`):
the winner recorded in results/ (or searched in this process) for the nearest shape on this GPU, where rung 6's
prune keeps it at this shape; under autotune.SEARCH_MIN_FLOP, or with no search known, the smallest tiles the prune
keeps. Attention's is chosen by the same rule, once per shape, after rung 6's search has run at that shape on first
use (`attention_plan`).

Host cost. A call through the dispatcher (torch.ops.ladder.*) pays the custom op's Python layers (autograd
wrapper, redispatch, alias checks: about 10 µs on a desktop CPU, 30 on the H100 host measured) before our code
runs. `ops.matmul` and
`ops.attention` skip them where the dispatcher would only call our implementation anyway (`_direct`): real
tensors, no gradient to record, no torch.compile, no mode or functorch transform, no profiler. Eagerly wanting a
gradient, they skip the dispatcher too: an autograd.Function around the same run (_EagerMatmul, _EagerAttention),
or, where a matmul's case picks cuBLAS, torch's own ops and their C++ autograd nodes. Anything else goes
through the operator. Our implementation then keeps per specialization what does not change between calls (the
configuration, grid, constexprs, and the compiled kernel with its launcher) and calls Triton's launcher directly
on torch's current stream: what is left per call is the checks, the output's allocation and the launch.
`python -m ladder.launch` measures it against torch.matmul and SDPA.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
import triton
from torch.library import wrap_triton
from triton.runtime.autotuner import Heuristics

from ladder import autotune, dispatch, first_use
from ladder.runtime import validate
from ladder.runtime.direct_launch import launch_context, laid_out, run_compiled, run_laid_out
from ladder.runtime.hardware import detect
from ladder.runtime.world import WORLD
from kernels.triton import attention as ta
from kernels.triton import matmul as tm
from kernels import matmul_triton_search as triton_search
from kernels.matmul import CUDA_CORE_DOT
from kernels import attention as attention_problem
from kernels.cuda import attention as cuda_attention
from kernels.attention_backward_search import autotuned_backward

INT32 = 2**31
GRID_Y_MAX = 65535                       # a launch grid's second dimension: attention's B·H
ACTIVATIONS = (None, "relu", "gelu")     # gelu: GELU's tanh form, GPT-2's (F.gelu(x, approximate="tanh"))
F16, BF16 = torch.float16, torch.bfloat16
DTYPES = (F16, BF16)                     # bf16 from sm_80 on, on a GPU (not in the interpreter)
DTYPE_NAMES = {F16: "float16", BF16: "bfloat16"}   # a dispatch Case's dtype
_PLAIN = validate.PLAIN
_DEVICE = "cuda" if WORLD.gpu else "cpu"
RUNG6, RUNG7, CUBLAS = dispatch.RUNG6, dispatch.RUNG7, dispatch.CUBLAS


# ------------------------------------------------------------- which kernel backs an op on this machine

@dataclass(frozen=True)
class Backend:
    kernel: str   # a rung label: "triton:6_autotuned", "torch:cublas"
    note: str     # where it runs and why

    def __str__(self) -> str:
        return f"{self.kernel} ({self.note})"


def choose(op: str, gpu) -> Backend:
    """The kernel that backs `op` ("matmul" or "attention") on `gpu` (a ladder.runtime.hardware.GPU; None: the CPU)."""
    if op not in ("matmul", "attention"):
        raise ValueError(f"no op {op!r}: ladder.ops has matmul and attention")
    if gpu is None:
        return Backend(RUNG6, "Triton's interpreter on the CPU: checks correctness, not speed")
    emulated = (f"; {gpu.emulation_note}: Triton compiles for the {gpu.emulated_on}" if gpu.emulated_on else "")
    if gpu.has("triton_mma"):
        return Backend(RUNG6, f"tensor cores, {gpu.arch}{emulated}")
    if op == "matmul":
        return Backend(CUBLAS, f"{gpu.arch}: {CUDA_CORE_DOT[1]}; cuBLAS has the tensor cores, "
                               f"the bias and activation run as torch ops{emulated}")
    return Backend(RUNG6, f"{gpu.arch}: {CUDA_CORE_DOT[1]} (SDPA returns no log-sum-exp){emulated}")


@functools.cache
def backend(op: str) -> Backend:
    """What backs `op` on this machine, and on a GPU whether a dispatch table picks matmul's kernel per shape
    (chosen once: `backend.cache_clear()` after changing KERNEL_LADDER_EMULATE)."""
    chosen = choose(op, detect())
    if op == "matmul" and chosen.kernel == RUNG6 and WORLD.gpu:
        return Backend(RUNG6, f"{chosen.note}; {dispatch.describe()}")
    return chosen


def describe() -> str:
    return "\n".join(f"{op:9s}  {backend(op)}" for op in ("matmul", "attention"))


# ------------------------------------------------------------- checks: one ValueError that names the problem

_ON_DEVICE = (lambda t: t.is_cuda) if WORLD.gpu else (lambda t: t.device.type == "cpu")


def _tensor(op: str, name: str, t, ndim: int, dtypes: tuple = (F16,)) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"ladder.ops.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise ValueError(f"ladder.ops.{op}: {name} must be {' or '.join(map(str, dtypes))} (the kernels' "
                         f"type{'s' * (len(dtypes) > 1)}), got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"ladder.ops.{op}: {name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if not _ON_DEVICE(t):
        raise ValueError(f"ladder.ops.{op}: {name} is on {t.device}; here the kernels run on {_DEVICE}")


def _bf16_here() -> bool:
    """bf16 operands run here: on a GPU from sm_80 on (Triton's interpreter computes bf16 products wrongly)."""
    gpu = detect()
    return gpu is not None and gpu.has("bf16")


def _one_dtype(op: str, **tensors) -> None:
    """The operands (None: left out) share one dtype, and it runs here."""
    given = {n: t for n, t in tensors.items() if t is not None}
    dtypes = {t.dtype for t in given.values()}
    if len(dtypes) > 1:
        raise ValueError(f"ladder.ops.{op}: {', '.join(given)} must share one dtype, got "
                         + ", ".join(str(t.dtype) for t in given.values()))
    if dtypes == {BF16} and not _bf16_here():
        gpu = detect()
        raise ValueError(f"ladder.ops.{op}: bfloat16 runs on a GPU only (Triton's interpreter computes bf16 products "
                         "wrongly); pass torch.float16 here" if gpu is None else
                         f"ladder.ops.{op}: bfloat16 needs a GPU from sm_80 on; this one is {gpu.arch}: pass torch.float16")


def _different_devices(op: str, **tensors) -> ValueError:
    return ValueError(f"ladder.ops.{op}: tensors on different devices: "
                      + ", ".join(f"{n} on {t.device}" for n, t in tensors.items() if t is not None))


def _check_matmul(a, b, bias, activation) -> tuple:
    """(M, N, K) of checked operands. One expression tests what a call needs (a fraction of a µs);
    only when it fails does _check_matmul_each test each property in turn, to name the one that is wrong."""
    try:
        (M, K), (K_b, N) = a.shape, b.shape
        device = a.get_device()
        dtype = a.dtype
        if ((dtype is F16 or (dtype is BF16 and _bf16_here())) and b.dtype is dtype and K == K_b and _ON_DEVICE(a)
                and _ON_DEVICE(b) and b.get_device() == device and activation in ACTIVATIONS and (bias is None or (
                    bias.dtype is dtype and bias.shape == (N,) and _ON_DEVICE(bias) and bias.get_device() == device))):
            return M, N, K
    except (AttributeError, TypeError, ValueError, RuntimeError):  # not a tensor, not 2-D, a tensor as a flag
        pass
    return _check_matmul_each(a, b, bias, activation)


def _check_matmul_each(a, b, bias, activation) -> tuple:
    _tensor("matmul", "a", a, 2, DTYPES)
    _tensor("matmul", "b", b, 2, DTYPES)
    if bias is not None:
        _tensor("matmul", "bias", bias, 1, DTYPES)
    _one_dtype("matmul", a=a, b=b, bias=bias)
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"ladder.ops.matmul: inner dimensions differ: a is {M}x{K}, b is {K_b}x{N}")
    if bias is not None and bias.shape[0] != N:
        raise ValueError(f"ladder.ops.matmul: bias has {bias.shape[0]} elements; a @ b has N={N} columns")
    if b.device != a.device or (bias is not None and bias.device != a.device):
        raise _different_devices("matmul", a=a, b=b, bias=bias)
    if activation not in ACTIVATIONS:
        raise ValueError(f"ladder.ops.matmul: activation {activation!r}: it takes None, 'relu' or 'gelu'")
    return M, N, K


def _check_attention(q, k, v, causal, scale) -> tuple:
    """(B, H, S, D, scale) of checked operands, scale defaulting to 1/√D; tested as _check_matmul does."""
    try:
        B, H, S, D = shape = q.shape
        device = q.get_device()
        dtype = q.dtype
        if ((dtype is F16 or (dtype is BF16 and _bf16_here())) and k.dtype is dtype and v.dtype is dtype
                and k.shape == shape and v.shape == shape
                and _ON_DEVICE(q) and _ON_DEVICE(k) and _ON_DEVICE(v) and k.get_device() == device
                and v.get_device() == device
                and D in ta.HEAD_DIMS and B * H <= GRID_Y_MAX and (causal is True or causal is False)
                and (scale is None or isinstance(scale, (int, float)))
                # the kernel forms a head's offset in 64 bits, a row's and a column's within it in 32
                and (S + 128) * max(*q.stride()[2:], *k.stride()[2:], *v.stride()[2:]) < INT32):
            return B, H, S, D, 1 / math.sqrt(D) if scale is None else float(scale)
    except (AttributeError, TypeError, ValueError, RuntimeError):  # not a tensor, not 4-D, a tensor as a flag
        pass
    return _check_attention_each(q, k, v, causal, scale)


def _check_attention_each(q, k, v, causal, scale) -> tuple:
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor("attention", name, t, 4, DTYPES)
    _one_dtype("attention", q=q, k=k, v=v)
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"ladder.ops.attention: shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if k.device != q.device or v.device != q.device:
        raise _different_devices("attention", q=q, k=k, v=v)
    B, H, S, D = q.shape
    if D not in ta.HEAD_DIMS:
        raise ValueError(f"ladder.ops.attention: head dimension D={D} is not supported: the kernel takes D in "
                         f"{ta.HEAD_DIMS}")
    if B * H > GRID_Y_MAX:
        raise ValueError(f"ladder.ops.attention: B·H = {B * H} heads, over the {GRID_Y_MAX} a launch grid's "
                         "second dimension holds")
    if not isinstance(causal, bool):
        raise ValueError(f"ladder.ops.attention: causal must be True or False, got {causal!r}")
    if scale is not None and not isinstance(scale, (int, float)):
        raise ValueError(f"ladder.ops.attention: scale must be a number or None, got {type(scale).__name__}")
    if (S + 128) * max(q.stride()[2:] + k.stride()[2:] + v.stride()[2:]) >= INT32:
        raise ValueError("ladder.ops.attention: a row's offset within a head overflows 32 bits at these strides "
                         f"(q {q.stride()}, k {k.stride()}, v {v.stride()})")
    return B, H, S, D, 1 / math.sqrt(D) if scale is None else float(scale)


# ------------------------------------------------------------- the configuration: chosen once per shape

def _jit_and_rules(kernel):
    """The @triton.jit function under `kernel`'s @triton.heuristics layers, its parameter names, and the layers'
    rules (constexpr name -> rule(args)), which a launch of the bare function must apply itself."""
    rules = {}
    while isinstance(kernel, Heuristics):
        rules.update(kernel.values)
        kernel = kernel.fn
    return kernel, list(inspect.signature(kernel.fn).parameters), rules


_MATMUL_JIT, _MATMUL_PARAMS, _MATMUL_RULES = _jit_and_rules(tm.persistent_kernel)
_FLASH_JIT, _FLASH_PARAMS, _ = _jit_and_rules(ta.flash_kernel)
_MATMUL_HEAD = _MATMUL_PARAMS.index("BLOCK_M")   # a_ptr .. stride_cn: the arguments that change per call
_FLASH_HEAD = _FLASH_PARAMS.index("HEAD_DIM")    # q_ptr .. stride_od


@dataclass(frozen=True)
class Plan:
    """One kernel's launch at one shape: its configuration, grid and constexpr arguments (in the kernel's order)."""
    config: dict
    grid: tuple        # 3 dimensions
    constexprs: tuple
    options: dict      # num_warps, num_stages


def choose_config(configs: list, shape: tuple, flops: float, problem: str, reason, searched: list, gpu) -> dict:
    """Of rung 6's `configs` (triton.Configs), the one the op launches at `shape` on `gpu` (None: the
    interpreter): see the module's docstring. reason(config, shape, gpu, configs) -> why it cannot run or win
    there (None: it can); `searched`: this process's search reports."""
    dicts = [autotune.triton_config_dict(c) for c in configs]
    viable = [c for c in dicts if reason(c, shape, gpu, dicts) is None]
    if gpu is not None and flops >= autotune.SEARCH_MIN_FLOP:
        # this process's searches first: of shapes equally near, min keeps the first (the newer search's winner)
        reports = [r for r in searched if r.tuner == RUNG6 and r.problem == problem] + autotune.cached_reports(
            gpu.slug, problem, RUNG6)
        if reports:
            winner = min(reports, key=lambda r: autotune._distance(r.shape, shape)).best
            if winner in viable:
                return winner
    return min(viable, key=lambda c: math.prod(v for k, v in c.items() if k.startswith("BLOCK_")))


def _plan(config: dict, grid: tuple, params: list, head: int, constexprs: dict) -> Plan:
    options = {k: config[k] for k in ("num_warps", "num_stages")}
    values = {**{k: v for k, v in config.items() if k not in options}, **constexprs}
    return Plan(config, grid + (1,) * (3 - len(grid)), tuple(values[name] for name in params[head:]), options)


@dataclass(frozen=True)
class MatmulChoice:
    kernel: str   # what the call runs under torch.compile: RUNG6 or CUBLAS
    config: dict  # rung 6's configuration
    why: str
    eager: str    # and in an eager call: RUNG6, RUNG7 or CUBLAS
    training: str  # and in an eager call that wants a gradient (dispatch.TRAINING_MARGIN_MS)


def rule_config(M: int, N: int, K: int) -> dict:
    """Rung 6's configuration at (M, N, K) by the op's own rule, before anything is measured in the case: the
    nearest search winner on this GPU where rung 6's prune keeps it there, else the smallest tiles it keeps."""
    return choose_config(triton_search.autotuned_kernel.configs, (M, N, K), 2 * M * N * K, "matmul",
                         triton_search._prune, triton_search.SEARCHES.reports, detect())


@functools.lru_cache(maxsize=None)
def matmul_choice(M: int, N: int, K: int, layout: str = "row", epilogue: str | None = None,
                  dtype: str = "float16", a_layout: str = "row") -> MatmulChoice:
    """The kernel and rung 6's configuration in the case (M, N, K, B's layout, epilogue, dtype, A's layout:
    ladder.dispatch.Case):
    the dispatch table's pick where it has measured the case, else, on a GPU, the pick of a first-use tuning
    (ladder.first_use) that measures it now; chosen once per case."""
    case = dispatch.Case(M, N, K, layout, epilogue, dtype, a_layout)
    gpu, rule = detect(), rule_config(M, N, K)
    entry = dispatch.lookup(case)
    if entry is None and gpu is not None and first_use.enabled() and not dispatch.suspending:
        if _capturing():
            raise RuntimeError(f"ladder.ops.matmul: {case} has not been measured on this GPU, and a CUDA graph is "
                               "being captured, where nothing can be timed: run the model once before capturing it "
                               f"(or set {first_use.TUNE_ENV}=0 to run torch.matmul where nothing was measured)")
        entry = first_use.tune(case, gpu, rule)
    if entry is None:
        if gpu is None or dispatch.suspending:
            why = "Triton's interpreter" if gpu is None else "the op's own rule, timed by a sweep"
            return MatmulChoice(RUNG6, rule, f"rung 6 by the op's own rule: {why}", RUNG6, RUNG6)
        why = (f"not measured ({first_use.TUNE_ENV}=0: no tuning on first use)" if not first_use.enabled() else
               f"not measured: {first_use.LOG[-1].note}")
        return MatmulChoice(CUBLAS, rule, f"torch.matmul, {why}", CUBLAS, CUBLAS)
    kernel = entry.pick(dispatch.OP_CANDIDATES) or CUBLAS
    eager_candidates = dispatch.EAGER_CANDIDATES if _has_rung7() else dispatch.OP_CANDIDATES
    eager = entry.pick(eager_candidates) or CUBLAS
    training = entry.pick(eager_candidates, dispatch.TRAINING_MARGIN_MS) or CUBLAS
    timed = entry.timings.get(RUNG6)
    measured = ", ".join(f"{label} {t.ms:.3f} ms" for label, t in entry.timings.items())
    return MatmulChoice(kernel, timed.config if timed else rule, f"measured in this case on this GPU: {measured}", eager,
                        training)


def _capturing() -> bool:
    """A CUDA graph is being captured on this thread's stream (never on a CPU-only torch)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _has_rung7() -> bool:
    """Rung 7 can run here: a GPU with the TMA (not an emulated older one)."""
    gpu = detect()
    return gpu is not None and gpu.has("tma")


def forget_choices() -> None:
    """Choose again at every shape (ladder.dispatch calls it when the table in effect changes: on_reload): the choices, the
    plans and `backend`'s note made from them, and the kernels compiled for those plans (keyed without them)."""
    for cached in (matmul_choice, matmul_plan, backend, _attention_kernel, _attention_training_kernel):
        cached.cache_clear()
    _MATMUL_LAUNCHES.compiled.clear()


dispatch.on_reload(forget_choices)


@functools.lru_cache(maxsize=None)
def matmul_plan(M: int, N: int, K: int, layout: str = "row", epilogue: str | None = None,
                dtype: str = "float16", a_layout: str = "row") -> Plan:
    """Rung 6's launch in the case (M, N, K, layout, epilogue, dtype, a_layout), in matmul_choice's configuration,
    the bias and activation fused where the call has both."""
    config = matmul_choice(M, N, K, layout, epilogue, dtype, a_layout).config
    args = dict(M=M, N=N, K=K, **config)
    grid = (tm.programs(triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])),)
    return _plan(config, grid, _MATMUL_PARAMS, _MATMUL_HEAD,
                 {**{name: rule(args) for name, rule in _MATMUL_RULES.items()},
                  "BIAS_RELU": epilogue == "bias_relu", "BIAS_GELU": epilogue == "bias_gelu", "FLATTEN": True})


@functools.lru_cache(maxsize=None)
def attention_plan(B: int, H: int, S: int, D: int, causal: bool, heaviest_first: bool = False) -> Plan:
    """Rung 6's launch at (B, H, S, D, causal) on this GPU, writing the log-sum-exp, in the configuration its search
    found fastest at this shape: on a GPU, the first call at a shape no search has measured (and big enough for one
    to pay: autotune.SEARCH_MIN_FLOP) runs rung 6's search there (ladder.first_use.search_attention, seconds; kept
    on disk), unless KERNEL_LADDER_TUNE=0. heaviest_first: flash_kernel's HEAVIEST_FIRST, its grid (B·H, blocks)."""
    shape = (B, H, S, D, int(causal))
    searches = attention_problem.TRITON_SEARCHES
    gpu = detect()
    if (gpu is not None and first_use.enabled() and not dispatch.suspending
            and searches.flops("attention", shape) >= autotune.SEARCH_MIN_FLOP
            and not any(tuple(r.shape) == shape for r in searches.reports + autotune.cached_reports(
                gpu.slug, "attention", RUNG6))):
        if _capturing():
            raise RuntimeError(f"ladder.ops.attention: no search has measured {shape} on this GPU, and a CUDA graph is "
                               "being captured, where nothing can be timed: run the model once before capturing it "
                               f"(or set {first_use.TUNE_ENV}=0 to run the nearest search's winner)")
        first_use.search_attention(shape, gpu)
    config = choose_config(attention_problem.triton_autotuned_kernel.configs, shape, searches.flops("attention", shape),
                           "attention", lambda c, s, gpu, _: attention_problem.triton_prune_reason(c, s, gpu),
                           searches.reports, gpu)
    blocks = triton.cdiv(S, config["BLOCK_M"])
    return _plan(config, (B * H, blocks) if heaviest_first else (blocks, B * H), _FLASH_PARAMS, _FLASH_HEAD,
                 dict(HEAD_DIM=D, CAUSAL=causal, TENSOR_CORES=True, STORE_LSE=True, HEAVIEST_FIRST=heaviest_first))


# ------------------------------------------------------------- the lean launch

class Launches:
    """A Triton kernel's launches from real tensors. The first launch at each specialization key goes through
    Triton's own path (binding, specialization, the compile or its cache: tens of µs, or seconds to compile), which
    returns the compiled kernel; later launches with that key call its launcher directly. The key must hold all
    that Triton specializes on: every integer argument's value, each pointer's 16-byte alignment, None arguments,
    the constexprs (the plan) and the device; and, as the launch is laid out once for torch's launcher
    (direct_launch.laid_out), every other argument's value (a float, which Triton does not specialize on). In the
    interpreter every launch is an interpreted run."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.compiled: dict[tuple, tuple] = {}   # key: the compiled kernel, its launch laid out (or None)

    def __call__(self, key: tuple, plan: Plan, tensors: tuple, scalars: tuple) -> None:
        """Launch with the kernel's pointer arguments (`tensors`, first in its signature; None for one left out)
        and the rest up to its constexprs (`scalars`; the constexprs are the plan's); key[0]: the device."""
        device = key[0]
        if WORLD.gpu and device != torch._C._cuda_getDevice():  # Triton launches on the current device
            with torch.cuda.device(device):
                return self(key, plan, tensors, scalars)
        found = self.compiled.get(key)
        if found is None:
            compiled = self.kernel[plan.grid](*tensors, *scalars, *plan.constexprs, **plan.options)
            if WORLD.gpu:
                named = tuple(None if t is None else i for i, t in enumerate(tensors))
                self.compiled[key] = compiled, laid_out(compiled, plan.grid, named, (*scalars, *plan.constexprs))
            return
        compiled, laid = found
        context = launch_context(device)
        if laid is None or not run_laid_out(laid, tensors, context):
            # Given a tensor, Triton's launcher calls its data_ptr() and asks the driver (cuPointerGetAttribute)
            # whether the address is on the GPU, which the checks made sure of; given an int, it takes it as one
            run_compiled(compiled, plan.grid, (*[None if t is None else t.data_ptr() for t in tensors], *scalars,
                                               *plan.constexprs), device, context)


_MATMUL_LAUNCHES = Launches(_MATMUL_JIT)
_FLASH_LAUNCHES = Launches(_FLASH_JIT)


def _traced(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor | None) -> bool:
    """validate.traced for an op's three operands, unrolled: it runs on every call."""
    return type(x) not in _PLAIN or type(y) not in _PLAIN or (z is not None and type(z) not in _PLAIN)


def _sizes(*sizes) -> tuple:
    """Sizes as ints: a configuration is chosen per shape, so under dynamic shapes the plan specializes them, as
    a Triton autotune key would."""
    return tuple(int(s) for s in sizes)


# ------------------------------------------------------------- matmul

def _matmul_run(a, b, bias, activation, M: int, N: int, K: int, keep_input: bool = False):
    """ladder::matmul on checked operands; with keep_input (a bias and GELU: ladder::matmul_gelu_and_input), the
    output and GELU's input a @ b + bias."""
    fused = bias is not None and activation is not None
    traced = _traced(a, b, bias)
    case = _case(a, b, bias, activation)
    if traced:
        sizes = _sizes(M, N, K)
        picked = CUBLAS if backend("matmul").kernel == CUBLAS else matmul_choice(*sizes, *case).kernel
    else:
        picked = _eager_pick(case, M, N, K)
    if picked == CUBLAS:
        return _cublas(a, b, bias, activation, keep_input)
    if picked == RUNG7:   # bias and activation as torch ops; K or N padded (a copy) where not a multiple of 8
        out = tm.tma_persistent(a, b)
        if keep_input:
            return F.gelu(out.add_(bias), approximate="tanh"), out
        return first_use.epilogue(out, bias, activation)
    (stride_am, stride_ak), (stride_bk, stride_bn) = a.stride(), b.stride()
    # rung 6 forms a row's offset in 64 bits, a column's and a k step's in 32 (as its row-major rungs do)
    if max(stride_ak, stride_bk) * 256 >= INT32 or (N - 1) * stride_bn >= INT32:
        raise ValueError(f"ladder.ops.matmul: a's strides {a.stride()} or b's {b.stride()} with N={N} overflow the "
                         "kernel's 32-bit column offsets; pass a or b with rows contiguous")
    out = a.new_empty((M, N))
    pre = a.new_empty((M, N)) if keep_input else None
    if fused and bias.stride(0) != 1:  # the epilogue reads the bias as one contiguous row: N elements copied
        bias = bias.contiguous()
    tensors = (a, b, out, bias if fused else None, pre)
    scalars = (M, N, K, stride_am, stride_ak, stride_bk, stride_bn, N, 1)
    if traced:
        if out.numel():
            plan = matmul_plan(*sizes, *case)
            wrap_triton(_MATMUL_JIT)[plan.grid](*tensors, *scalars, *plan.constexprs, **plan.options)
    elif out.numel():
        _launch_rung6(matmul_plan(M, N, K, *case), tensors, scalars)
    if keep_input:
        return out, pre
    return out if fused else first_use.epilogue(out, bias, activation)


def _case(a, b, bias, activation) -> tuple:
    """The call's case beside its sizes, as matmul_choice takes it: (B's layout, epilogue, dtype, A's layout)."""
    layout = "row" if b.is_contiguous() else "weight_t" if validate.is_stored_transposed(b) else "strided"
    a_layout = "row" if a.is_contiguous() else "transposed" if validate.is_stored_transposed(a) else "strided"
    return layout, first_use.epilogue_name(bias is not None, activation), DTYPE_NAMES[a.dtype], a_layout


def _eager_pick(case: tuple, M: int, N: int, K: int) -> str:
    """The kernel an eager call runs in `case` at (M, N, K): cuBLAS on a GPU without tensor cores for Triton."""
    return CUBLAS if backend("matmul").kernel == CUBLAS else matmul_choice(M, N, K, *case).eager


def _training_pick(case: tuple, M: int, N: int, K: int) -> str:
    """_eager_pick for an eager call that wants a gradient (MatmulChoice.training)."""
    return CUBLAS if backend("matmul").kernel == CUBLAS else matmul_choice(M, N, K, *case).training


def _cublas(a, b, bias, activation, keep_input: bool = False):
    """The call as torch's own ops: torch.matmul (addmm with a bias), then the activation; with keep_input, GELU's
    output and its input."""
    out = torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b)
    return (F.gelu(out, approximate="tanh"), out) if keep_input else first_use.epilogue(out, None, activation)


def _launch_rung6(plan: Plan, tensors: tuple, scalars: tuple) -> None:
    """Rung 6's eager launch: `tensors` (a, b, out, the bias or None, GELU's kept input or None) and `scalars` in
    the kernel's order, keyed on all Triton specializes on."""
    a, b, _, bias, pre = tensors
    # out is fresh from the caching allocator, 512-byte aligned: only a, b and the bias can be misaligned.
    # Plans live until forget_choices, which forgets the compiled kernels too: id(plan) names the config
    key = (a.get_device(), a.dtype, id(plan), *scalars[:7], a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0,
           bias is not None and bias.data_ptr() % 16 == 0, pre is not None)
    _MATMUL_LAUNCHES(key, plan, tensors, scalars)


def _matmul_impl(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
                 activation: Optional[str] = None) -> torch.Tensor:
    return _matmul_run(a, b, bias, activation, *_check_matmul(a, b, bias, activation))


def _matmul_fake(a, b, bias=None, activation=None):
    M, N, K = _check_matmul(a, b, bias, activation)
    return a.new_empty((M, N))


def _matmul_gelu_and_input_impl(a: torch.Tensor, b: torch.Tensor,
                                bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _matmul_run(a, b, bias, "gelu", *_check_matmul(a, b, bias, "gelu"), keep_input=True)


def _matmul_gelu_and_input_fake(a, b, bias):
    out = _matmul_fake(a, b, bias, "gelu")
    return out, torch.empty_like(out)


def _attention_outputs(q: torch.Tensor) -> tuple:
    """(O, LSE) for queries q (B, H, S, D): O laid out as q is, (B, S, H, D) in memory where q's heads are closer
    together than its rows (the views a model makes of one (B, S, 3, H, D) projection; then
    o.transpose(1, 2).reshape(B, S, H * D) is free), else (B, H, S, D); LSE (B, H, S) fp32."""
    B, H, S, D = q.shape
    heads_inner = q.stride(1) < q.stride(2)
    out = torch.empty_strided((B, H, S, D), (S * H * D, D, H * D, 1) if heads_inner else (H * S * D, S * D, D, 1),
                              dtype=q.dtype, device=q.device)
    return out, q.new_empty((B, H, S), dtype=torch.float32)


def _attention_run(q, k, v, causal: bool, B: int, H: int, S: int, D: int, scale: float,
                   heaviest_first: bool | None = None) -> tuple:
    """ladder::attention on checked operands: (O, LSE). heaviest_first: rung 6's causal query blocks longest first
    (None: where this GPU measured that faster at the shape, attention_kernel)."""
    if heaviest_first is None:
        heaviest_first = causal and attention_kernel(*_sizes(B, H, S, D), causal) == first_use.RUNG6_HEAVIEST_FIRST
    out, lse = _attention_outputs(q)
    tensors = (q, k, v, out, lse)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    if _traced(q, k, v):
        if out.numel():
            plan = attention_plan(*_sizes(B, H, S, D), causal, heaviest_first)
            wrap_triton(_FLASH_JIT)[plan.grid](*tensors, S, H, scale * ta.LOG2E, *strides, *plan.constexprs,
                                               **plan.options)
    elif out.numel():
        plan = attention_plan(B, H, S, D, causal, heaviest_first)
        # out and lse are fresh, 512-byte aligned; the scale is in the key as Launches lays the launch out
        key = (q.get_device(), q.dtype, B, H, S, D, causal, heaviest_first, scale, *strides, q.data_ptr() % 16 == 0,
               k.data_ptr() % 16 == 0, v.data_ptr() % 16 == 0)
        _FLASH_LAUNCHES(key, plan, tensors, (S, H, scale * ta.LOG2E, *strides))
    return out, lse


def _attention_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _attention_run(q, k, v, causal, *_check_attention(q, k, v, causal, scale))


def _attention_fake(q, k, v, causal=False, scale=None):
    _check_attention(q, k, v, causal, scale)
    return _attention_outputs(q)


# ------------------------------------------------------------- registration

def _register(name: str, impl, fake) -> None:
    """impl as the operator ladder::name: a triton_op on a GPU (impl is its own fake, through wrap_triton), a
    custom_op with `fake` in the interpreter, whose kernels torch cannot trace."""
    if WORLD.gpu:
        torch.library.triton_op(f"ladder::{name}", impl, mutates_args=())
    else:
        torch.library.custom_op(f"ladder::{name}", impl, mutates_args=()).register_fake(fake)


_register("matmul", _matmul_impl, _matmul_fake)
# gelu(a @ b + bias) and a @ b + bias, both written by one kernel: what training keeps for GELU's backward
_register("matmul_gelu_and_input", _matmul_gelu_and_input_impl, _matmul_gelu_and_input_fake)
_register("attention", _attention_impl, _attention_fake)
MATMUL_OP = torch.ops.ladder.matmul.default
MATMUL_GELU_AND_INPUT_OP = torch.ops.ladder.matmul_gelu_and_input.default
ATTENTION_OP = torch.ops.ladder.attention.default


def _direct(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor | None) -> bool:
    """Whether a call may skip the dispatcher: where it would only call our implementation anyway."""
    if torch.compiler.is_compiling():  # Dynamo: the operator goes into the graph
        return False
    if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad or (z is not None and z.requires_grad)):
        return False
    return _plain_eager(x, y, z)


def _plain_eager(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor | None) -> bool:
    """Whether nothing but autograd would come between an eager call and our implementation: no mode, no functorch
    transform, no profiler (it shows the operators), no traced tensor."""
    return not (torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
                or torch._C._are_functorch_transforms_active() or torch._C._autograd._profiler_enabled()
                or _traced(x, y, z))


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    """a @ b, then + bias (N,), then relu or gelu (GELU's tanh form): fp16 in and out, or bf16 on a GPU from sm_80
    on (one dtype for a, b and the bias), fp32 sums; a (M, K) and b (K, N) any strided views (b = weight.t() of an
    nn.Linear is read in place). With a bias and an activation
    the epilogue is fused into the kernel (C written once); a bias alone or an activation alone takes one more
    pass over C (torch ops). A bias whose elements are not adjacent is copied (N elements). Differentiable in
    a, b and bias (where a gradient is wanted, the fused kernel also writes GELU's input for its backward); on a
    GPU before sm_80 it runs torch.matmul (`backend("matmul")`), and on newer ones whichever of torch.matmul, rung 6
    and rung 7 this GPU measured fastest in the call's case (`matmul_choice`: on first use, ladder.first_use); an
    eager call that wants a gradient runs ours only where it won by dispatch.TRAINING_MARGIN_MS too."""
    shape = _check_matmul(a, b, bias, activation)
    if _direct(a, b, bias):
        return _matmul_run(a, b, bias, activation, *shape)
    eager = not torch.compiler.is_compiling() and _plain_eager(a, b, bias)   # then a gradient is wanted, eagerly
    if eager and _training_pick(_case(a, b, bias, activation), *shape) == CUBLAS:
        # called as torch's ops: their backward runs in autograd's C++ nodes (torch.mm's), where a Python node's
        # would cost tens of µs more a call
        return _cublas(a, b, bias, activation)
    if activation == "gelu" and torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)):
        # training: GELU's backward needs its input a @ b + bias; the kernel writes it beside the output (without
        # a bias, which the kernel fuses only with GELU, autograd keeps it from F.gelu, as for nn.Linear then F.gelu)
        if bias is None:
            return F.gelu(_EagerMatmul.apply(a, b, None, None, shape) if eager else MATMUL_OP(a, b), approximate="tanh")
        return _EagerMatmul.apply(a, b, bias, "gelu", shape) if eager else MATMUL_GELU_AND_INPUT_OP(a, b, bias)[0]
    return _EagerMatmul.apply(a, b, bias, activation, shape) if eager else MATMUL_OP(a, b, bias, activation)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(q·kᵀ·scale)·v (scale defaults to 1/√D; causal: no key after its query): q, k, v fp16, or bf16 on a
    GPU from sm_80 on, (B, H, S, D) of one shape and dtype, D 64 or 128, any strides (the (B, S, 3, H, D)
    projection's views are read in place). O is laid out as q is (see _attention_outputs).
    torch.ops.ladder.attention also returns each query's log-sum-exp, which the backward (FlashAttention-2's,
    rung 4 of kernels/attention_backward.py: rung 2 or 3, as searched on this GPU) recomputes P from. In fp16 on a
    GPU with wgmma it runs CUDA rung 15 where this GPU measured that faster at the shape (`attention_kernel`).
    An eager call that wants a gradient runs torch's SDPA, forward and backward, where this GPU measured that
    faster at the shape than ours (`attention_training_kernel`), as matmul runs cuBLAS where it wins."""
    shape = _check_attention(q, k, v, causal, scale)
    hopper, run, args = _forward(q.dtype, shape, causal)
    if _direct(q, k, v):
        return run(q, k, v, causal, *args)[0]
    if not torch.compiler.is_compiling() and _plain_eager(q, k, v):  # a gradient wanted, eagerly
        if attention_training_kernel(*_sizes(*shape[:4]), causal) == first_use.SDPA:
            # its backward runs in autograd's C++ nodes, with no Python node's cost a call
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return _EagerAttention.apply(q, k, v, causal, scale, run, args)[0]
    return (HOPPER_OP if hopper else ATTENTION_OP)(q, k, v, causal, scale)[0]


def _forward(dtype: torch.dtype, shape: tuple, causal: bool) -> tuple[bool, object, tuple]:
    """(whether CUDA rung 15 runs, the forward on checked operands, its arguments after causal) at `shape` =
    _check_attention's result: the kernel attention_kernel picks."""
    kernel = attention_kernel(*_sizes(*shape[:4]), causal)
    if dtype is F16 and kernel == first_use.RUNG15:
        return True, _hopper_run, shape
    return False, _attention_run, (*shape, kernel == first_use.RUNG6_HEAVIEST_FIRST)


@torch.compiler.assume_constant_result   # Dynamo calls it when it traces, and bakes the answer into the graph
def attention_kernel(B: int, H: int, S: int, D: int, causal: bool) -> str:
    """The kernel ops.attention runs in fp16 at (B, H, S, D, causal) on this GPU, the fastest measured at this shape
    of: rung 6; where causal, rung 6 with its longest query blocks first (first_use.RUNG6_HEAVIEST_FIRST, in bf16
    too); CUDA rung 15 where it runs (a GPU with wgmma). On first use (and under torch.compile, when the graph is
    traced) each checked and timed (first_use.attention_kernel: seconds, the choice kept on disk); unless
    KERNEL_LADDER_TUNE=0, or below a size worth a search (rung 6 then)."""
    return _attention_kernel(B, H, S, D, causal)


@functools.lru_cache(maxsize=None)
def _attention_kernel(B: int, H: int, S: int, D: int, causal: bool) -> str:
    gpu = detect()
    shape = (B, H, S, D, int(causal))
    if (gpu is None or (not causal and not gpu.has("wgmma")) or dispatch.suspending
            or attention_problem.TRITON_SEARCHES.flops("attention", shape) < autotune.SEARCH_MIN_FLOP):
        return RUNG6   # nothing to choose from, or not worth timing
    scale = 1 / math.sqrt(D)
    candidates = {RUNG6: lambda q, k, v, causal: _attention_run(q, k, v, causal, B, H, S, D, scale, False)[0]}
    if causal:   # the same kernel and configuration in another order: the grid's tail is the short blocks
        candidates[first_use.RUNG6_HEAVIEST_FIRST] = (
            lambda q, k, v, causal: _attention_run(q, k, v, causal, B, H, S, D, scale, True)[0])
    if gpu.has("wgmma"):
        candidates[first_use.RUNG15] = lambda q, k, v, causal: _attention_hopper_impl(q, k, v, causal, scale)[0]
    found = first_use.attention_kernel(shape, gpu, candidates)
    if found is None and _capturing():
        raise RuntimeError(f"ladder.ops.attention: which kernel runs at {shape} was never measured on this GPU, and a "
                           "CUDA graph is being captured, where nothing can be timed: run the model once before "
                           f"capturing it (or set {first_use.TUNE_ENV}=0 to run rung 6)")
    return found or RUNG6


def attention_training_kernel(B: int, H: int, S: int, D: int, causal: bool) -> str:
    """What an eager ops.attention call that wants a gradient runs at (B, H, S, D, causal) on this GPU: ours
    (attention_kernel's forward and FlashAttention-2's backward: its label) or first_use.SDPA, whichever a forward
    and backward measured faster on first use (first_use.attention_kernel with training, the choice kept on disk);
    ours where nothing was measured (no GPU, KERNEL_LADDER_TUNE=0)."""
    return _attention_training_kernel(B, H, S, D, causal)


@functools.lru_cache(maxsize=None)
def _attention_training_kernel(B: int, H: int, S: int, D: int, causal: bool) -> str:
    gpu, ours = detect(), attention_kernel(B, H, S, D, causal)
    if gpu is None or dispatch.suspending:
        return ours
    shape, scale = (B, H, S, D, int(causal)), 1 / math.sqrt(D)
    _, run, args = _forward(F16, (B, H, S, D, scale), causal)
    candidates = {ours: lambda q, k, v, causal: _EagerAttention.apply(q, k, v, causal, None, run, args)[0],
                  first_use.SDPA: lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
    found = first_use.attention_kernel(shape, gpu, candidates, training=True)
    if found is None and _capturing():
        raise RuntimeError(f"ladder.ops.attention: whether ours or SDPA trains faster at {shape} was never measured "
                           "on this GPU, and a CUDA graph is being captured, where nothing can be timed: run a training"
                           f" step once before capturing it (or set {first_use.TUNE_ENV}=0 to run ours)")
    return found or ours


# ------------------------------------------------------------- attention through CUDA rung 15 (Hopper)

def _attention_hopper_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                           scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CUDA rung 15 (kernels/cuda/attention.py, hopper_op) in the configuration its search found fastest at the
    nearest shape on this GPU (rung 14's where none was): (O, LSE) as ladder::attention returns them. fp16, on a
    GPU with wgmma (sm_90a); a custom op: torch.compile calls it as it is, CUDA graphs capture it."""
    return _hopper_run(q, k, v, causal, *_check_attention(q, k, v, causal, scale))


def _hopper_run(q, k, v, causal: bool, B: int, H: int, S: int, D: int, scale: float) -> tuple:
    """ladder::attention_hopper on checked operands: (O, LSE)."""
    gpu = detect()
    if q.dtype is not F16 or gpu is None or not gpu.has("wgmma"):
        raise ValueError(f"ladder attention_hopper: CUDA rung 15 takes fp16 on a GPU with wgmma (sm_90a), got "
                         f"{q.dtype} on {gpu.name if gpu else 'no GPU'}")
    out, lse = _attention_outputs(q)
    if out.numel():
        config = attention_problem.HOPPER_TUNERS[D].best((B, H, S, D, int(causal)))
        cuda_attention.hopper_op(q, k, v, causal, scale, out, lse, config)
    return out, lse


torch.library.custom_op("ladder::attention_hopper", _attention_hopper_impl, mutates_args=()).register_fake(
    lambda q, k, v, causal=False, scale=None: (_check_attention(q, k, v, causal, scale), _attention_outputs(q))[1])
HOPPER_OP = torch.ops.ladder.attention_hopper.default


# ------------------------------------------------------------- matmul's backward

def _matmul_setup(ctx, inputs, output) -> None:
    a, b, bias, activation = inputs
    ctx.activation = activation
    # ReLU's derivative is read off its output. GELU's needs its input, a @ b + bias: ops.matmul calls
    # ladder::matmul_gelu_and_input where a gradient is wanted, which keeps it; called directly, this op recomputes it
    ctx.save_for_backward(a, b, bias if activation == "gelu" else None, output if activation == "relu" else None)


def _linear_grads(ctx, a, b, grad) -> tuple:
    """The gradients of a, b and the bias, from the gradient of a @ b + bias: each laid out as its operand, as
    torch.mm's backward makes them (for a column-major one, nn.Linear's weight.t(), a row-major product's
    transpose: nothing is copied into the weight's layout)."""
    # the dispatcher drops trailing arguments left at their defaults (bias=None, activation=None) from the inputs
    need_a, need_b, need_bias = (*ctx.needs_input_grad, False)[:3]
    # .mT: views, read in place
    grad_a = (matmul(b, grad.mT).mT if validate.is_stored_transposed(a) else matmul(grad, b.mT)) if need_a else None
    grad_b = (matmul(grad.mT, a).mT if validate.is_stored_transposed(b) else matmul(a.mT, grad)) if need_b else None
    return grad_a, grad_b, grad.sum(0) if need_bias else None


def _matmul_backward(ctx, grad):
    a, b, bias, out = ctx.saved_tensors
    if ctx.activation == "relu":
        grad = torch.where(out > 0, grad, 0)
    elif ctx.activation == "gelu":
        grad = torch.ops.aten.gelu_backward(grad, matmul(a, b, bias), approximate="tanh")
    return (*_linear_grads(ctx, a, b, grad), None)


def _matmul_gelu_and_input_setup(ctx, inputs, output) -> None:
    a, b, _ = inputs
    ctx.mark_non_differentiable(output[1])   # kept for the backward, never handed to the caller
    ctx.save_for_backward(a, b, output[1])


def _matmul_gelu_and_input_backward(ctx, grad, _):
    a, b, pre = ctx.saved_tensors
    return _linear_grads(ctx, a, b, torch.ops.aten.gelu_backward(grad, pre, approximate="tanh"))


torch.library.register_autograd("ladder::matmul", _matmul_backward, setup_context=_matmul_setup)
torch.library.register_autograd("ladder::matmul_gelu_and_input", _matmul_gelu_and_input_backward,
                                setup_context=_matmul_gelu_and_input_setup)


class _EagerMatmul(torch.autograd.Function):
    """ladder::matmul (with a bias and GELU, ladder::matmul_gelu_and_input) as autograd sees it, without the
    dispatcher: for an eager call that wants a gradient where nothing else would intercept the operator
    (_plain_eager). The same kernels, saved tensors and backward; the operators' own autograd path costs tens of µs
    more a call in Python. `shape`: _check_matmul's result."""

    @staticmethod
    def forward(ctx, a, b, bias, activation, shape: tuple):
        ctx.kept_input = bias is not None and activation == "gelu"
        if ctx.kept_input:
            out, pre = _matmul_run(a, b, bias, activation, *shape, keep_input=True)
            ctx.save_for_backward(a, b, pre)
            return out
        out = _matmul_run(a, b, bias, activation, *shape)
        _matmul_setup(ctx, (a, b, bias, activation), out)
        return out

    @staticmethod
    def backward(ctx, grad):
        grads = _matmul_gelu_and_input_backward(ctx, grad, None) if ctx.kept_input else _matmul_backward(ctx, grad)
        return (*grads[:3], None, None)


# ------------------------------------------------------------- attention's backward

def _attention_setup(ctx, inputs, output) -> None:
    q, k, v, *given = inputs
    causal, scale = (*given, *(False, None)[len(given):])  # the dispatcher drops trailing arguments at defaults
    ctx.causal, ctx.scale = causal, scale
    ctx.set_materialize_grads(False)  # an output no loss uses gets None, not a tensor of zeros to read
    ctx.save_for_backward(q, k, v, *output)  # the inputs (views, not copied), O and the log-sum-exp: no B·H·S²


def _attention_backward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                             lse: torch.Tensor, grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor],
                             causal: bool, scale: Optional[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    first_use.search_attention_backward((*q.shape, causal), detect())   # where nothing measured the shape
    return autotuned_backward(q, k, v, out, lse, grad_out, causal, scale, dlse=grad_lse)


def _attention_backward_fake(q, k, v, out, lse, grad_out, grad_lse, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# an operator too, with its fake: torch.compile traces a graph's backward, in the interpreter as on a GPU
_register("attention_backward", _attention_backward_impl, _attention_backward_fake)


def _attention_backward(ctx, grad_out, grad_lse):
    """FlashAttention-2's backward (kernels/attention_backward.py, rung 4: rung 2's two kernels or rung 3's
    one, whichever its search on this GPU found faster, in their searched tiles), the log-sum-exp's gradient
    included."""
    q, k, v, out, lse = ctx.saved_tensors
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out  # a loss on the log-sum-exp alone
    args = (q, k, v, out, lse, grad_out, grad_lse, ctx.causal, ctx.scale)
    # an eager backward that records no graph (not create_graph) skips the dispatcher, as the forward does
    direct = not torch.is_grad_enabled() and _direct(q, k, v)
    grads = _attention_backward_impl(*args) if direct else torch.ops.ladder.attention_backward(*args)
    return (*grads, None, None)


torch.library.register_autograd("ladder::attention", _attention_backward, setup_context=_attention_setup)
torch.library.register_autograd("ladder::attention_hopper", _attention_backward, setup_context=_attention_setup)


class _EagerAttention(torch.autograd.Function):
    """ladder::attention (or ladder::attention_hopper) as autograd sees it, without the dispatcher: for an eager call
    that wants a gradient where nothing else would intercept the operator (_plain_eager). The same forward
    (`run`: _attention_run or _hopper_run on checked operands, `shape` the rest of its arguments), setup and backward;
    the operator's own autograd path costs tens of µs more a call in Python."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale, run, shape: tuple):
        output = run(q, k, v, causal, *shape)
        _attention_setup(ctx, (q, k, v, causal, scale), output)
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        return (*_attention_backward(ctx, grad_out, grad_lse), None, None)
