"""Attention forward, O = softmax(Q·Kᵀ/√D)·V, non-causal and causal: the problem `attention`.

Q, K, V, O fp16 of shape (B, H, S, D), contiguous; D is 64 or 128. A shape is (B, H, S, D, causal)
with causal 0 or 1. FLOPs: 4·B·H·S²·D (two matmuls), half of it when causal. Reference: PyTorch's
math attention in fp32. The rungs: CUDA C++ (kernels/cuda/attention/, one file per rung, launched by
kernels/cuda/attention.py, whose docstring lists the ladder), Triton (kernels/triton/attention.py),
torch:sdpa (PyTorch's default backend) and torch:sdpa_flash (its FlashAttention backend, forced).

The kernel files hold the kernels and their launchers, and run alone (`python -m kernels.cuda.attention`,
`python -m kernels.triton.attention`). This file holds what the harness adds: the problem (FLOPs, bytes,
inputs, reference, shapes), the SDPA anchors, the searches (CUDA rungs 6 and 15, Triton rungs 6-8), Triton
rung 8's compile pass (ladder/ptx.py) and its SASS builds (ladder.sass), the memory model, and the rung list.

Every rung takes (q, k, v, causal, out=None) and returns out; a bad argument raises a ValueError that names it.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from ladder import autotune, ptx, sass
from ladder.runtime import cuda
from ladder.runtime.world import WORLD, device
from ladder.problems import Problem, Rung, register, same_specialization
from kernels.cuda import attention as cuda_attention
from kernels.matmul import CUDA_CORE_DOT
from kernels.triton import attention as triton_attention

CUDA_DIR = "kernels/cuda/attention"
TRITON_SOURCE = "kernels/triton/attention.py"


def flops(shape: tuple) -> float:
    B, H, S, D, causal = shape
    return 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def min_bytes(shape: tuple) -> float:
    """Q, K and V read once, O written once (fp16): what the fused rungs must move."""
    B, H, S, D, _ = shape
    return 4 * 2 * B * H * S * D


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    B, H, S, D, causal = shape
    q, k, v = (torch.randn(B, H, S, D, generator=gen, device=where).half() for _ in range(3))
    return q, k, v, bool(causal)


def reference(q, k, v, causal: bool) -> torch.Tensor:
    """Math attention in fp32, written out (no fused kernel in the reference). A few heads at a time, so
    that their S×S scores stay near 2 GB: at S = 16384 all 128 heads' scores would need 137 GB."""
    B, H, S, D = q.shape
    q, k, v = (x.reshape(B * H, S, D) for x in (q, k, v))
    out = torch.empty(B * H, S, D, dtype=torch.float32, device=q.device)
    later = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1) if causal else None
    heads = max(1, 2**31 // (4 * S * S))
    for h in range(0, B * H, heads):
        s = (q[h:h + heads].float() @ k[h:h + heads].float().transpose(-1, -2)) / D ** 0.5
        if causal:
            s.masked_fill_(later, float("-inf"))
        out[h:h + heads] = torch.softmax(s, dim=-1) @ v[h:h + heads].float()
    return out.reshape(B, H, S, D)


def _anchor_operands(q, k, v, out):
    """The anchors take what our rungs take (triton_attention.operands), and must not fault on any of it, though
    PyTorch's fused kernels check less: a q, k or v that does not start on 16 bytes (a view into an allocation)
    is copied to one that does (they load 16-byte vectors: such a view faults with a sticky "misaligned address"
    that fails every later CUDA call). Returns (q, k, v, out)."""
    *_, out = triton_attention.operands(q, k, v, out)
    q, k, v = (t if t.data_ptr() % 16 == 0 else t.clone() for t in (q, k, v))
    return q, k, v, out


def _anchor(q, k, v, causal: bool, out, backends: list | None = None) -> torch.Tensor:
    """scaled_dot_product_attention (on `backends` only, if given): its own output when out is None (how the anchor
    is timed: its kernels, no copy), else its result copied into out. An empty input (S = 0, where SDPA raises a
    TypeError) gives an empty output, as for our rungs."""
    q, k, v, target = _anchor_operands(q, k, v, out)
    if not target.numel():
        return target
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        result = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return result if out is None else target.copy_(result)


def sdpa(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention, the backend it picks."""
    return _anchor(q, k, v, causal, out)


def sdpa_flash(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """scaled_dot_product_attention with its FlashAttention backend forced (checked as `sdpa`)."""
    return _anchor(q, k, v, causal, out, [SDPBackend.FLASH_ATTENTION])


# ------------------------------------------------------------- CUDA rung 6's search (kernels/cuda/attention.py)

SEARCH_SPACE = dict(BLOCK_M=[64, 128], BLOCK_N=[32, 64, 128], WARPS=[4, 8], STAGES=[2, 3])
MAX_FRAGMENT_REGISTERS = 160  # fp32 S and O fragments per thread; the rest of 255 holds addresses, P, m, l


def prune_reason(c: dict, gpu, head_dim: int) -> str | None:
    """Why CUDA rung 6 does not time configuration `c` for `head_dim` on `gpu` (None: it is timed)."""
    rows = c["BLOCK_M"] // c["WARPS"]
    if rows % 16:
        return f"{rows} queries per warp: mma.sync needs whole 16-row tiles"
    fragments = rows // 16 * 4 * (head_dim + c["BLOCK_N"]) // 8
    if fragments > MAX_FRAGMENT_REGISTERS:
        return f"{fragments} fp32 fragment registers per thread for S and O (> {MAX_FRAGMENT_REGISTERS}): spills"
    if c["BLOCK_N"] * head_dim // 8 % (32 * c["WARPS"]):
        return "K and V tile copies do not split evenly over the threads"
    if gpu is not None and cuda_attention.flash_shared_bytes(c, head_dim, gpu) > gpu.smem_per_block_bytes:
        return (f"{cuda_attention.flash_shared_bytes(c, head_dim, gpu) // 1024} KiB of shared memory > "
                f"{gpu.smem_per_block_bytes // 1024} KiB")
    if gpu is not None and not gpu.has("cp.async") and c["STAGES"] != 2:
        return "no cp.async: only rung 4's synchronous loads run, one build is enough"
    return None


def run_config(c: dict, q, k, v, causal: bool, out=None):
    """Rung 6's kernel with configuration `c` (what the search times): heaviest causal blocks first."""
    return cuda_attention.autotuned(q, k, v, causal, out, lambda shape: c)


TUNERS = {D: autotune.Tuner(problem="attention", name="cuda:6_autotuned", space=SEARCH_SPACE,
                            prune=lambda c, gpu, D=D: prune_reason(c, gpu, D),
                            compile=lambda c, D=D: cuda.without_spills(cuda.load("attention/6_autotuned.cu", dict(HEAD_DIM=D, **c)),
                                                                         "attention_heavy_first"),
                            run=run_config, default=lambda gpu: cuda_attention.PIPELINED)  # fits every GPU: one K, V tile without cp.async
          for D in (64, 128)}


def tune_cuda(shapes: list[tuple], tuners: dict | None = None) -> list[autotune.Report]:
    """CUDA rung 6's search (or `tuners`', per D: HOPPER_TUNERS for rung 15) at each shape (B, H, S, D, causal),
    fresh random inputs; winners are cached."""
    reports = []
    for shape in shapes:
        q, k, v, causal = _make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(7))
        reports.append((tuners or TUNERS)[shape[3]].search((q, k, v, causal), reference(q, k, v, causal), flops(shape),
                                               lambda: torch.empty(shape[:4], dtype=torch.float16, device="cuda"),
                                               shape=tuple(shape)))
    return reports


def cuda_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 6 with the configuration searched for the nearest shape (same D and mask) on this GPU."""
    return cuda_attention.autotuned(q, k, v, causal, out, lambda shape: TUNERS[shape[3]].best(shape))


# ------------------------------------------------------------- the Hopper rungs' blocks: the scores they compute

def block_keys(m0: int, rows: int, S: int, causal: bool, block_n: int) -> int:
    """The keys the Hopper rungs' block of `rows` queries from m0 computes, in whole `block_n`-key tiles: up to the
    tile holding S's last key, or causal, its own last query's."""
    return -(-min(S, m0 + rows if causal else S) // block_n) * block_n


def scores_computed(shape: tuple, rows: int, block_n: int) -> int:
    """The scores the Hopper rungs compute at `shape` = (B, H, S, D, causal) in blocks of `rows` queries and
    `block_n`-key tiles: every row of a block (those past S too) over its block_keys."""
    B, H, S, _, causal = shape
    return B * H * rows * sum(block_keys(m0, rows, S, causal, block_n) for m0 in range(0, S, rows))


def scores_needed(shape: tuple) -> int:
    """The scores attention needs at `shape`: S² a head, S(S + 1) / 2 causal."""
    B, H, S, _, causal = shape
    return B * H * (S * (S + 1) // 2 if causal else S * S)


# ------------------------------------------------------------- CUDA rung 15: rung 14, searched

# Consumer warpgroups, key tile and ring depth (kernels/cuda/attention.py autotuned_launch: each one's launch, a
# consumer thread's registers); rung 14's launch is one point of the space.
HOPPER_SEARCH_SPACE = dict(CONSUMERS=[2, 3], BLOCK_N=[64, 128], STAGES=[2, 3, 4])
# Where record searches rung 15 besides the headline shapes: models' (GPT-2's 1k sequences at D64, a 2k and an 8k
# causal D128 model).
MODEL_SHAPES = [(8, 12, 1024, 64, 1), (8, 12, 1024, 64, 0), (4, 32, 2048, 128, 1), (1, 32, 8192, 128, 1)]


def hopper_prune_reason(c: dict, gpu, head_dim: int) -> str | None:
    """Why rung 15's configuration `c` is not timed at head size `head_dim` on `gpu` (None: it is); a variant that
    spills registers is pruned when it compiles."""
    if gpu is not None and not gpu.has("wgmma"):
        return f"no wgmma on {gpu.arch}"
    _, rows, _ = cuda_attention.autotuned_launch(c)
    need = cuda_attention.wgmma_tma_shared_bytes(head_dim, c, rows)
    if gpu is not None and need > gpu.smem_per_block_bytes:
        return f"{need // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB"
    return None


def run_searched(c: dict, q, k, v, causal: bool, out=None):
    """Rung 15's kernel (rung 14's) with configuration `c` (what the search times)."""
    return cuda_attention.hopper_autotuned(q, k, v, causal, out, lambda shape: c)


def rung14_config(head_dim: int) -> dict:
    """Rung 14's launch as a point of HOPPER_SEARCH_SPACE: what rung 15 runs where nothing was searched."""
    tiles, rows, _ = cuda_attention.hopper_launch("14_critical_path", head_dim)
    return dict(CONSUMERS=rows // 64, **tiles)


HOPPER_TUNERS = {
    D: autotune.Tuner(problem="attention", name="cuda:15_autotuned", space=HOPPER_SEARCH_SPACE,
                      prune=lambda c, gpu, D=D: hopper_prune_reason(c, gpu, D),
                      compile=lambda c, D=D: cuda.without_spills(
                          cuda.load("attention/15_autotuned.cu",
                                    dict(HEAD_DIM=D, **cuda_attention.autotuned_launch(c)[0]), arch="sm_90a"),
                          "attention"),
                      run=run_searched, default=lambda gpu, D=D: rung14_config(D))
    for D in (64, 128)}


def cuda_hopper_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 15: rung 14's kernel with the configuration searched for the nearest shape (same D and mask) on this
    GPU; rung 14's own where none was."""
    return cuda_attention.hopper_autotuned(q, k, v, causal, out, lambda shape: HOPPER_TUNERS[shape[3]].best(shape))


# ------------------------------------------------------------- Triton rungs 6-8: the searches

TRITON_SEARCH_SPACE = dict(BLOCK_M=[64, 128], BLOCK_N=[32, 64, 128], num_warps=[4, 8], num_stages=[2, 3, 4])
TRITON_INTERPRETER_SPACE = dict(BLOCK_M=[16, 32], BLOCK_N=[16], num_warps=[4], num_stages=[1])
TRITON_MAX_REGISTERS = 192  # fp32 values per thread for the output tile and the score tile; more spill


def triton_shared_bytes(c: dict, head_dim: int) -> int:
    """Triton rungs 6-8's shared memory: a K and a V block (fp16) per stage, and Q's tile."""
    return 2 * head_dim * (2 * c["num_stages"] * c["BLOCK_N"] + c["BLOCK_M"])


def triton_prune_reason(c: dict, shape: tuple, gpu) -> str | None:
    """Why Triton rungs 6-8 do not time configuration `c` at `shape` = (B, H, S, D, causal) on `gpu` (None: it is
    timed)."""
    D = shape[3]
    if c["BLOCK_M"] % c["BLOCK_N"]:
        return "BLOCK_M not a multiple of BLOCK_N: the causal split works in whole key blocks"
    if gpu is not None and c["BLOCK_M"] < 16 * c["num_warps"]:
        return "under 16 query rows a warp: warps split the key block, row max and sum cross warps"
    per_thread = c["BLOCK_M"] * (D + c["BLOCK_N"]) // (32 * c["num_warps"])
    if per_thread > TRITON_MAX_REGISTERS:
        return f"{per_thread} fp32 values per thread for O and S tiles (> {TRITON_MAX_REGISTERS}): registers spill"
    if gpu is not None and triton_shared_bytes(c, D) > gpu.smem_per_block_bytes:
        return (f"{triton_shared_bytes(c, D) // 1024} KiB of shared memory > {gpu.smem_per_block_bytes // 1024} KiB "
                f"on {gpu.arch}")
    return None


def triton_search(kernel, tuner: str, query: str = "q_ptr", pre_hook=None, space: dict | None = None
                  ) -> tuple[autotune.TritonSearchLog, triton.runtime.Autotuner]:
    """`kernel` under @triton.autotune over `space` (default: TRITON_SEARCH_SPACE on a GPU, TRITON_INTERPRETER_SPACE
    in the interpreter), the search logged as `tuner`'s: (log, tuned kernel). The kernel takes `query` (Q or its
    descriptor: its shape is the search's), S, HEAD_DIM and CAUSAL; pre_hook (each configuration's) fits the
    arguments to a configuration before it compiles or runs."""
    log = autotune.TritonSearchLog(
        shape_of=lambda args: (*args[query].shape, int(bool(args["CAUSAL"]))),
        label_of=lambda args: ("attention", tuner),
        flops=lambda problem, s: 4 * s[0] * s[1] * s[2] ** 2 * s[3] * (0.5 if s[4] else 1.0),
        reason=lambda c, shape, gpu, configs: triton_prune_reason(c, shape, gpu), kernel=kernel)
    return log, triton.autotune(
        configs=autotune.triton_configs(space or (TRITON_SEARCH_SPACE if WORLD.gpu else TRITON_INTERPRETER_SPACE),
                                        pre_hook),
        key=["S", "HEAD_DIM", "CAUSAL"],   # a new search per sequence length, head size and mask
        prune_configs_by={"early_config_prune": log.prune},
        do_bench=log.bench,
    )(kernel)


@contextlib.contextmanager
def search_logged(log: autotune.TritonSearchLog, kernel: triton.runtime.Autotuner):
    """Around one launch of a searched kernel: a launch that searched (its prune hook ran) leaves its report in
    log.reports."""
    log.start()
    yield
    if log.current is not None:
        log.finish(kernel.best_config)


TRITON_SEARCHES, triton_autotuned_kernel = triton_search(triton_attention.flash_kernel, "triton:6_autotuned")


def triton_autotuned(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton rung 6: the first call at each new (S, D, causal) runs the search (see TRITON_SEARCHES.reports)."""
    with search_logged(TRITON_SEARCHES, triton_autotuned_kernel):
        return triton_attention.launch_flash(triton_autotuned_kernel, q, k, v, causal, out)[0]


TMA_SEARCHES, tma_kernel = triton_search(triton_attention.flash_tma_kernel, "triton:7_tma", query="q_desc",
                                         pre_hook=triton_attention.descriptor_boxes)


def triton_tma(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton rung 7, flash_tma_kernel as Triton compiles it: the first call at each new (S, D, causal) runs the
    search (see TMA_SEARCHES.reports)."""
    checked = triton_attention.tma_operands(q, k, v, out)
    with search_logged(TMA_SEARCHES, tma_kernel):
        return triton_attention.launch_flash_tma(tma_kernel, checked, causal)[0]


# ------------------------------------------------------------- Triton rung 8 (Hopper): rung 7 plus a barrier pass

# Rung 8's search: rung 7's space at two warpgroups (8 warps) in 2 or 3 stages, the only configurations the pass
# changes: with one warpgroup there is no lockstep to end and the pass leaves the PTX as compiled (a 4-warp
# configuration would be rung 7's binary); in 4 stages its two named barriers would not keep the refills in flight
# apart (ladder.ptx.MAX_STAGES; on an H200 the first search of a space with them, at D64, did not finish in 390 s);
# 16 warps leave under 16 query rows a warp at BLOCK_M 128. After triton_prune_reason, BLOCK_M 128 with BLOCK_N 32-128:
# 6 configurations at D64 and at D128, each about 1.5 s to compile for sm_90a on one CPU core (Triton 3.6 and 3.9),
# all at once in compile_ahead's threads.
PASS_SPACE = dict(TRITON_SEARCH_SPACE, num_warps=[8], num_stages=[2, 3])
PASS_INTERPRETER_SPACE = dict(TRITON_INTERPRETER_SPACE, num_warps=[8])
PASS_SEARCHES, pass_kernel = triton_search(triton_attention.flash_tma_kernel, "triton:8_barrier_pass", query="q_desc",
                                           pre_hook=triton_attention.descriptor_boxes,
                                           space=PASS_SPACE if WORLD.gpu else PASS_INTERPRETER_SPACE)
# What the pass did to the kernel rung 8 launched last (ladder.ptx.applied): the row `record` times it in says so.
LAST_PASS: dict | None = None


def triton_barrier_pass(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton rung 8, Triton plus a barrier pass: flash_tma_kernel compiled through ladder.ptx's pass, the key loop's
    CTA barriers that order nothing dropped and the refill's split into sync (the warps that issue the copies) and
    arrive (the others). Its own search (PASS_SEARCHES, over PASS_SPACE) at each new (S, D, causal). The pass must
    change what it compiles: a configuration it leaves as compiled fails to compile (ladder.ptx.PassDidNotApply:
    the search rules it out and reports it failed; a launch raises), so nothing timed here is rung 7's binary. One
    shape has nothing to change: at S = 1 Triton compiles S as the constant 1 and the key loop away (no ring, no
    refill); that launch goes through the pass unrequired, and says so (LAST_PASS: "split" 0)."""
    global LAST_PASS
    checked = triton_attention.tma_operands(q, k, v, out)
    S = checked[2]
    with ptx.refill_barriers_split(require=S != 1), search_logged(PASS_SEARCHES, pass_kernel):
        out, compiled = triton_attention.launch_flash_tma(pass_kernel, checked, causal, ptx_pass=ptx.tag())
    if compiled is not None:   # compiled for a GPU (the interpreter runs the kernel's Python: no PTX to pass)
        LAST_PASS = ptx.applied(compiled)
        if not LAST_PASS or (S != 1 and not LAST_PASS["split"]):
            raise ptx.PassDidNotApply(f"rung 8 launched {compiled.name} without the pass applied: {LAST_PASS}")
    return out


def pass_record() -> dict:
    """What rung 8's rows record in "ptx_pass": the pass (name, content hash) and what it changed in the kernel
    launched last ("dropped", "split"), when one was."""
    return {**ptx.identity(), **({k: LAST_PASS[k] for k in ("dropped", "split")} if LAST_PASS else {})}


TRITON_TUNED = {"triton:6_autotuned": (triton_autotuned, TRITON_SEARCHES), "triton:7_tma": (triton_tma, TMA_SEARCHES),
                "triton:8_barrier_pass": (triton_barrier_pass, PASS_SEARCHES)}


def tune_triton(shapes: list[tuple], tuner: str = "triton:6_autotuned") -> list[autotune.Report]:
    """The search of Triton's `tuner` (rung 6, 7 or 8) at each shape (B, H, S, D, causal) on random inputs; its
    reports."""
    run, log = TRITON_TUNED[tuner]
    for B, H, S, D, causal in shapes:
        gen = torch.Generator(device()).manual_seed(7)
        q, k, v = (torch.randn(B, H, S, D, generator=gen, device=device()).half() for _ in range(3))
        run(q, k, v, bool(causal))
    latest = log.latest(tuner)
    return [latest[tuple(s)] for s in shapes if tuple(s) in latest]


# ------------------------------------------------------------- Triton's kernels compiled ahead of time (ladder.sass)

_PTRS = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "lse_ptr": "*fp32"}
_STRIDES = [f"stride_{t}{d}" for t in "qkvo" for d in "bhsd"]
# A contiguous (B, H, S, D) tensor's strides: D's is 1 (Triton compiles it as a constant), the others multiples of
# 16 at the benchmark shapes, as S is.
_ALIGNED = ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "S", *(s for s in _STRIDES if not s.endswith("d")))


def flash_sass_case(rung: str, head_dim: int = 64, causal: bool = False) -> dict:
    """ladder.sass.triton_sass's arguments for flash_kernel as Triton rung 3, 4 or 5 launches it on a GPU."""
    t = triton_attention.GPU_TILES[rung]
    return dict(kernel=triton_attention.flash_kernel,
                signature={**_PTRS, "S": "i32", "H": "i32", "qk_scale": "fp32", **{s: "i32" for s in _STRIDES},
                           "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                           "CAUSAL": "constexpr", "TENSOR_CORES": "constexpr", "STORE_LSE": "constexpr",
                           "HEAVIEST_FIRST": "constexpr"},
                constexprs=dict(lse_ptr=None, **{s: 1 for s in _STRIDES if s.endswith("d")}, HEAD_DIM=head_dim,
                                BLOCK_M=t["BLOCK_M"], BLOCK_N=t["BLOCK_N"], CAUSAL=causal,
                                TENSOR_CORES=rung != "3_fused", STORE_LSE=False, HEAVIEST_FIRST=False),
                divisible_by_16=_ALIGNED, num_warps=t["num_warps"], num_stages=t["num_stages"])


def tma_compile(config: dict, arch: str, head_dim: int = 64, causal: bool = False, ptx_pass: bool = False):
    """flash_tma_kernel compiled for `arch` (no GPU needed) as Triton rung 7 launches it with `config` (tiles, warps
    and stages), its descriptors' boxes as descriptor_boxes sets them; ptx_pass: as rung 8 does, through ladder.ptx's
    pass (PassDidNotApply where the pass leaves it as compiled). Triton's compiled kernel: its SASS through
    ladder.sass.compiled_sass, what the pass did through ladder.ptx.applied."""
    tiles = {k: v for k, v in config.items() if k.startswith("BLOCK_")}
    with ptx.refill_barriers_split(require=True) if ptx_pass else contextlib.nullcontext():
        return sass.triton_compile(
            triton_attention.flash_tma_kernel,
            signature={**{d: f"tensordesc<fp16[1,1,{tiles[rows]},{head_dim}]>"
                          for d, rows in triton_attention.DESCRIPTOR_ROWS.items()},
                       "S": "i32", "H": "i32", "qk_scale": "fp32", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
                       "BLOCK_N": "constexpr", "CAUSAL": "constexpr", "PTX_PASS": "constexpr"},
            constexprs=dict(HEAD_DIM=head_dim, CAUSAL=causal, PTX_PASS=ptx.tag() if ptx_pass else "", **tiles),
            arch=arch, divisible_by_16=("S",), num_warps=config["num_warps"], num_stages=config["num_stages"])


def tma_sass(config: dict, arch: str, head_dim: int = 64, causal: bool = False, ptx_pass: bool = False):
    """The SASS of tma_compile(...): rung 7's kernel as Triton compiles it, or (ptx_pass) rung 8's."""
    return sass.compiled_sass(tma_compile(config, arch, head_dim, causal, ptx_pass), arch)


# ------------------------------------------------------------- the searches before `record` times them

def _tune(labels: list[str]) -> list:
    """The searches (rung 6 in both languages, Triton's rungs 7 and 8) at the headline shapes, CUDA rung 15's there
    and at MODEL_SHAPES, before they are timed (for `record`)."""
    return ((tune_cuda(HEADLINE) if "cuda:6_autotuned" in labels else [])
            + (tune_cuda(HEADLINE + MODEL_SHAPES, HOPPER_TUNERS) if "cuda:15_autotuned" in labels else [])
            + [r for tuner in ("triton:6_autotuned", "triton:7_tma", "triton:8_barrier_pass") if tuner in labels
               for r in tune_triton(HEADLINE, tuner)])


# ------------------------------------------------------------- memory: what a call allocates (lessons 04a-04c)

MATERIALIZED = ("1_naive", "2_coalesced")   # the rungs, in both languages, that keep S = Q·Kᵀ (then P) in DRAM


def workspace_bytes(label: str, shape: tuple) -> int | None:
    """DRAM a rung allocates on top of Q, K, V and O at `shape` = (B, H, S, D, causal): the B·H·S² fp32 score
    matrix for the materialized rungs (1 and 2, CUDA and Triton; causal or not, all of it), nothing for the
    fused ones (3 and up); None for PyTorch's SDPA, whose backends allocate what they choose (measure it)."""
    backend, name = label.split(":", 1)
    if backend == "torch":
        return None
    if backend not in ("cuda", "triton"):
        raise ValueError(f"label {label!r}: the backend must be cuda, triton or torch")
    B, H, S, _, _ = shape
    return triton_attention.score_matrix_bytes(B, H, S) if name in MATERIALIZED else 0


def peak_bytes(label: str, shape: tuple) -> int | None:
    """What one call holds at its peak: Q, K, V and O (four fp16 B·H·S·D tensors) and the rung's workspace."""
    workspace = workspace_bytes(label, shape)
    B, H, S, D, _ = shape
    return None if workspace is None else 4 * 2 * B * H * S * D + workspace


def _cuda(name: str, run, **kw) -> Rung:
    return Rung("cuda", name, run, f"{CUDA_DIR}/{name}.cu", **kw)


def _triton(name: str, run, **kw) -> Rung:
    return Rung("triton", name, run, TRITON_SOURCE, **kw)


HEADLINE = [(4, 32, 4096, D, causal) for D in (64, 128) for causal in (0, 1)]
PROBLEM = register(Problem(
    name="attention",
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=_make_inputs,
    reference=reference,
    new_output=lambda s, where: torch.empty(s[:4], dtype=torch.float16, device=where),
    check_shapes=[(1, 2, 1, 64, 0), (2, 3, 100, 64, 1), (1, 2, 1000, 128, 0), (1, 2, 1000, 64, 1),
                  (1, 1, 4097, 128, 1)],
    bench_shapes=HEADLINE,
    interpret_shapes=[(1, 2, 1, 64, 0), (1, 1, 19, 64, 1), (1, 1, 17, 128, 0)],  # S: 16-wide tiles + a ragged edge
    compute_roof="fp16_tc_TFLOPs",
    tune=_tune,
    # H and S are kernel arguments, specialized on being 1 or a multiple of 16; D and causal are compiled in
    compile_shape=lambda s: (1, same_specialization(s[1]), same_specialization(s[2]), s[3], s[4]),
    sweep_shapes=[(4, 32, S, 64, 0) for S in (512, 1024, 2048, 8192, 16384)],
    rungs=[
        _cuda("1_naive", cuda_attention.naive, slow=True),
        _cuda("2_coalesced", cuda_attention.coalesced, slow=True),
        _cuda("3_fused", cuda_attention.fused),
        _cuda("4_tensor_core", cuda_attention.tensor_core, needs="tensor_cores"),
        _cuda("5_pipelined", cuda_attention.pipelined, needs="tensor_cores",
              fallback=("cp.async", "rung 4's synchronous loads (no copies in flight)")),
        _cuda("6_autotuned", cuda_autotuned, needs="tensor_cores", searches=True,
              fallback=("cp.async", "rung 4's synchronous loads, tuned")),
        _cuda("7_wgmma_tma", cuda_attention.wgmma_tma, needs="wgmma"),
        _cuda("8_warp_specialized", cuda_attention.warp_specialized, needs="wgmma"),
        _cuda("9_pingpong", cuda_attention.pingpong, needs="wgmma"),
        _cuda("10_intra_overlap", cuda_attention.intra_overlap, needs="wgmma"),
        _cuda("11_fast_exp2", cuda_attention.fast_exp2, needs="wgmma"),
        _cuda("12_three_consumers", cuda_attention.three_consumers, needs="wgmma"),
        _cuda("13_persistent", cuda_attention.persistent, needs="wgmma"),
        _cuda("14_critical_path", cuda_attention.critical_path, needs="wgmma"),
        _cuda("15_autotuned", cuda_hopper_autotuned, needs="wgmma", searches=True),
        _triton("1_naive", triton_attention.naive, slow=True),
        _triton("2_coalesced", triton_attention.coalesced, slow=True),
        _triton("3_fused", triton_attention.fused),
        _triton("4_tensor_core", triton_attention.tensor_core, needs="tensor_cores", fallback=CUDA_CORE_DOT),
        _triton("5_pipelined", triton_attention.pipelined, needs="tensor_cores", fallback=CUDA_CORE_DOT),
        _triton("6_autotuned", triton_autotuned, needs="tensor_cores", fallback=CUDA_CORE_DOT, searches=True),
        _triton("7_tma", triton_tma, needs="tma", searches=True),
        _triton("8_barrier_pass", triton_barrier_pass, needs="tma", searches=True, ptx_pass=pass_record),
        Rung("torch", "sdpa", sdpa, own_output=True),
        Rung("torch", "sdpa_flash", sdpa_flash, needs="flash_attention", own_output=True),
    ],
))
