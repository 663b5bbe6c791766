"""Whole-model proof: a model's forward pass and training step, six ways, timed in one run on this GPU — what
`python -m ladder record models` records under "model" (a row per model, variant and step).

Models: lesson 05's GPT-2 small (MODELS["gpt2-small"]: tokens in, logits out) and one of its blocks alone
(MODELS["gpt2-block"]: activations (B, S, d) in and out). "+ ops" runs the whole model on ladder.ops: every linear
through ladder.ops.matmul (the MLP's first with its bias + GELU fused) and attention through ladder.ops.attention
(model.use_our_kernels(every_linear=True)).

Variants: torch eager, eager + ops, torch.compile, compile + ops, and a CUDA graph of each eager one (one replay per
step: no host work but the replay's launch). Steps: "forward" (no grad) and "training" (forward, a loss, backward:
what one optimizer step needs, without the optimizer).

Timing is what a loop pays, host included: each round runs every variant's step CALLS times back to back and then
synchronizes (perf_counter), the variants in a rotating order; the median round and its p20-p80 spread are kept.
Each variant's first call (compiling, first-use tuning, capturing a graph) is timed apart: first_call_s.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
from torch import nn

from ladder import check
from ladder.capstone import model as model_mod

MODELS = ("gpt2-small", "gpt2-block")
VARIANTS = ("eager", "eager + ops", "torch.compile", "compile + ops", "CUDA graph", "CUDA graph + ops")
REPLACES = {"eager + ops": "eager", "compile + ops": "torch.compile", "CUDA graph + ops": "CUDA graph"}
STEPS = ("forward", "training")


class BlockAlone(nn.Module):
    """One block of the model, on activations: GPT-2's block at the model's batch and sequence."""

    def __init__(self, cfg: model_mod.Config):
        super().__init__()
        self.block = model_mod.Block(cfg)
        self.blocks = [self.block]        # what model_mod.use_our_kernels walks
        self.every_linear = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def build(name: str, cfg: model_mod.Config, device: str, ops: bool) -> nn.Module:
    """The model `name` at `cfg`'s widths, the same weights every time (model_mod.build's seed), on the ops or not."""
    net = model_mod.build(cfg, device)
    if name == "gpt2-block":
        torch.manual_seed(0)
        alone = BlockAlone(cfg)
        alone.block.load_state_dict(net.blocks[0].state_dict())
        net = alone.to(device=device, dtype=torch.float16).eval()
    return model_mod.use_our_kernels(net, on=ops, every_linear=True) if ops else net


def example_input(name: str, cfg: model_mod.Config, device: str) -> torch.Tensor:
    if name == "gpt2-block":
        gen = torch.Generator(device).manual_seed(1)
        return torch.randn(cfg.batch, cfg.seq, cfg.d_model, generator=gen, device=device).half()
    return model_mod.tokens(cfg, device)


LOSS_SCALE = 2.0 ** 16   # torch.amp.GradScaler's first scale: without it the fp16 gradients of a mean over millions
                         # of outputs underflow (to zero in GPT-2's logits), and the check compares zeros


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().square().mean() * LOSS_SCALE


def training_step(net: nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """Forward, loss, backward, the parameters' gradients cleared first, as a training loop's step does."""
    def step():
        for p in net.parameters():
            p.grad = None
        loss = _loss(net(x))
        loss.backward()
        return loss
    return step


def forward_step(net: nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    def step():
        with torch.no_grad():
            return net(x)
    return step


def graphed(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """`step` in a CUDA graph, replayed: captured at the first call (after warm-up calls on a side stream, which
    also tune on first use, so the first call's time holds them); its output (and the gradients, in training) are
    the graph's own buffers, rewritten each replay."""
    captured = {}

    def replay():
        if not captured:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            captured["graph"] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured["graph"]):   # the step sets gradients to None: capture allocates them
                captured["out"] = step()                 # in the graph's pool
        captured["graph"].replay()   # reads the step's input in place: the closure keeps it alive
        return captured["out"]
    return replay


def steps(name: str, cfg: model_mod.Config, device: str, step: str, variants: tuple = VARIANTS) -> dict:
    """{variant: a function running one `step` of model `name`}, each variant on its own copy of the same weights."""
    training = step == "training"
    runs = {}
    for variant in variants:
        net = build(name, cfg, device, ops="ops" in variant)
        if "compile" in variant:
            net = torch.compile(net, dynamic=False)
        x = example_input(name, cfg, device)
        run = (training_step if training else forward_step)(net, x)
        runs[variant] = (graphed(run) if "CUDA graph" in variant else run), net
    return runs


def _rotating_rounds(runs: dict[str, Callable], calls: int, rounds: int, sync: Callable[[], None]) -> dict:
    """{name: sorted per-call ms of each round}: every round times each run's `calls` back-to-back calls and a
    sync, the runs in an order that rotates by one each round."""
    names, per_call = list(runs), {name: [] for name in runs}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                runs[name]()
            sync()
            per_call[name].append((time.perf_counter() - start) * 1e3 / calls)
    return {name: sorted(t) for name, t in per_call.items()}


def _spread(times: list[float]) -> dict:
    q = statistics.quantiles(times, n=5, method="inclusive") if len(times) > 1 else [times[0]] * 4
    return {"ms": statistics.median(times), "ms_p20": q[0], "ms_p80": q[3]}


def _result(out: torch.Tensor, net: nn.Module, training: bool):
    """What is compared between variants: the output, or in training the first block's qkv weight's gradient."""
    if not training:
        return out
    block = net.blocks[0] if hasattr(net, "blocks") else net._orig_mod.blocks[0]
    return block.attn.qkv.weight.grad


def measure(name: str, step: str, cfg: model_mod.Config | None = None, calls: int = 10, rounds: int = 15,
            variants: tuple = VARIANTS, progress=print) -> list[dict]:
    """The "model" rows of `name`'s `step` on this GPU: each variant checked against eager (its output, or in
    training a gradient) and timed in the same rounds."""
    cfg = cfg or model_mod.PRESETS["gpt2-small"]
    training = step == "training"
    runs, first_call_s, errors = {}, {}, {}
    want = None
    for variant, (run, net) in steps(name, cfg, "cuda", step, variants).items():
        progress(f"model {name} {step}: {variant}")
        start = time.time()
        got = run()   # compiles, tunes on first use, captures: timed apart
        torch.cuda.synchronize()
        first_call_s[variant] = time.time() - start
        result = _result(got, net, training).detach().clone()
        want = result if want is None else want
        errors[variant] = check.compare(result, want.float()).rel_error
        runs[variant] = run
    timed = _rotating_rounds(runs, calls, rounds, torch.cuda.synchronize)
    return [{"model": name, "config": cfg.as_dict(), "variant": v, "step": step, **_spread(timed[v]),
             "calls_per_round": calls, "rounds": rounds, "first_call_s": first_call_s[v], "rel_error": errors[v]}
            for v in runs]


def table(rows: list[dict]) -> str:
    """The rows of one model and step: ms, spread, × the torch variant they replace (eager + ops × eager,
    compile + ops × torch.compile, CUDA graph + ops × CUDA graph), first call and error."""
    by = {r["variant"]: r for r in rows}
    lines = [f"{'variant':18s} {'ms':>8s} {'p20-p80':>17s} {'x torch':>8s} {'first call s':>12s} {'rel. err':>9s}"]
    for r in rows:
        base = by.get(REPLACES.get(r["variant"]))
        ratio = f"{base['ms'] / r['ms']:7.3f}x" if base else f"{'':8s}"
        lines.append(f"{r['variant']:18s} {r['ms']:8.3f} {r['ms_p20']:8.3f}-{r['ms_p80']:<8.3f} {ratio} "
                     f"{r['first_call_s']:12.1f} {r['rel_error']:9.1e}")
    return "\n".join(lines)
