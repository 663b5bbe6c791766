"""Host cost of one call: ladder.ops against PyTorch's own ops, timed in the same run.

    python -m ladder.launch [--record] [--json PATH] [--calls N] [--rounds R]

A call's host cost is what the Python process spends to issue it: the checks, the output's allocation, the
launch. At these tiny shapes a kernel runs for a few µs, less than that, so N calls issued back to back keep the
GPU waiting on the host and their wall clock per call is the host cost: N calls, then a synchronize, timed with
perf_counter. Each of R rounds times every call of a group in turn, the first one rotating; the median round is
kept. Each call's kernel time is printed beside it (ladder.timing.event_bench, L2 flushed: an upper bound on what
the GPU spends per call): where it is under the host µs, the GPU waited.

Groups, each with its anchor (PyTorch doing the same) timed in the same rounds:
  matmul 256³ fp16        ladder.ops.matmul, torch.ops.ladder.matmul (through the dispatcher), and Triton rung
                          6's own launcher (kernels.matmul_triton_search.autotuned, the path before ladder.ops);
                          anchor torch.matmul
  linear + bias + GELU    ladder.ops.matmul(x, w.t(), bias, "gelu") (nn.Linear's weight as stored, one kernel);
                          anchor F.gelu(F.linear(x, w, bias), approximate="tanh") (two kernels)
  attention, causal       views of one packed (B, S, 3, H, D) projection, as a model makes them:
                          ladder.ops.attention, torch.ops.ladder.attention, and rung 6's launcher
                          (kernels.attention.triton_autotuned, on contiguous copies made before the timing: it takes
                          no views); anchor SDPA on the same views
  attention backward      the backward of ladder.ops.attention (FlashAttention-2's kernels, rung 4) on those views,
                          its graph built once and run again each call; anchor SDPA's backward (cuDNN's or
                          FlashAttention's, as PyTorch picks)
The matmul rows of ladder.ops.matmul and of rung 6's launcher also carry "phases": the host µs of each step of
their path, each step timed on its own the same way (`phases`): a call's timeline, before and after.
`--record` merges the rows into results/<gpu>.json under "launch"; nothing else in the file changes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from kernels import attention as attention_problem
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import dispatch, ops, results
from ladder.runtime import hardware
from ladder.runtime.errors import NotAvailable
from ladder.timing import event_bench
from ladder.runtime.world import require_gpu

MATMUL = (256, 256, 256)
LINEAR = (256, 1024, 256)          # tokens, out features, in features
ATTENTION = (1, 12, 128, 64)       # B, H, S, D


def host_us(calls: dict, n: int, rounds: int) -> dict[str, float]:
    """Median over `rounds` of the wall clock per call of `n` back-to-back calls, each callable in turn."""
    names = list(calls)
    for fn in calls.values():  # compile, search, allocate: not timed
        fn()
    torch.cuda.synchronize()
    per_round = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = calls[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            per_round[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: statistics.median(times) for name, times in per_round.items()}


def groups() -> list[dict]:
    """Each group: op, shape, the anchor's name, and callables by name, the anchor's among them."""
    gen = torch.Generator("cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").half()
    M, N, K = MATMUL
    a, b = randn(M, K), randn(K, N)
    T, out_features, in_features = LINEAR
    x, w, bias = randn(T, in_features), randn(out_features, in_features), randn(out_features)
    B, H, S, D = ATTENTION
    q, k, v = randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
    qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
    return [
        dict(op="matmul", shape=list(MATMUL), anchor="torch.matmul", calls={
            "torch.matmul": lambda: torch.matmul(a, b),
            "ladder.ops.matmul": lambda: ops.matmul(a, b),
            "torch.ops.ladder.matmul": lambda: torch.ops.ladder.matmul(a, b),
            "triton:6_autotuned launcher": lambda: triton_search.autotuned(a, b)}),
        dict(op="linear_gelu", shape=list(LINEAR), anchor="torch F.linear + F.gelu", calls={
            "torch F.linear + F.gelu": lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"),
            "ladder.ops.matmul": lambda: ops.matmul(x, w.t(), bias, "gelu")}),
        dict(op="attention", shape=list(ATTENTION) + [1], anchor="F.scaled_dot_product_attention", calls={
            "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "ladder.ops.attention": lambda: ops.attention(q, k, v, causal=True),
            "torch.ops.ladder.attention": lambda: torch.ops.ladder.attention(q, k, v, True),
            "triton:6_autotuned launcher": lambda: attention_problem.triton_autotuned(qc, kc, vc, True)}),
        dict(op="attention_backward", shape=list(ATTENTION) + [1], anchor="SDPA's backward", calls={
            "SDPA's backward": _backward(lambda *t: F.scaled_dot_product_attention(*t, is_causal=True), q, k, v),
            "ladder.ops.attention's backward": _backward(lambda *t: ops.attention(*t, causal=True), q, k, v)}),
    ]


def _backward(attention, q, k, v):
    """One backward call of attention(q, k, v) on views of one projection: the graph built once, its backward run
    again on each call (retain_graph), as a training step's backward runs it."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, leaves, grad, retain_graph=True)


def phases(n: int, rounds: int) -> dict[str, list]:
    """The steps of one matmul call at MATMUL, each timed on its own as host_us times a call: for ladder.ops.matmul
    and for rung 6's launcher (the path before), [step, µs] in the order a call takes them."""
    M, N, K = MATMUL
    a, b = (torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half())
    out = a.new_empty((M, N))
    ops.matmul(a, b)  # compiles, chooses, plans: all cached from here on
    plan = ops.matmul_plan(M, N, K)
    scalars = (M, N, K, *a.stride(), *b.stride(), N, 1)
    tensors = (a, b, out, None, None)   # no bias, no kept input

    def launch():
        ops._launch_rung6(plan, tensors, scalars)
    steps = {"ladder.ops.matmul": {
        "checks": lambda: (ops._check_matmul(a, b, None, None), ops._direct(a, b, None)),
        "kernel, configuration and plan (cached per shape)": lambda: (
            ops.backend("matmul"), ops.matmul_choice(M, N, K), ops.matmul_plan(M, N, K)),
        "output allocated": lambda: a.new_empty((M, N)),
        "launch: the compiled kernel, its arguments laid out once (ops.Launches)": launch},
        "triton:6_autotuned launcher": {
        "checks and output allocated": lambda: tm._operands(a, b, None),
        "launch through Triton's JIT and autotuner": lambda: triton_search.launch_autotuned(a, b, out)}}
    return {path: list(host_us(calls, n, rounds).items()) for path, calls in steps.items()}


def measure(n: int = 300, rounds: int = 7) -> list[dict]:
    """One row per call that is not an anchor: its host µs and kernel µs beside its anchor's, same rounds."""
    with dispatch.suspended():  # rung 6 at 256³ even where a dispatch table would pick cuBLAS: its launch is timed
        return _measure(n, rounds, event_bench)


def _measure(n: int, rounds: int, event_bench) -> list[dict]:
    rows = []
    for g in groups():
        host = host_us(g["calls"], n, rounds)
        kernel = {name: event_bench(fn, 25, 100, [0.5])[0] * 1e3 for name, fn in g["calls"].items()}
        rows += [{"op": g["op"], "shape": g["shape"], "call": name, "us": host[name], "kernel_us": kernel[name],
                  "anchor": g["anchor"], "anchor_us": host[g["anchor"]], "anchor_kernel_us": kernel[g["anchor"]],
                  "ratio": host[name] / host[g["anchor"]], "calls": n, "rounds": rounds}
                 for name in g["calls"] if name != g["anchor"]]
    steps = phases(n, rounds)
    for r in rows:
        if r["op"] == "matmul" and r["call"] in steps:
            r["phases"] = [[step, us] for step, us in steps[r["call"]]]
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'op':12s} {'call':28s} {'host us':>8s} {'anchor':30s} {'host us':>8s} {'ratio':>6s} "
             f"{'kernel us (ours/anchor)':>24s}"]
    for r in rows:
        lines.append(f"{r['op']:12s} {r['call']:28s} {r['us']:8.1f} {r['anchor']:30s} {r['anchor_us']:8.1f} "
                     f"{r['ratio']:6.2f} {r['kernel_us']:12.1f} / {r['anchor_kernel_us']:.1f}")
        lines += [f"{'':14s}{step:56s} {us:6.1f}" for step, us in r.get("phases", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ladder.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="back-to-back calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="also write the rows (and the GPU's name) to this file")
    parser.add_argument("--record", action="store_true", help="merge the rows into results/<gpu>.json")
    args = parser.parse_args(argv)
    try:
        require_gpu("ladder.launch (it times kernel launches)")
        if args.record:
            hardware.require_real("Recording")
        gpu = hardware.detect()
        rows = measure(args.calls, args.rounds)
    except NotAvailable as e:
        print(f"not available here: {e}", file=sys.stderr)
        return 2
    print(f"host cost per call on {gpu.name}: median of {args.rounds} rounds of {args.calls} back-to-back calls\n"
          f"{ops.describe()}\n{table(rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu.name, "provenance": results.provenance(gpu), "launch": rows}, f, indent=1)
    if args.record:
        print(f"wrote {results.add_rows(gpu, 'launch', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
