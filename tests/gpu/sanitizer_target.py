"""A compute-sanitizer target: every CUDA rung that runs here once, at ragged shapes (matmul, attention, or both);
under KERNEL_LADDER_EMULATE=sm_75 (or sm_80) the emulated GPU's code paths. `--rung NAME` (repeatable) keeps
only the rungs of those names, e.g. matmul's Hopper rungs 8-10 (their ring of mbarriers is what synccheck and
racecheck look at; (513, 257, 1000) has 16 k-tiles, so the 4-stage ring goes round four times; at (2200, 4500, 300)
the rings of rungs 9-10 run on from tile to tile); attention's Hopper rungs 7-15 also at S = 1000 (16 or 8 key tiles: its
2-stage ring goes round several times), with several heads (the TMA's zeros past a head's last row), and with more
query blocks than SMs (rungs 13-15's blocks walk several, their ring and Q's barrier going on from one to the next):

    compute-sanitizer --tool memcheck --error-exitcode 9 python tests/gpu/sanitizer_target.py [matmul|attention]
    compute-sanitizer --tool racecheck --error-exitcode 9 python tests/gpu/sanitizer_target.py [matmul|attention]
    compute-sanitizer --tool synccheck --error-exitcode 9 python tests/gpu/sanitizer_target.py matmul --rung 8_tma_warp_specialized --rung 9_persistent --rung 10_cluster_multicast --rung 11_tma_store --rung 12_autotuned
    compute-sanitizer --tool synccheck --error-exitcode 9 python tests/gpu/sanitizer_target.py attention --rung 7_wgmma_tma --rung 8_warp_specialized --rung 9_pingpong --rung 10_intra_overlap --rung 11_fast_exp2 --rung 12_three_consumers --rung 13_persistent --rung 14_critical_path --rung 15_autotuned
    KERNEL_LADDER_EMULATE=sm_75 compute-sanitizer --tool memcheck ... (the same, on the T4's code paths)
"""
import argparse
import functools
import sys

import torch

import kernels.attention as at
import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder.check import compare
from ladder.runtime.errors import Spills
from ladder.runtime.hardware import detect
from ladder.runner import unavailable
from ladder.runtime.world import WORLD

parser = argparse.ArgumentParser(description="run CUDA rungs once each, for compute-sanitizer")
parser.add_argument("problems", nargs="*", help="matmul, attention (default: both)")
parser.add_argument("--rung", action="append", help="only the rungs of this name (repeatable)")
args = parser.parse_args()
problems = args.problems or ["matmul", "attention"]
if set(problems) - {"matmul", "attention"}:
    parser.error(f"problems are matmul and attention, not {sorted(set(problems) - {'matmul', 'attention'})}")
chosen = lambda r: r.backend == "cuda" and unavailable(r) is None and (not args.rung or r.name in args.rung)  # noqa: E731
print(WORLD.name)
wrong, ran = [], []


def searchable(D: int, config: dict) -> bool:
    """Attention rung 15's `config` compiles at D without spilling registers (its search would time it)."""
    try:
        at.HOPPER_TUNERS[D].compile(config)
        return True
    except Spills:
        return False


def report(shape, name, verdict):
    print(shape, name, verdict)
    ran.append(name)
    if not verdict.ok:
        wrong.append((shape, name))


if "matmul" in problems:
    # the Hopper rungs also where C has more tiles (324) than the GPU has SMs: the blocks of rungs 9-12 walk several;
    # rung 12 in each tile shape and cluster size its search can choose (rung 11's is its default)
    runs = [(r.name, r.run, r.needs) for r in mm.PROBLEM.rungs if chosen(r)]
    if any(name == "12_autotuned" for name, _, _ in runs):
        runs += [(f"12_autotuned {mm.autotune.format_config(c)}", functools.partial(cm.run_hopper_config, c), "wgmma")
                 for c in mm.HOPPER_SHAPES]
    for M, N, K in [(255, 257, 71), (130, 260, 64), (127, 255, 129), (64, 72, 24), (513, 257, 1000), (2200, 4500, 300)]:
        a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
        for name, run, needs in runs:
            if M < 2200 or needs == "wgmma":
                out = run(a, b)
                torch.cuda.synchronize()
                report((M, N, K), name, compare(out, a.double() @ b.double()))
if "attention" in problems:
    # rung 6 also with a second configuration: 8 warps, 128 queries a block (the heavy-first order on causal)
    runs = [(r.name, r.run, r.needs, None) for r in at.PROBLEM.rungs if chosen(r)]
    if not args.rung or "6_autotuned" in args.rung:
        runs.append(("6_autotuned 128x32x8w", lambda q, k, v, c: at.run_config(dict(BLOCK_M=128, BLOCK_N=32, WARPS=8,
                                                                                   STAGES=3), q, k, v, c), None, None))
    # rung 15 also with two and three consumer warpgroups on each key tile, in a ring of 2 (the one going round
    # most often), where its search would time them (per D: what fits and does not spill)
    if any(name == "15_autotuned" for name, *_ in runs):
        runs += [(f"15_autotuned D{D} {at.autotune.format_config(c)}", functools.partial(at.run_searched, c), "wgmma",
                  D) for D in (64, 128) for c in at.HOPPER_TUNERS[D].configs()
                 if c["STAGES"] == 2 and at.HOPPER_TUNERS[D].prune(c, detect()) is None and searchable(D, c)]
    for shape in [(1, 2, 100, 64, 1), (1, 2, 129, 64, 0), (1, 1, 130, 128, 0), (1, 1, 200, 128, 1),
                  (1, 2, 1000, 128, 1), (1, 2, 100, 64, 0), (2, 2, 1000, 64, 0), (1, 2, 1000, 64, 1),
                  (2, 150, 100, 64, 0), (1, 300, 70, 128, 0)]:
        q, k, v = (torch.randn(*shape[:4], device="cuda").half() for _ in range(3))
        for name, run, _, _ in [r for r in runs if (shape[2] < 1000 or r[2] == "wgmma") and r[3] in (None, shape[3])]:
            out = run(q, k, v, bool(shape[4]))
            torch.cuda.synchronize()
            report(shape, name, compare(out, at.reference(q, k, v, bool(shape[4]))))
if args.rung and not ran:
    sys.exit(f"no rung named {args.rung} runs here")
sys.exit(f"wrong results: {wrong}" if wrong else 0)
