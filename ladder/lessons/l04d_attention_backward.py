"""Lesson 04d, attention's backward in Triton: what each rung keeps from the forward, its SASS, rung 3's atomic dQ
traffic, rung 4's searched tiles, the goals against SDPA's backwards, and a training step of the capstone's model
with our forward and backward kernels swapped in.
"""
from __future__ import annotations

import dataclasses

import torch

import kernels.attention_backward as ab
from kernels import attention_backward_search as backward_search
from kernels.triton import attention_backward as tab
from ladder import check, sass, verdicts
from ladder.runtime import world
from ladder.capstone import model as cm
from ladder.timing import bench


def backward_problem():
    """Lesson 04d's problem: on a GPU its rungs timed live at the S 4096 shapes only (S 16384 stays the
    recording's, so the lesson keeps to its minutes); without one, every headline shape from the recording."""
    return dataclasses.replace(ab.PROBLEM, bench_shapes=[s for s in ab.HEADLINE if not world.WORLD.gpu or s[2] == 4096])


def backward_saved_table(shapes=((4, 32, 4096, 64, 0), (4, 32, 16384, 64, 0), (4, 32, 16384, 128, 0))) -> str:
    """What each rung keeps from the forward for the backward (kernels/triton/attention_backward.saved_bytes)."""
    lines = [f"{'shape B H S D':>18s} {'rung 1: P + fp32 Q,K,V':>24s} {'rungs 2-4: O + LSE':>20s} {'ratio':>7s}"]
    for B, H, S, D, _ in shapes:
        one, two = tab.saved_bytes(B, H, S, D, "1_materialized"), tab.saved_bytes(B, H, S, D, "2_flash")
        lines.append(f"{'x'.join(map(str, (B, H, S, D))):>18s} {one / 2**30:20.2f} GiB {two / 2**30:16.3f} GiB "
                     f"{one / two:6.0f}x")
    return "\n".join(lines)


BACKWARD_SASS_FAMILIES = ("HGMMA", "MUFU.EX2", "UTMALDG", "REDG", "UTMAREDG", "STL", "LDL")


def backward_sass(arch: str = "sm_90", head_dims=(64, 128), families=BACKWARD_SASS_FAMILIES) -> str:
    """Static opcode counts of rung 2's two kernels and rung 3's one, as their launchers compile them
    (non-causal), per head size: tensor-core instructions, exponentials, TMA loads, atomic reductions (element
    REDG, the TMA's bulk UTMAREDG), spills. The K/V kernels as an eager launch of a big call (tab.qdo_tma_pays) on a
    GPU with the TMA takes them (Q and dO through it on sm_90, and rung 3's dQ where its tiles say DQ_BY_TMA)."""
    lines = [f"{arch} SASS, instructions in the code (not executed counts); tiles BLOCK_M x BLOCK_N, warps"]
    tma = int(arch.removeprefix("sm_").rstrip("a")) >= 90
    for d in head_dims:
        for kernel in ("dkdv", "dq", "dkdv_atomic"):
            case = ab.sass_case(kernel, d, causal=False, qdo_tma=tma and kernel != "dq", delta_in_dq=False)
            s = sass.triton_sass(**case, arch=arch)
            c = case["constexprs"]
            tiles = f"{c['BLOCK_M']:3d}x{c['BLOCK_N']:<3d} w{case['num_warps']}"
            lines.append(f"  D{d:<4d}{'rung 3' if kernel == 'dkdv_atomic' else 'rung 2'} {kernel:12s} {tiles}"
                         + "".join(f"{f:>9s} {s.count(f):3d}" for f in families))
    return "\n".join(lines)


def backward_atomic_traffic(shapes=((4, 32, 4096, 64, 0), (4, 32, 4096, 128, 0))) -> str:
    """Rung 3's dQ additions, counted: every K/V program adds a BLOCK_M x D fp32 tile per query step, so
    S / BLOCK_N programs add into each dQ row (non-causal); and the instructions that carry them, on a GPU
    with the TMA: one bulk reduction a tile (DQ_BY_TMA), else one REDG per four elements a thread."""
    lines = []
    for B, H, S, D, _ in shapes:
        tile = tab.GPU_TILES[D]["dkdv_atomic"]
        n, m = tile["BLOCK_N"], tile["BLOCK_M"]
        adds = B * H * S * D * (S // n)
        how = (f"{adds // (m * D):.2e} bulk reductions of {m}x{D}" if tile.get("DQ_BY_TMA") else
               f"{adds // 4:.2e} REDG.F32x4")
        lines.append(f"D{D}: BLOCK_N {n}: {S // n} programs add into each dQ row: {adds:.2e} fp32 adds, "
                     f"{4 * adds / 1e9:.1f} GB into L2 (dQ itself: {4 * B * H * S * D / 1e9:.2f} GB), as {how}")
    return "\n".join(lines)


def backward_tiles(reports) -> str:
    """Rung 4's recorded winners per kernel and (S, D, causal) beside the fixed tiles (GPU_TILES: rung 2's, rung
    3's for dkdv_atomic, "tma": its dQ by the TMA's bulk reductions), with the winner's speed-up over the fixed
    tiles in the same search ("-" where the search did not time those); then, per (S, D, causal), which way rung 4
    runs: rung 3's one kernel where its winner beat rung 2's two winners together."""
    fmt = lambda c: (f"{c['BLOCK_M']:3d}x{c['BLOCK_N']:<3d} w{c['num_warps']} s{c['num_stages']}"  # noqa: E731
                     + (" tma" if c.get("DQ_BY_TMA") else ""))
    lines = [f"{'kernel':11s} {'S':>6s} {'D':>4s} {'causal':>6s}  {'fixed':16s} {'searched':18s}"
             f"{'gain':>6s} {'timed':>6s} {'pruned':>7s}"]
    by_shape: dict = {}
    for r in sorted(reports, key=lambda r: (r.tuner, r.shape)):
        kernel = r.tuner.rsplit(":", 1)[1]
        S, D, causal = r.shape
        by_shape.setdefault(tuple(r.shape), {})[kernel] = r
        fixed = tab.GPU_TILES[D][kernel]
        fixed_ms = next((t["ms"] for t in r.timed if t["config"] == fixed), None)
        gain = f"{fixed_ms / r.best_ms:5.2f}x" if fixed_ms else f"{'-':>6s}"
        lines.append(f"{kernel:11s} {S:6d} {D:4d} {causal:6d}  {fmt(fixed):16s} {fmt(r.best):18s}{gain} "
                     f"{len(r.timed):6d} {len(r.pruned):7d}")
    lines.append("rung 4 runs, per (S, D, causal): rung 3's one kernel against rung 2's two (their searched best ms)")
    for (S, D, causal), got in sorted(by_shape.items()):
        if not {"dkdv", "dq", "dkdv_atomic"} <= set(got):
            continue
        wins = backward_search.one_kernel_wins([got["dkdv"], got["dq"]], got["dkdv_atomic"])
        split = got["dkdv"].best_ms + got["dq"].best_ms
        lines.append(f"  S{S:<6d} D{D:<4d} causal {causal}: {'rung 3' if wins else 'rung 2'}"
                     f"  ({got['dkdv_atomic'].best_ms:.3f} ms against {got['dkdv'].best_ms:.3f} + "
                     f"{got['dq'].best_ms:.3f} = {split:.3f})")
    return "\n".join(lines)


def backward_ratios(rows: list[dict], label: str = "triton:4_autotuned", flash_goal: float = 1.0,
                    cudnn_goal: float = 0.85) -> str:
    """Per headline shape, `label`'s TFLOP/s and its ratio to SDPA's cuDNN and FlashAttention-2 backwards timed in
    the same run; then the issue's goals, computed: >= flash_goal x FA2 everywhere, >= cudnn_goal x cuDNN at D64."""
    by = {(f"{r['backend']}:{r['rung']}", tuple(r["shape"])): r for r in rows}
    shapes = sorted({s for (lab, s) in by if lab == label}, key=lambda s: (s[2], s[3], s[4]))
    lines = [f"{'shape':>16s} {'ours TFLOP/s':>12s} {'cuDNN':>7s} {'FA2':>7s} {'x cuDNN':>8s} {'x FA2':>7s}"]
    flash, cudnn = [], []
    for s in shapes:
        ours, cu, fa = by[label, s], by.get(("torch:sdpa", s)), by.get(("torch:sdpa_flash", s))
        x_cu, x_fa = cu["ms"] / ours["ms"], fa["ms"] / ours["ms"]
        flash.append(x_fa)
        if s[3] == 64:
            cudnn.append(x_cu)
        lines.append(f"{verdicts.shape_label('attention_backward', s):>16s} {ours['tflops']:12.1f} {cu['tflops']:7.1f} "
                     f"{fa['tflops']:7.1f} {x_cu:8.3f} {x_fa:7.3f}")
    lines.append(f"goal >= {flash_goal}x FA2 at every shape: {min(flash):.3f}x at worst -> "
                 f"{'HIT' if min(flash) >= flash_goal else 'MISS'}")
    hit = sum(x >= cudnn_goal for x in cudnn)
    lines.append(f"goal >= {cudnn_goal}x cuDNN at D64: {min(cudnn):.3f}-{max(cudnn):.3f}x, "
                 f"met at {hit} of {len(cudnn)} shapes -> {'HIT' if hit == len(cudnn) else 'MISS'}")
    return "\n".join(lines)


def _training_step(model, tokens):
    """Forward + backward of a next-token loss (the logits against the tokens themselves: a stand-in target)."""
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
    loss.backward()
    return loss


def training_grads(preset: str = "tiny", names=("blocks.0.attn.qkv.weight", "blocks.0.mlp.fc.weight",
                                                 "blocks.1.attn.qkv.bias", "wte.weight")) -> str:
    """One training step of the capstone's model, eager and eager + ours (ladder.ops.attention and matmul with
    their backwards), same weights and tokens: the loss and a few parameters' gradients compared (ladder.check)."""
    device = "cuda" if _on_gpu() else "cpu"
    model = cm.build(preset, device)
    tokens = cm.tokens(cm.PRESETS[preset], device)
    got = {}
    for ours in (False, True):
        cm.use_our_kernels(model, ours)
        loss = _training_step(model, tokens)
        got[ours] = loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if n in names}
    lines = [f"{preset}: loss eager {got[False][0]:.5f}, eager + ours {got[True][0]:.5f}"]
    lines += [f"  grad {n:26s} {check.compare(got[True][1][n], got[False][1][n])}" for n in names]
    return "\n".join(lines)


def _on_gpu() -> bool:
    return bool(world.WORLD.gpu)


def training_timing(layers: int = 2, batch: int = 4, seq: int = 1024, steps: int = 10, compiled: bool = True) -> str:
    """On a GPU: ms per training step (forward + backward) of the capstone's model at GPT-2 small's widths with
    `layers` layers, eager, eager + ours, torch.compile and compile + ours (each compiled once, then timed)."""
    if not _on_gpu():
        return "the training step's timing needs a GPU: here only its correctness (above) runs"
    cfg = dataclasses.replace(cm.PRESETS["gpt2-small"], layers=layers, batch=batch, seq=seq)
    tokens = cm.tokens(cfg, "cuda")
    lines, base = [f"GPT-2 small widths, {layers} layers, batch {batch} x {seq}: forward + backward"], None
    for name, ours, comp in (("eager", False, False), ("eager + ours", True, False),
                             ("torch.compile", False, True), ("compile + ours", True, True)):
        if comp and not compiled:
            continue
        model = cm.use_our_kernels(cm.build(cfg, "cuda"), ours)
        step = torch.compile(model) if comp else model
        try:
            ms = bench(lambda: _training_step(step, tokens), warmup_ms=100, rep_ms=300).median_ms
        except Exception as e:  # noqa: BLE001 -- a step that does not compile is the finding: say it, go on
            lines.append(f"  {name:15s} did not run: {type(e).__name__}: {str(e).strip().splitlines()[0][:120]}")
            continue
        base = base or ms
        lines.append(f"  {name:15s} {ms:8.2f} ms  {base / ms:5.2f}x eager")
        del model, step
    return "\n".join(lines)
