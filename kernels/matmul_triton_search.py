"""Triton matmul rung 6's search, and the fused kernels' (kernels/matmul_bias_relu.py): the search space, the
prune that rules configurations out before any is compiled (a model of registers and shared memory), the
@triton.autotune wrapping of kernels/triton/matmul.py's persistent_kernel, the launchers that search, and the
reports of what each search did.

The kernels, and their launchers at fixed configurations, are kernels/triton/matmul.py's; the problem, the rung list
and what ladder.sass compiles are kernels/matmul.py's.
"""
from __future__ import annotations

import torch
import triton

from ladder import autotune
from ladder.runtime import validate
from ladder.runtime.world import WORLD, device
from kernels.triton import matmul as tm

# Every combination is offered to the autotuner; `prune_reason` rules out (and the report says why)
# those that cannot run or cannot win on this GPU at this shape, before any is compiled.
SEARCH_SPACE = dict(BLOCK_M=[64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[64],
                    num_warps=[4, 8], num_stages=[3, 4, 5])
INTERPRETER_SPACE = dict(BLOCK_M=[16, 32], BLOCK_N=[16], BLOCK_K=[16], num_warps=[4], num_stages=[1])
MAX_ACCUMULATORS = 128  # fp32 accumulator registers per thread; more spill (of 255 registers in all)


def shared_bytes(c: dict, capability: tuple[int, int]) -> int:
    """Shared memory of the pipeline's buffers, each an fp16 A tile and B tile, as Triton 3.7 allocates
    them: num_stages buffers on Hopper (wgmma reads its operands from them while the next loads land),
    num_stages - 1 before it. That is all rungs 3-5 use. Rung 6's persistent kernel needs more: its
    epilogue changes the sums' layout through shared memory, and the flattened loop keeps that scratch
    beside the buffers (8-64 KiB, by tile and warps). A configuration whose buffers fit but not with the
    scratch fails to compile, and the search report lists it as failed (tests/test_matmul_triton.py
    checks both against the compiler)."""
    buffers = c["num_stages"] if capability >= (9, 0) else max(1, c["num_stages"] - 1)
    return 2 * buffers * c["BLOCK_K"] * (c["BLOCK_M"] + c["BLOCK_N"])


def prune_reason(c: dict, shape: tuple, gpu, smallest: dict) -> str | None:
    """Why configuration `c` is not timed at `shape` on `gpu` (None: it is timed)."""
    M, N, K = shape
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if per_thread > MAX_ACCUMULATORS:
        return f"{per_thread} fp32 accumulators per thread (> {MAX_ACCUMULATORS}): registers spill"
    if gpu is not None and shared_bytes(c, gpu.capability) > gpu.smem_per_block_bytes:
        return (f"{shared_bytes(c, gpu.capability) // 1024} KiB of shared memory > "
                f"{gpu.smem_per_block_bytes // 1024} KiB on {gpu.arch}")
    for dim, size in (("M", M), ("N", N), ("K", K)):
        block = c[f"BLOCK_{dim}"]
        if block > max(smallest[dim], triton.next_power_of_2(size)):
            return f"BLOCK_{dim} wider than the matrix: a smaller block does the same work"
    return None


def _prune(c: dict, shape: tuple, gpu, configs: list[dict]) -> str | None:
    return prune_reason(c, shape, gpu, {d: min(x[f"BLOCK_{d}"] for x in configs) for d in "MNK"})


SEARCHES = autotune.TritonSearchLog(
    shape_of=lambda args: (args["M"], args["N"], args["K"]),
    label_of=lambda args: ("matmul_bias_relu", "triton:fused") if args.get("BIAS_RELU") else
    ("matmul_bias_gelu", "triton:fused_gelu") if args.get("BIAS_GELU") else ("matmul", "triton:6_autotuned"),
    flops=lambda problem, s: 2 * s[0] * s[1] * s[2], reason=_prune, kernel=tm.persistent_kernel)
autotuned_kernel = triton.autotune(
    configs=autotune.triton_configs(SEARCH_SPACE if WORLD.gpu else INTERPRETER_SPACE),
    key=["M", "N", "K", "BIAS_RELU", "BIAS_GELU"],  # a new search for every new shape (and fused epilogue)
    prune_configs_by={"early_config_prune": SEARCHES.prune},
    do_bench=SEARCHES.bench,             # its default timer needs a GPU; this one also records
)(tm.persistent_kernel)


def launch_autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                     bias: torch.Tensor | None = None, activation: str = "relu") -> torch.Tensor:
    """Rung 6's kernel on checked operands at the configuration its search chose for this shape; with `bias`, its
    epilogue gives relu(a @ b + bias), or gelu(a @ b + bias) (tanh form) with activation="gelu".

    The first call at each new (M, N, K) and epilogue runs the search (see `autotune_report`).
    """
    SEARCHES.start()
    tm.launch_persistent(autotuned_kernel, a, b, out, bias, activation)
    if out.numel():  # it launched: if that searched, the search's report
        SEARCHES.finish(autotuned_kernel.best_config)
    return out


def autotuned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 6 (triton:6_autotuned): the operands checked, then `launch_autotuned`."""
    M, N, K, out = validate.matmul_operands(a, b, out, device=device())
    return launch_autotuned(a, b, out)


def tune(shapes: list[tuple], bias_relu: bool = False) -> list[autotune.Report]:
    """Rung 6's search (or the fused kernel's) at each shape (M, N, K) on random inputs; its reports."""
    tuner = "triton:fused" if bias_relu else "triton:6_autotuned"
    for M, N, K in shapes:
        gen = torch.Generator(device()).manual_seed(7)
        a = torch.randn(M, K, generator=gen, device=device()).half()
        b = torch.randn(K, N, generator=gen, device=device()).half()
        bias = torch.randn(N, generator=gen, device=device()).half() if bias_relu else None
        launch_autotuned(a, b, torch.empty(M, N, dtype=torch.float16, device=device()), bias)
    latest = SEARCHES.latest(tuner)
    return [latest[tuple(s)] for s in shapes if tuple(s) in latest]


def autotune_report() -> str:
    """Every search run in this process: time taken, configurations timed, pruned (why) and failed."""
    if not SEARCHES.reports:
        return ("No search has run in this process yet: the first call of triton:6_autotuned (or the fused "
                "kernel) at a new (M, N, K) runs one.")
    head = [] if WORLD.gpu else [
        "CPU only: the search ran in the Triton interpreter over its 16-32-wide tiles; its times are "
        "interpreter times, and with no GPU there is no shared-memory limit to prune against."]
    return "\n\n".join(head + [r.summary() for r in SEARCHES.reports])

