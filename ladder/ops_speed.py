"""The public ops against PyTorch's own at the shapes a model runs, as a newcomer's GPU gets them.

    python -m ladder.ops_speed [--tuned] [--rounds R] [--only matmul|attention|backward|grid] [--record] [--json PATH]

A fresh install (the default): the cases run in a child process under KERNEL_LADDER_FRESH_GPU=1 (an empty cache,
this GPU's recording ignored: ladder.runtime.cache), so each case's first call tunes on first use, and that call
is timed (first_call_s). `--tuned` runs them in this process instead, with this GPU's cache and recording.
Each case is checked against an fp32 reference, then timed in R rounds, each timing the op and its anchor in turn
(ladder.timing.bench: warm-up, L2 flushed, median); a row keeps the median of the rounds' ratios (anchor ms / op
ms), their min and max, and the kernel the op chose.

Cases (B·S = 8192 tokens: lesson 05's GPT-2 small):
  matmul     the model's linears with B as nn.Linear holds it (weight.t()): qkv 8192x2304x768, attention output
             8192x768x768, MLP up 8192x3072x768 with bias + GELU (anchor: F.gelu of F.linear), MLP down
             8192x768x3072, vocabulary 8192x50257x768, and the vocabulary with B row-major; 2048³, 4096³ and
             8192³ row-major; the qkv projection and MLP up again in bf16; anchor torch.matmul (F.linear where B is a
             weight). MLP up + GELU as a training step too: forward and backward, checked by its three gradients
  attention  B4 H32 S4096 at D64 and D128, causal and not; GPT-2's B8 H12 S1024 D64 causal; B1 H32 S16384 D128
             causal: q, k, v views of one packed (B, S, 3, H, D) projection; anchor SDPA on the same views. Then
             forward and backward (`--only backward` runs these alone), checked by the three gradients: GPT-2's
             shape and B4 H32 S4096 D64 causal
  grid       (--only grid, not in the default run) the dispatch table's 27 shapes, 256, 1449 and 8192 as M, N and K
             (ladder.dispatch.GRID), B row-major, fp16; anchor torch.matmul
`--record` merges the rows into results/<gpu>.json under "ops_speed" (a fresh install's and a tuned one's apart).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from ladder import check, dispatch, first_use, ops, results
from ladder.runtime import cache, hardware
from ladder.runtime.errors import NotAvailable
from ladder.runtime.world import require_gpu
from ladder.timing import bench
from kernels import attention_backward_search as backward_search

# (name, M, N, K, B: "weight" (nn.Linear's, read as weight.t()) or "row" (K x N), epilogue[, dtype: fp16 if left out])
MATMUL_CASES = [("qkv projection", 8192, 2304, 768, "weight", None),
                ("attention output", 8192, 768, 768, "weight", None),
                ("MLP up + bias + GELU", 8192, 3072, 768, "weight", "gelu"),
                ("MLP down", 8192, 768, 3072, "weight", None),
                ("vocabulary", 8192, 50257, 768, "weight", None),
                ("vocabulary, B row-major", 8192, 50257, 768, "row", None),
                ("2048³", 2048, 2048, 2048, "row", None),
                ("4096³", 4096, 4096, 4096, "row", None),
                ("8192³", 8192, 8192, 8192, "row", None),
                ("qkv projection, bf16", 8192, 2304, 768, "weight", None, torch.bfloat16),
                ("MLP up + bias + GELU, bf16", 8192, 3072, 768, "weight", "gelu", torch.bfloat16)]
TRAINING_CASES = [("MLP up + bias + GELU, forward and backward", 8192, 3072, 768)]
ATTENTION_CASES = [(4, 32, 4096, 64, 0), (4, 32, 4096, 64, 1), (4, 32, 4096, 128, 0), (4, 32, 4096, 128, 1),
                   (8, 12, 1024, 64, 1), (1, 32, 16384, 128, 1)]
ATTENTION_TRAINING_CASES = [(8, 12, 1024, 64, 1), (4, 32, 4096, 64, 1)]
WARMUP_MS, REP_MS = 50, 200


def _matmul_case(name: str, M: int, N: int, K: int, b_layout: str, epilogue: str | None,
                 dtype: torch.dtype = torch.float16, *, gen, device: str = "cuda") -> dict:
    """The op, its anchor and the fp32 reference of one matmul case, on fresh random inputs."""
    a = torch.randn(M, K, generator=gen, device=device).to(dtype)
    weight = b_layout == "weight"
    b = torch.randn(N, K, generator=gen, device=device).to(dtype).t() if weight else \
        torch.randn(K, N, generator=gen, device=device).to(dtype)
    bias = torch.randn(N, generator=gen, device=device).to(dtype) if epilogue else None

    def gelu(x):
        return F.gelu(x, approximate="tanh") if epilogue else x
    op = lambda: ops.matmul(a, b, bias, epilogue)   # noqa: E731
    anchor = (lambda: gelu(F.linear(a, b.t(), bias))) if weight else (lambda: torch.matmul(a, b))
    want = lambda: gelu(a.float() @ b.float() + (bias.float() if epilogue else 0))   # noqa: E731
    # the kernel an eager call runs (the op is timed eagerly): rung 7 may run there, never under torch.compile
    kernel = lambda: ops.matmul_choice(M, N, K, "weight_t" if weight else "row",   # noqa: E731
                                       "bias_gelu" if epilogue else None, ops.DTYPE_NAMES[dtype]).eager
    return {"op": "matmul", "case": name, "shape": [M, N, K], "run": op, "anchor": anchor, "want": want,
            "kernel": kernel, "anchor_name": "F.linear" if weight else "torch.matmul"}


def _training_case(name: str, M: int, N: int, K: int, *, gen, device: str = "cuda") -> dict:
    """A linear + GELU's forward and backward (nn.Linear's weight), the op's against F.linear then F.gelu: each run
    returns the gradients of the input, the weight and the bias."""
    a, w, bias = (torch.randn(*shape, generator=gen, device=device).half().requires_grad_()
                  for shape in ((M, K), (N, K), (N,)))
    grad = torch.randn(M, N, generator=gen, device=device).half()

    def step(forward, leaves=(a, w, bias)):
        def run():
            for t in leaves:
                t.grad = None
            forward(*leaves).backward(grad.to(leaves[0].dtype))
            return tuple(t.grad for t in leaves)
        return run
    fp32 = tuple(t.detach().float().requires_grad_() for t in (a, w, bias))
    return {"op": "matmul", "case": name, "shape": [M, N, K],
            "run": step(lambda x, y, z: ops.matmul(x, y.t(), z, "gelu")),
            "anchor": step(lambda x, y, z: F.gelu(F.linear(x, y, z), approximate="tanh")),
            "want": step(lambda x, y, z: F.gelu(F.linear(x, y, z), approximate="tanh"), fp32),
            "kernel": lambda: _training_kernels(M, N, K),
            "anchor_name": "F.linear+F.gelu"}


def _training_kernels(M: int, N: int, K: int) -> str:
    """What each of the case's three matmuls ran (eager): the forward, then the backward's grad @ weight and,
    for the weight's gradient in the weight's layout, grad.mT @ x (a transposed A: a case of its own)."""
    picks = [ops.matmul_choice(M, N, K, "weight_t", "bias_gelu").eager, ops.matmul_choice(M, K, N).eager,
             ops.matmul_choice(N, K, M, a_layout="transposed").eager]
    return "{}; backward {}, {}".format(*picks)


def _attention_case(shape: tuple, gen) -> dict:
    B, H, S, D, causal = shape
    q, k, v = torch.randn(B, S, 3, H, D, generator=gen, device="cuda").half().permute(2, 0, 3, 1, 4)
    return {"op": "attention", "case": f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}", "shape": list(shape),
            "run": lambda: ops.attention(q, k, v, bool(causal)),
            "anchor": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
            "want": lambda: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal)),
            "kernel": lambda: ops.attention_kernel(B, H, S, D, bool(causal)), "anchor_name": "SDPA"}


def _attention_training_case(shape: tuple, gen, device: str = "cuda") -> dict:
    """Attention's forward and backward on a model's views, the op's against SDPA's: each run returns dQ, dK, dV."""
    B, H, S, D, causal = shape
    packed = torch.randn(B, S, 3, H, D, generator=gen, device=device).half().requires_grad_()
    grad = torch.randn(B, H, S, D, generator=gen, device=device).half()

    def step(attention, leaf=packed):
        def run():
            leaf.grad = None
            q, k, v = leaf.permute(2, 0, 3, 1, 4)
            attention(q, k, v, bool(causal)).backward(grad.to(leaf.dtype))
            return tuple(leaf.grad.permute(2, 0, 3, 1, 4))
        return run
    sdpa = lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c)   # noqa: E731
    return {"op": "attention", "case": f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}, forward and backward",
            "shape": list(shape), "run": step(ops.attention), "anchor": step(sdpa),
            "want": step(sdpa, packed.detach().float().requires_grad_()),
            "kernel": lambda: _training_attention_kernels(B, H, S, D, bool(causal)),
            "anchor_name": "SDPA"}


def _training_attention_kernels(B: int, H: int, S: int, D: int, causal: bool) -> str:
    """What an eager training step's ops.attention ran: SDPA's forward and backward, or ours and our backward's rung."""
    if ops.attention_training_kernel(B, H, S, D, causal) == first_use.SDPA:
        return f"{first_use.SDPA}, forward and backward (measured faster here)"
    return (f"{ops.attention_kernel(B, H, S, D, causal)}; backward rung "
            f"{3 if backward_search.tuned_tiles(S, D, causal)['one_kernel'] else 2}")


def measure_case(case: dict, rounds: int) -> dict:
    """One case's row: its first call (tuning on first use included), its check, then `rounds` rounds; a line on
    stderr as it finishes (_progress)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    got = case["run"]()
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - start
    want = case["want"]()
    verdicts = [check.compare(g, w) for g, w in zip(got, want)] if isinstance(got, tuple) else [
        check.compare(got, want)]
    del got, want
    row = {"op": case["op"], "case": case["case"], "shape": case["shape"], "kernel": case["kernel"](),
           "anchor": case["anchor_name"], "correct": all(v.ok for v in verdicts),
           "rel_error": max(v.rel_error for v in verdicts),
           "first_call_s": first_call_s, "rounds": rounds}
    if not row["correct"]:   # a wrong result is not timed
        return _progress(row)
    ours, anchor = [], []
    for _ in range(rounds):
        ours.append(bench(case["run"], WARMUP_MS, REP_MS, warmed=True).median_ms)
        anchor.append(bench(case["anchor"], WARMUP_MS, REP_MS).median_ms)
    ratios = [a / o for a, o in zip(anchor, ours)]
    return _progress({**row, "ms": statistics.median(ours), "anchor_ms": statistics.median(anchor),
                      "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)})


def _progress(row: dict) -> dict:
    """One line per case on stderr as it finishes: a run cut short still shows what it measured."""
    speed = f"{row['ratio']:.3f}x (min {row['ratio_min']:.3f}, max {row['ratio_max']:.3f})" if "ratio" in row else \
        f"WRONG (rel. error {row['rel_error']:.2e})"
    print(f"{row['op']} {row['case']}: {speed} {row['anchor']}, kernel {row['kernel']}, "
          f"first call {row['first_call_s']:.2f} s", file=sys.stderr, flush=True)
    return row


def grid_cases() -> list[tuple]:
    """The 27 shapes of the dispatch table's grid as matmul cases (MATMUL_CASES' form)."""
    return [(f"grid {M}x{N}x{K}", M, N, K, "row", None) for M, N, K in dispatch.GRID]


def measure(rounds: int = 5, only: str | None = None) -> list[dict]:
    """Every case's row in this process (with whatever cache and recording it sees); only: "matmul",
    "attention", "backward" (attention's forward-and-backward cases) or "grid" (grid_cases, run only when asked)."""
    gen = torch.Generator("cuda").manual_seed(0)
    rows = []
    matmuls = MATMUL_CASES if only in (None, "matmul") else grid_cases() if only == "grid" else []
    for name, *case in matmuls:
        rows.append(measure_case(_matmul_case(name, *case, gen=gen), rounds))
        torch.cuda.empty_cache()   # the vocabulary's output is 823 MB: leave the next case its memory
    for name, *case in TRAINING_CASES if only in (None, "matmul") else []:
        rows.append(measure_case(_training_case(name, *case, gen=gen), rounds))
    for shape in ATTENTION_CASES if only in (None, "attention") else []:
        rows.append(measure_case(_attention_case(shape, gen), rounds))
    for shape in ATTENTION_TRAINING_CASES if only in (None, "attention", "backward") else []:
        rows.append(measure_case(_attention_training_case(shape, gen), rounds))
    return rows


def measure_fresh(rounds: int, only: str | None) -> list[dict]:
    """measure() in a child process under KERNEL_LADDER_FRESH_GPU=1: what a newcomer's GPU gets."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        env = {k: v for k, v in os.environ.items() if k != "KERNEL_LADDER_CACHE"}
        env[cache.FRESH_GPU_ENV] = "1"
        subprocess.run([sys.executable, "-m", "ladder.ops_speed", "--tuned", "--rounds", str(rounds),
                        "--json", out] + (["--only", only] if only else []), env=env, check=True,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)["ops_speed"]


def table(rows: list[dict]) -> str:
    lines = [f"{'op':9s} {'case':28s} {'kernel':22s} {'ms':>8s} {'anchor':>13s} {'ms':>8s} {'x anchor':>8s} "
             f"{'min-max':>11s} {'first call s':>12s}"]
    for r in rows:
        timed = (f"{r['ms']:8.3f} {r['anchor']:>13s} {r['anchor_ms']:8.3f} {r['ratio']:7.3f}x "
                 f"{r['ratio_min']:5.3f}-{r['ratio_max']:<5.3f}" if r["correct"] else
                 f"{'WRONG: rel. error ' + format(r['rel_error'], '.1e') + ', not timed':<53s}")
        lines.append(f"{r['op']:9s} {r['case']:28s} {r['kernel']:22s} {timed} {r['first_call_s']:12.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ladder.ops_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuned", action="store_true", help="this process, with this GPU's cache and recording")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("matmul", "attention", "backward", "grid"),
                        help="these cases alone (backward: attention's forward-and-backward cases; grid: the 27-shape "
                             "grid, which the default run leaves out)")
    parser.add_argument("--json", help="also write the rows (and the GPU's name) to this file")
    parser.add_argument("--record", action="store_true", help="merge the rows into results/<gpu>.json")
    args = parser.parse_args(argv)
    try:
        require_gpu("ladder.ops_speed (it times the ops on a GPU)")
        if args.record:
            hardware.require_real("Recording")
        gpu = hardware.detect()
        install = "tuned" if args.tuned and not cache.FRESH_GPU else "fresh"
        rows = measure(args.rounds, args.only) if args.tuned else measure_fresh(args.rounds, args.only)
    except NotAvailable as e:
        print(f"not available here: {e}", file=sys.stderr)
        return 2
    rows = [{**r, "install": install} for r in rows]
    print(f"ladder.ops against PyTorch on {gpu.name}, a {install} install: median of {args.rounds} rounds, "
          f"L2 flushed\n{table(rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu.name, "ops_speed": rows}, f, indent=1)
    if args.record:
        print(f"wrote {results.add_rows(gpu, 'ops_speed', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
