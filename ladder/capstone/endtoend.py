"""The model end to end, four ways, and the swapped ops alone: what `python -m ladder record capstone`
measures in one run on a GPU, and the check that our kernels compute what the model computes (any world).

Variants: eager (PyTorch as written), eager + ours (our two Triton kernels swapped in through ladder.ops),
torch.compile (Inductor fuses what it can), compile + ours (Inductor around our kernels: ladder.ops registers them
with torch.library.triton_op, so Inductor sees their Triton kernels and calls them from its own code).
"""
from __future__ import annotations

import dataclasses
import time

import torch
import torch.nn.functional as F

from ladder import check, ops
from ladder.capstone import costs, families, hot_op
from ladder.capstone import model as model_mod
from ladder.timing import bench

VARIANTS = ("eager", "eager + ours", "torch.compile", "compile + ours")


def variants(cfg: model_mod.Config, device: str) -> dict:
    """{variant: a function running one forward pass}, each on its own copy of the same weights."""
    runs = {}
    for name in VARIANTS:
        net = model_mod.build(cfg, device)
        if "ours" in name:
            model_mod.use_our_kernels(net)
        if "compile" in name:
            net = torch.compile(net, dynamic=False)
        runs[name] = net
    return runs


def check_swap(cfg: model_mod.Config, device: str, batch: int | None = None, seq: int | None = None) -> check.CheckResult:
    """Eager + ours against eager, in fp16, on the same weights and tokens (optionally fewer of them):
    the logits' relative error against the fp16 tolerance."""
    tokens = model_mod.tokens(cfg, device)[:batch, :seq]
    net = model_mod.build(cfg, device)
    with torch.no_grad():
        want = net(tokens).float()
        got = model_mod.use_our_kernels(net)(tokens)
    return check.compare(got, want)


def _swapped_ops(cfg: model_mod.Config, device: str, gen: torch.Generator) -> dict:
    """For each swap: (the torch version, ours) as functions of one layer's inputs, at the model's shapes.
    Attention gets the same (B, H, S, D) views of a qkv buffer that the model hands it."""
    B, S, d, H, D = cfg.batch, cfg.seq, cfg.d_model, cfg.heads, cfg.head_dim
    half = dict(device=device, dtype=torch.float16)
    qkv = torch.randn(B, S, 3, H, D, generator=gen, **half).permute(2, 0, 3, 1, 4)
    x = torch.randn(B * S, d, generator=gen, **half)
    weight = 0.02 * torch.randn(4 * d, d, generator=gen, **half)
    bias = torch.randn(4 * d, generator=gen, **half)

    def up_gelu(x, weight, bias):
        return F.gelu(F.linear(x, weight, bias), approximate="tanh")

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "attention": (lambda: attention(*qkv), lambda: ops.attention(*qkv, causal=True),
                      torch.compile(attention, dynamic=False), qkv),
        "MLP up + GELU": (lambda: up_gelu(x, weight, bias), lambda: ops.matmul(x, weight.t(), bias, "gelu"),
                          torch.compile(up_gelu, dynamic=False), (x, weight, bias)),
    }


def _op_inputs(op: costs.Op, cfg: model_mod.Config, device: str, gen: torch.Generator):
    """A function running one op of the model alone (torch, eager) at its shapes, for its headroom."""
    M, d = cfg.tokens, cfg.d_model
    half = dict(device=device, dtype=torch.float16)
    rand = lambda *shape: torch.randn(*shape, generator=gen, **half)  # noqa: E731
    linears = {"qkv projection": (d, 3 * d), "attention output proj.": (d, d), "MLP up (d -> 4d)": (d, 4 * d),
               "MLP down (4d -> d)": (4 * d, d), "vocabulary projection": (d, cfg.vocab)}
    if op.name in linears:
        K, N = linears[op.name]
        x, w = rand(M, K), 0.02 * rand(N, K)
        b = rand(N) if op.name != "vocabulary projection" else None
        return lambda: F.linear(x, w, b)
    if op.name == "attention (causal)":
        qkv = rand(cfg.batch, cfg.seq, 3, cfg.heads, cfg.head_dim).permute(2, 0, 3, 1, 4)
        return lambda: F.scaled_dot_product_attention(*qkv, is_causal=True)
    if op.name == "GELU":
        h = rand(M, 4 * d)
        return lambda: F.gelu(h, approximate="tanh")
    if op.name == "layer norm":
        x, w, b = rand(M, d), rand(d), rand(d)
        return lambda: F.layer_norm(x, (d,), w, b)
    if op.name == "residual add":
        x, y = rand(M, d), rand(M, d)
        return lambda: x + y
    raise ValueError(f"no runner for op {op.name!r}")


def _timing(t) -> dict:
    return {"ms": t.median_ms, "ms_p20": t.p20_ms, "ms_p80": t.p80_ms}


def measure(cfg_name: str = "gpt2-small", ceilings: dict | None = None, progress=print) -> dict:
    """One run on this GPU: the four variants' profiles and times, each op's time alone, the swapped ops
    three ways (eager, ours, compiled), and our kernels checked against eager; the `capstone` row."""
    cfg = model_mod.PRESETS[cfg_name]
    tokens = model_mod.tokens(cfg, "cuda")
    nets = variants(cfg, "cuda")
    row = {"model": cfg.name, "config": cfg.as_dict(), "dtype": "float16", "ceilings": ceilings,
           "variants": {}, "profiles": {}, "errors": {}, "first_call_s": {}}
    with torch.no_grad():
        want = nets["eager"](tokens).float()
        for name, net in nets.items():
            progress(f"capstone: {name}")
            start = time.time()
            got = net(tokens)          # compiles, and runs the Triton searches, outside the timings
            torch.cuda.synchronize()
            row["first_call_s"][name] = time.time() - start
            row["errors"][name] = check.compare(got, want).rel_error
            row["profiles"][name] = families.profile(lambda: net(tokens), on_gpu=True)
            row["variants"][name] = _timing(bench(lambda: net(tokens)))
        gen = torch.Generator("cuda").manual_seed(3)
        row["ops"] = [{"op": op.name, "torch_ms": bench(_op_inputs(op, cfg, "cuda", gen)).median_ms}
                      for op in costs.ops(cfg)]
        row["swaps"] = []
        for swap, (eager, ours, compiled, inputs) in _swapped_ops(cfg, "cuda", gen).items():
            row["swaps"].append({"swap": swap, "torch_ms": bench(eager).median_ms, "ours_ms": bench(ours).median_ms,
                                 "compile_ms": bench(lambda: compiled(*inputs)).median_ms,
                                 "rel_error": check.compare(ours(), eager().float()).rel_error})
        row["vocab_padding"] = vocab_padding(cfg, tokens, gen)
    return row


PAD_TO = 64  # a vocabulary padded to a multiple of 64: every row of the logits 128-byte aligned


def vocab_padding(cfg: model_mod.Config, tokens: torch.Tensor, gen: torch.Generator) -> dict:
    """The vocabulary projection alone at the model's vocabulary and at it padded to a multiple of PAD_TO (the
    extra logits are never used: a slice drops them), the matmul kernel cuBLAS runs for each (torch.profiler's
    heaviest matmul row), and the eager model both ways: the fix that is a shape."""
    padded = -(-cfg.vocab // PAD_TO) * PAD_TO
    alone, kernels = {}, {}
    for vocab in (cfg.vocab, padded):
        x, w = hot_op.projection_operands(cfg, vocab, gen)
        alone[vocab] = bench(lambda: F.linear(x, w)).median_ms
        top = families.profile(lambda: F.linear(x, w), on_gpu=True, steps=1)["top"]
        kernels[vocab] = next((name for name, family, _ in top if family == "matmul"), None)
    net = model_mod.build(dataclasses.replace(cfg, vocab=padded), "cuda")
    net(tokens)
    return {"vocab": cfg.vocab, "padded": padded, "alone_ms": alone[cfg.vocab], "padded_alone_ms": alone[padded],
            "kernel": kernels[cfg.vocab], "padded_kernel": kernels[padded],
            "eager_padded": _timing(bench(lambda: net(tokens)))}


def predictions(row: dict) -> dict:
    """Amdahl beside each variant with our kernels: the baseline's time minus what each swap saves, the
    swapped op timed alone in the same run (eager + ours from eager; compile + ours from torch.compile,
    where the replaced op is compile's version of it)."""
    layers = row["config"]["layers"]
    eager = [(s["torch_ms"] * layers, s["torch_ms"] / s["ours_ms"]) for s in row["swaps"]]
    compiled = [(s["compile_ms"] * layers, s["compile_ms"] / s["ours_ms"]) for s in row["swaps"]]
    return {"eager + ours": costs.predicted_ms(row["variants"]["eager"]["ms"], eager),
            "compile + ours": costs.predicted_ms(row["variants"]["torch.compile"]["ms"], compiled)}


def variant_table(row: dict) -> str:
    """The four variants: measured time and spread, speed-up over eager, Amdahl's prediction where one applies,
    and how busy the GPU was: the profile's kernel time per step over the measured time (well under 100%: the
    GPU waited for the host between kernels)."""
    predicted = predictions(row)
    eager = row["variants"]["eager"]["ms"]
    lines = [f"{'variant':16s} {'ms':>8s} {'p20-p80':>17s} {'vs eager':>9s} {'Amdahl ms':>10s} {'kernels ms':>10s} "
             f"{'GPU busy':>8s} {'rel. err':>12s}"]
    for name in VARIANTS:
        v = row["variants"][name]
        guess = f"{predicted[name]:10.3f}" if name in predicted else f"{'-':>10s}"
        kernels = sum(row["profiles"][name]["us_per_step"].values()) / 1e3
        lines.append(f"{name:16s} {v['ms']:8.3f} {v['ms_p20']:8.3f}-{v['ms_p80']:<8.3f} {eager / v['ms']:8.3f}x "
                     f"{guess} {kernels:10.3f} {min(kernels / v['ms'], 1):8.0%} {row['errors'][name]:12.1e}")
    return "\n".join(lines)
