"""ladder.ops.matmul's first-use tuning: the first call in a case (shape, layouts, epilogue: ladder.dispatch.Case)
that this GPU's dispatch table has not measured times a short list of candidates there, once, and adds the
fastest to the table, where every later call (and every later process) finds it. This is torch.compile's
max-autotune idea, choosing between its Triton templates and cuBLAS by timing them, at a budget of seconds.

What it times (`candidates`), each checked before it is timed, and timed only if correct:
  torch:cublas             torch.matmul (torch.addmm with a bias), the activation as a torch op
  triton:6_autotuned       rung 6 in the configurations `proposals` gives the shape (at most PROPOSALS), the bias
                           and activation fused into its epilogue where the call has both
  triton:7_tma_persistent  where this GPU has the TMA and A and B are in layouts its descriptors take: rung 7 in its
                           tiles, bias and activation as torch ops (K or N padded into a copy where not a multiple
                           of 8: the copy is part of what is timed)
The inputs are its own, random, in the case's layout: one tuning serves an eager call, a trace under torch.compile
(real tensors of the traced shape, made outside the trace's fake-tensor mode) and a call before a CUDA graph's
capture. A case is tuned once: the table's lock is held while it is, so a second process tuning the same case
waits, then reads the first one's entry.

Bounded: each candidate is timed in a short window (WARMUP_MS, REP_MS, L2 flushed: ladder.timing.bench), and where
a candidate's output and rung 7's padded copies would not fit in the GPU's free memory with HEADROOM_BYTES to
spare, the case is not tuned (the op runs torch.matmul there, and `why` says so).
Off (`KERNEL_LADDER_TUNE=0`): nothing is measured on first use, and a case with no entry runs torch.matmul.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
from torch.utils._python_dispatch import _disable_current_modes

from ladder import autotune, dispatch
from ladder.check import compare
from ladder.dispatch import CUBLAS, RUNG6, RUNG7, Case, Entry, Timed
from ladder.runtime.world import WORLD, device
from ladder.timing import bench
from kernels import attention as attention_problem
from kernels import attention_backward_search as backward_search
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm

TUNE_ENV = "KERNEL_LADDER_TUNE"
PROPOSALS = 3                  # rung 6's configurations timed in a case
WARMUP_MS, REP_MS = 10, 40     # each candidate's timing window
HEADROOM_BYTES = 1 << 30       # left free on the GPU while tuning
CHECK_ROWS = 64                # rows of each output checked against an fp32 product
EDGE_COST = 64                 # proposals' model: a tile's loads per FLOP, 1/BLOCK_M + 1/BLOCK_N, in FLOP-time units


def enabled() -> bool:
    return os.environ.get(TUNE_ENV, "1") != "0"


@dataclass(frozen=True)
class Tuned:
    case: object     # a matmul's Case, or an attention's shape (B, H, S, D, causal)
    seconds: float   # wall time of the tuning, compiles included
    entry: Entry | None   # a matmul's: what was measured (None: nothing was)
    note: str        # what was timed, or why nothing was


LOG: list[Tuned] = []   # every tuning in this process, in order


# ------------------------------------------------------------- rung 6's proposals: a model of the shape

def modeled_cost(c: dict, shape: tuple, sm_count: int) -> float:
    """Rung 6's time in `c` at `shape`, up to a constant: the persistent grid's waves of tiles over the SMs, each
    tile's FMAs, plus its loads (an A and a B tile per k step) weighted by EDGE_COST."""
    M, N, K = shape
    tiles = triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"])
    area = c["BLOCK_M"] * c["BLOCK_N"]
    return math.ceil(tiles / sm_count) * area * (1 + EDGE_COST * (1 / c["BLOCK_M"] + 1 / c["BLOCK_N"]))


def proposals(shape: tuple, gpu, rule: dict) -> list[dict]:
    """Rung 6's configurations to time at `shape` on `gpu`: the op's own rule's (`rule`), then the cheapest by
    `modeled_cost` among those rung 6's prune keeps there, a tile shape each, its warps and stages as the
    search space's most-staged configuration that fits; PROPOSALS in all."""
    configs = [autotune.triton_config_dict(c) for c in triton_search.autotuned_kernel.configs]
    viable = [c for c in configs if triton_search._prune(c, shape, gpu, configs) is None]
    by_tile: dict[tuple, dict] = {}
    for c in sorted(viable, key=lambda c: (-c["num_stages"], -c["num_warps"])):
        by_tile.setdefault((c["BLOCK_M"], c["BLOCK_N"]), c)
    ranked = sorted(by_tile.values(), key=lambda c: modeled_cost(c, shape, gpu.sm_count))
    chosen = [rule]
    for c in ranked:
        if len(chosen) == PROPOSALS:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


# ------------------------------------------------------------- the candidates and their inputs

def _in_layout(rows: int, cols: int, layout: str, gen, dtype: torch.dtype) -> torch.Tensor:
    """A rows x cols operand in a case's layout: "row"; "transposed" (A) or "weight_t" (B), the transpose of a
    row-major cols x rows; "strided", every other column of a wider one."""
    if layout == "row":
        return torch.randn(rows, cols, generator=gen, device=device()).to(dtype)
    if layout in ("transposed", "weight_t"):
        return torch.randn(cols, rows, generator=gen, device=device()).to(dtype).t()
    return torch.randn(rows, 2 * cols, generator=gen, device=device()).to(dtype)[:, ::2]


def epilogue(out: torch.Tensor, bias, activation) -> torch.Tensor:
    """What a call runs as torch ops after its matmul (a bias, an activation, each one more pass over C)."""
    if bias is not None:
        out = out.add_(bias)
    if activation == "relu":
        return out.relu_()
    return F.gelu(out, approximate="tanh") if activation == "gelu" else out


def split_epilogue(epilogue: str | None) -> tuple[bool, str | None]:
    """(has a bias, the activation) of a Case's epilogue: None, "bias", "relu", "gelu", "bias_relu", "bias_gelu"."""
    if epilogue is None:
        return False, None
    return epilogue.startswith("bias"), epilogue.removeprefix("bias").lstrip("_") or None


def epilogue_name(has_bias: bool, activation: str | None) -> str | None:
    return "_".join(["bias"] * has_bias + [activation] * (activation is not None)) or None


def candidates(case: Case, gpu, rule: dict) -> list[tuple[str, dict | None, object]]:
    """(label, configuration, run(a, b, bias) -> output) for each candidate in `case` on `gpu`."""
    has_bias, activation = split_epilogue(case.epilogue)
    fused = has_bias and activation is not None

    def cublas(a, b, bias):
        return epilogue(torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b), None, activation)

    def rung6(config):
        def run(a, b, bias):
            out = a.new_empty(a.shape[0], b.shape[1])
            tm.launch_persistent(tm.persistent_kernel, a, b, out, bias if fused else None, activation or "relu",
                                 config=config)
            return out if fused else epilogue(out, bias, activation)
        return run

    found = [(CUBLAS, None, cublas)] + [(RUNG6, c, rung6(c)) for c in proposals(case.shape, gpu, rule)]
    if gpu.has("tma") and case.layout in ("row", "weight_t") and case.a_layout == "row":
        found.append((RUNG7, dict(tm.TMA_PERSISTENT),
                      lambda a, b, bias: epilogue(tm.tma_persistent(a, b), bias, activation)))
    return found


def free_bytes() -> int:
    return torch.cuda.mem_get_info()[0]


def _needed_bytes(case: Case) -> int:
    M, N, K = case.shape
    return 2 * (2 * M * N + 2 * (M + N) * (K + 8) + 2 * N * (K + 8)) + (256 << 20)   # outputs, copies, L2 flush


# ------------------------------------------------------------- the tuning

def tune(case: Case, gpu, rule: dict) -> Entry | None:
    """`case` measured on `gpu` and added to its dispatch table (None where it could not be: LOG's note says
    why); under the table's lock, so a case another process has just measured is read, not measured again."""
    start = time.perf_counter()
    with _disable_current_modes(), dispatch.locked(gpu):
        table = dispatch.load(gpu).table
        entry = table.lookup(case) if table else None
        if entry is not None:
            LOG.append(Tuned(case, time.perf_counter() - start, entry, "measured by another process"))
            return entry
        free = free_bytes()
        if free < _needed_bytes(case) + HEADROOM_BYTES:
            LOG.append(Tuned(case, time.perf_counter() - start, None,
                             f"not tuned: {free / 2**30:.1f} GiB free, under the "
                             f"{(_needed_bytes(case) + HEADROOM_BYTES) / 2**30:.1f} GiB its candidates need"))
            return None
        timings, failed = _measure(case, candidates(case, gpu, rule))
        entry = Entry(case, timings)
        dispatch.update(gpu, [entry])
    note = ", ".join([f"{label} {t.ms:.3f} ms" for label, t in timings.items()] + failed)
    LOG.append(Tuned(case, time.perf_counter() - start, entry, note))
    return entry


def _measure(case: Case, found: list) -> tuple[dict[str, Timed], list[str]]:
    """Each candidate run, its output checked at CHECK_ROWS rows against an fp32 product, then timed; per label the
    fastest correct configuration, and a line per candidate that failed or was wrong."""
    M, N, K = case.shape
    has_bias, activation = split_epilogue(case.epilogue)
    gen, dtype = torch.Generator(device()).manual_seed(0), getattr(torch, case.dtype)
    a = _in_layout(M, K, case.a_layout, gen, dtype)
    b = _in_layout(K, N, case.layout, gen, dtype)
    bias = torch.randn(N, generator=gen, device=device()).to(dtype) if has_bias else None
    rows = torch.randperm(M, generator=gen, device=device())[:CHECK_ROWS]
    want = epilogue(a[rows].float() @ b.float(), None if bias is None else bias.float(), activation)
    _compile_ahead(a, b, bias, activation, [config for label, config, _ in found if label == RUNG6])
    timings: dict[str, Timed] = {}
    failed = []
    for label, config, run in found:
        try:
            got = run(a, b, bias)[rows]
        except Exception as e:   # a configuration that does not compile or launch here: not a candidate
            failed.append(f"{label} {config} failed ({type(e).__name__})")
            continue
        if not compare(got, want).ok:
            failed.append(f"{label} {config} WRONG")
            continue
        ms = bench(lambda: run(a, b, bias), warmup_ms=WARMUP_MS, rep_ms=REP_MS, warmed=True).median_ms
        if label not in timings or ms < timings[label].ms:
            timings[label] = Timed(config, ms)
    return timings, failed


# ------------------------------------------------------------- attention: rung 6's search, on first use

def search_attention(shape: tuple, gpu) -> None:
    """Triton rung 6's own search (kernels/attention.py: its space, prune and screen) at `shape` = (B, H, S, D,
    causal) on random inputs, its report kept in the search cache (ladder.autotune), where ladder.ops.attention's
    choice of configuration finds it from then on, in this process and the next."""
    start = time.perf_counter()
    with _disable_current_modes():
        reports = attention_problem.tune_triton([shape])
    for r in reports:
        autotune.store(gpu.slug, r)
    LOG.append(Tuned(shape, time.perf_counter() - start, None,
                     f"rung 6's search: {autotune.format_config(reports[0].best)}" if reports else
                     "rung 6's search ran at this (S, D, causal) in this process with another B and H: its winner"))


def search_attention_backward(shape: tuple, gpu) -> None:
    """On `gpu`, the backward of attention at `shape` = (B, H, S, D, causal): where no search has measured its
    (S, D, causal) there and it is big enough for one to pay (autotune.SEARCH_MIN_FLOP), rung 2's two kernels timed
    there first in a short list of tiles (kernels/attention_backward_search.py, first_use_tiles: seconds), on their
    own inputs whatever mode or trace the call is in; the winners kept in the search cache, where the backward's
    choice finds them. Once a process per (S, D, causal); a search that fails is logged (LOG), not raised: the
    backward runs the tiles it would have run. Nothing unless tuning is on (KERNEL_LADDER_TUNE)."""
    if gpu is None:
        return
    if 2.5 * attention_problem.flops(shape) < autotune.SEARCH_MIN_FLOP:   # the backward's 2.5x the forward's
        return   # not worth a search at this B and H (a bigger call at the same S, D and mask may search)
    _, _, S, D, causal = shape
    key = (int(S), int(D), int(causal))   # a traced call's sizes specialize here, as its tiles do
    if (gpu.slug, key) in _BACKWARD_SETTLED or not enabled():
        return
    if D not in backward_search.tab.TILES or backward_search.searched_at(key):
        _BACKWARD_SETTLED.add((gpu.slug, key))
        return
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"ladder.ops.attention's backward: no search has measured (S, D, causal) = {key} on this "
                           "GPU, and a CUDA graph is being captured, where nothing can be timed: run a training step "
                           f"once before capturing it (or set {TUNE_ENV}=0 to run rung 2's own tiles)")
    _BACKWARD_SETTLED.add((gpu.slug, key))   # tried: a search that fails is not tried again
    start = time.perf_counter()
    try:
        with _disable_current_modes():
            reports = backward_search.tune([key], backward_search.exact_grads,
                                           listed=backward_search.first_use_tiles(D))
    except Exception as e:   # noqa: BLE001 -- a search that cannot run here must not take the training step down
        LOG.append(Tuned(key, time.perf_counter() - start, None, f"the backward's search failed: {type(e).__name__}: {e}"))
        return
    LOG.append(Tuned(key, time.perf_counter() - start, None, "the backward's tiles: " + ", ".join(
        f"{r.tuner.rsplit(':', 1)[-1]} {autotune.format_config(r.best)}" for r in reports)))


_BACKWARD_SETTLED: set = set()   # (GPU, (S, D, causal)) searched (here or before), or tried, in this process


# ------------------------------------------------------------- attention: which kernel, on first use

ATTENTION_CHOICE = "ops:attention"   # the tuner name its reports are kept under (ladder.autotune's cache)
TRAINING_CHOICE = "ops:attention training"   # and the choice for an eager call that wants a gradient
RUNG15 = "cuda:15_autotuned"
RUNG6_HEAVIEST_FIRST = "triton:6_autotuned heaviest first"   # its causal query blocks longest first (flash_kernel)
SDPA = "torch:sdpa"                  # torch's own, forward and backward: a training candidate
CHECK_HEADS = 2                      # heads of each output checked against fp32 attention
ATTENTION_ROUNDS = 3                 # rounds of the kernels' timing, interleaved (_interleaved)


def attention_kernel(shape: tuple, gpu, candidates: dict, training: bool = False) -> str | None:
    """The faster of `candidates` ({label: run(q, k, v, causal) -> O}) at `shape` = (B, H, S, D, causal) on `gpu`,
    as measured there once: each run on random views of one (B, S, 3, H, D) projection (what a model hands the op),
    its first heads checked against fp32 attention, then the correct ones timed in interleaved rounds; the winner
    kept as a report in the search cache, read from then on, in this process and the next. With `training`, each
    run is a forward and its backward, and what is checked is the projection's gradient (against fp32 SDPA's).
    None where nothing measured it and none may be now (tuning off, or a CUDA graph being captured: the caller says
    so), or where no candidate ran correctly."""
    key, tuner = tuple(shape), TRAINING_CHOICE if training else ATTENTION_CHOICE
    found = [r for r in autotune.cached_reports(gpu.slug, "attention", tuner) if tuple(r.shape) == key]
    if found:
        return found[0].best["kernel"]
    if not enabled() or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return None
    start = time.perf_counter()
    B, H, S, D, causal = shape
    with _disable_current_modes():
        if RUNG15 in candidates and not any(tuple(r.shape) == key for r in autotune.cached_reports(
                gpu.slug, "attention", RUNG15)):
            for r in attention_problem.tune_cuda([key], attention_problem.HOPPER_TUNERS):
                autotune.store(gpu.slug, r)
        gen = torch.Generator(device()).manual_seed(0)
        packed = torch.randn(B, S, 3, H, D, generator=gen, device=device()).half().requires_grad_(training)
        # O's gradient as a model's backward hands it: from (B, S, H·D) rows, heads inner, as O is laid out
        grad = torch.randn(B, S, H, D, generator=gen, device=device()).half().transpose(1, 2)
        heads = slice(0, min(CHECK_HEADS, H))

        def output(run, leaf=packed):   # what is checked: O, or with `training` the projection's gradient
            q, k, v = leaf.permute(2, 0, 3, 1, 4)
            if not training:
                return run(q, k, v, bool(causal))[:1, heads]
            leaf.grad = None
            run(q, k, v, bool(causal)).backward(grad[:leaf.shape[0], :leaf.shape[3]].to(leaf.dtype))
            return leaf.grad[:1, :, :, heads]

        if training:
            want = output(lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                          packed[:1, :, :, heads].detach().float().requires_grad_())
        else:
            q, k, v = (x[:1, heads].contiguous() for x in packed.permute(2, 0, 3, 1, 4))
            want = attention_problem.reference(q, k, v, bool(causal))
        correct, failed = {}, []
        for label, run in candidates.items():
            try:
                verdict = compare(output(run), want)
            except Exception as e:   # a kernel that does not compile or launch here: not a candidate
                failed.append({"config": {"kernel": label}, "reason": f"{type(e).__name__}: {e}"})
                continue
            if not verdict.ok:
                failed.append({"config": {"kernel": label}, "reason": f"wrong result: {verdict}"})
                continue
            correct[label] = lambda run=run: output(run)
        timed = [{"config": {"kernel": label}, "ms": ms} for label, ms in _interleaved(correct).items()]
    if not timed:
        LOG.append(Tuned(key, time.perf_counter() - start, None, f"no kernel ran correctly: {failed}"))
        return None
    timed.sort(key=lambda t: t["ms"])
    report = autotune.Report("attention", tuner, key, gpu.name, timed[0]["config"], timed[0]["ms"],
                             time.perf_counter() - start, timed, [], failed)
    autotune.store(gpu.slug, report)
    LOG.append(Tuned(key, report.seconds, None, ("training: " if training else "")
                     + ", ".join(f"{t['config']['kernel']} {t['ms']:.3f} ms" for t in timed)))
    return report.best["kernel"]


def _interleaved(runs: dict) -> dict:
    """Each of `runs` ({label: fn}) timed in ATTENTION_ROUNDS rounds, each round timing every one in turn (the first
    rotating): {label: the median of its rounds' medians, ms}. Kernels a few percent apart are told apart by a
    ranking that holds across rounds, not by one window each, where the clocks may drift between windows."""
    labels = list(runs)
    rounds = {label: [] for label in labels}
    for r in range(ATTENTION_ROUNDS if labels else 0):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            rounds[label].append(bench(runs[label], warmup_ms=WARMUP_MS, rep_ms=REP_MS, warmed=True).median_ms)
    return {label: statistics.median(times) for label, times in rounds.items()}


def _compile_ahead(a, b, bias, activation, configs: list[dict]) -> None:
    """Rung 6 compiled in `configs` at once, in threads (autotune.compile_ahead), before the first is run: a case's
    tuning is mostly compiling. (The interpreter compiles nothing.)"""
    if not WORLD.gpu:
        return
    out = a.new_empty(a.shape[0], b.shape[1])
    fused = bias is not None and activation is not None
    args = (a, b, out, bias if fused else None, None, *out.shape, a.shape[1], *a.stride(), *b.stride(), *out.stride())
    autotune.compile_ahead(tm.persistent_kernel, [triton.Config({k: v for k, v in c.items() if k.startswith("BLOCK_")},
                                                                num_warps=c["num_warps"], num_stages=c["num_stages"])
                                                  for c in configs],
                           dict(enumerate(args)), dict(BIAS_RELU=fused and activation == "relu",
                                                       BIAS_GELU=fused and activation == "gelu"))


def report() -> str:
    """Every tuning in this process: the case, its seconds and what was timed."""
    if not LOG:
        return "No case has been tuned in this process."
    return "\n".join(f"{t.case}: {t.seconds:.1f} s, "
                     + (f"{t.entry.pick(dispatch.EAGER_CANDIDATES)} ({t.note})" if t.entry else t.note) for t in LOG)
