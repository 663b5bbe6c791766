"""Lesson 04f, attention on Hopper (CUDA rungs 11-15): the softmax's instructions per score, the path from a tile's
scores to the next tile's product, how full the query blocks are, and what rung 13's persistent blocks and rung
15's search gain; the lesson's pictures (ladder.diagrams.attention_hopper) read the same SASS.
"""
from __future__ import annotations

import functools
import re

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from ladder import autotune
from ladder.lessons.l04_attention import attention_sass, cuda_attention_tiles


# The softmax's opcodes, as the SASS names them (F2FP: two fp32 rounded into a half2 of P; FSETP and FMUL: exp2f's
# range fix-up besides the rescales).
SOFTMAX_OPCODES = ("FFMA", "MUFU.EX2", "FMNMX", "FADD", "F2FP", "FSETP", "FMUL")


@functools.lru_cache(maxsize=None)
def softmax_instruction_mix(names=("10_intra_overlap", "11_fast_exp2"), head_dim: int = 64) -> dict:
    """Per CUDA attention rung in `names` (rungs 10-11: two copies of the softmax, the first tile's and the loop's,
    each BLOCK_N / 2 scores a thread), its SASS's instructions of each SOFTMAX_OPCODES family per score (count /
    BLOCK_N), and under "kernel" the kernel's whole instruction count (code, not instructions executed). Compiled
    once per (names, D): lesson 04f's table and picture read the same SASS; do not modify the result."""
    mix = {}
    for name in names:
        s = attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", head_dim)
        per_score = cuda_attention_tiles(name, head_dim)["BLOCK_N"]
        mix[name] = {**{f: s.count(f) / per_score for f in SOFTMAX_OPCODES}, "kernel": sum(s.opcodes().values())}
    return mix


def softmax_instructions(names=("10_intra_overlap", "11_fast_exp2"), head_dims=(64, 128)) -> str:
    """softmax_instruction_mix as a table: a row per rung and D (not the kernel's total, which moves with the CUDA
    version compiling it)."""
    lines = [f"{'rung':18s}{'D':>4s}" + "".join(f"{f:>9s}" for f in SOFTMAX_OPCODES) + f"{'sum':>7s}"]
    for D in head_dims:
        for name, m in softmax_instruction_mix(names, D).items():
            lines.append(f"{name:18s}{D:4d}" + "".join(f"{m[f]:9.2f}" for f in SOFTMAX_OPCODES)
                         + f"{sum(m[f] for f in SOFTMAX_OPCODES):7.2f}")
    lines.append("(SASS for sm_90a with the launcher's tiles; each family's count / BLOCK_N: per score a consumer thread "
                 "owns)")
    return "\n".join(lines)


def path_to_next_issue(text: str) -> list[str]:
    """The opcodes a consumer warpgroup of rungs 10-14 runs in its loop (SASS `text`) between a tile's S landing
    (WARPGROUP.DEPBAR.LE gsb0, 0x1: all but the last group done) and its first HGMMA of the next tile's S, on an
    unmasked tile: a predicated branch forward inside the loop (over the mask's code) taken, the rest of the loop
    body in order, round the loop's back branch to its head."""
    ins = [(int(a, 16), bool(p), op, rest.replace(",", " ").split())
           for a, p, op, rest in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);", text)]
    index = {a: i for i, (a, *_) in enumerate(ins)}
    land = next(i for i, x in enumerate(ins) if x[2] == "WARPGROUP.DEPBAR.LE" and x[3][-1] == "0x1")
    back = next(i for i in range(land, len(ins)) if ins[i][2] == "BRA" and int(ins[i][3][0], 16) < ins[land][0])
    path, i = [], land + 1
    while not ins[i][2].startswith("HGMMA"):
        address, predicated, op, operands = ins[i]
        path.append(op)
        if op == "BRA" and (i == back or predicated and address < int(operands[0], 16) <= ins[back][0]):
            i = index[int(operands[0], 16)]
        else:
            i += 1
    return path


@functools.lru_cache(maxsize=None)
def next_issue_paths(names=("13_persistent", "14_critical_path"), head_dim: int = 128) -> dict[str, list[str]]:
    """Per CUDA attention rung in `names`, path_to_next_issue of its SASS for sm_90a at `head_dim` with the
    launcher's tiles. Compiled once per (names, D): lesson 04f's table and picture read the same SASS; do not
    modify the result."""
    return {name: path_to_next_issue(attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", head_dim).text)
            for name in names}


def critical_path(names=("13_persistent", "14_critical_path"), head_dims=(64, 128)) -> str:
    """Lesson 04f's rung 14 count: per rung and D, the instructions of path_to_next_issue (next_issue_paths) and of
    them the FMULs (the softmax's own and O's rescale) and MUFU.EX2s."""
    lines = [f"{'rung':18s}{'D':>4s}{'instructions':>14s}{'FMUL':>6s}{'MUFU.EX2':>10s}"]
    for D in head_dims:
        for name, path in next_issue_paths(tuple(names), D).items():
            lines.append(f"{name:18s}{D:4d}{len(path):14d}{path.count('FMUL'):6d}{path.count('MUFU.EX2'):10d}")
    lines.append("(SASS for sm_90a: a consumer warpgroup's loop from S landing to the next S's first HGMMA, "
                 "an unmasked tile)")
    return "\n".join(lines)


def persistent_gain(runs: list[dict], shapes: list[tuple], before: str = "12_three_consumers",
                    after: str = "13_persistent") -> str:
    """Lesson 04f's rung 13 Why: per shape (a sweep over S), the key tiles an item walks (S / BLOCK_N), the two
    rungs' recorded times (`runs`: a recording's rows, both rungs timed in its run) and the speed of `after` over
    `before`: a saving made once an item shrinks as items get longer."""
    ms = {(r["rung"], tuple(r["shape"])): r["ms"] for r in runs if r.get("backend") == "cuda"}
    one, two = before.split("_")[0], after.split("_")[0]
    lines = [f"{'shape (B, H, S, D, causal)':28s} {'key tiles an item':>17s} {f'rung {one} ms':>11s} "
             f"{f'rung {two} ms':>11s} {f'{two} / {one} speed':>13s}"]
    for shape in shapes:
        if (before, shape) not in ms or (after, shape) not in ms:
            continue
        tiles = -(-shape[2] // cuda_attention.hopper_launch(after, shape[3])[0]["BLOCK_N"])
        lines.append(f"{str(shape):28s} {tiles:17d} {ms[before, shape]:11.4f} {ms[after, shape]:11.4f} "
                     f"{ms[before, shape] / ms[after, shape]:12.3f}x")
    return "\n".join(lines)


def query_block_fill(shapes: list[tuple], rows=(192, 128), block_n: int = 128) -> str:
    """Lesson 04f's rung 15 count: per shape (B, H, S, D, causal), the query blocks a head and the scores computed
    over those needed (kernels/attention.py, scores_computed) with blocks of each of `rows` queries."""
    lines = [f"{'shape (B, H, S, D, causal)':28s}" + "".join(f"{f'blocks of {r}':>18s} {'computed':>11s}" for r in rows)]
    for shape in shapes:
        lines.append(f"{str(tuple(shape)):28s}" + "".join(
            f"{-(-shape[2] // r):18d} {at.scores_computed(shape, r, block_n) / at.scores_needed(shape):10.3f}x"
            for r in rows))
    lines.append(f"(computed: the scores a block's rows compute, each up to its last {block_n}-key tile, over those "
                 "attention needs)")
    return "\n".join(lines)


def search_steps(tuner: str = "cuda:15_autotuned") -> str:
    """Lesson 04f's rung 15 Why: per recorded search of `tuner` (kernels.attention.HOPPER_TUNERS), the winner and,
    timed in the same search on the same inputs, rung 14's configuration: the step the search made there."""
    lines = [f"{'shape (B, H, S, D, causal)':28s} {'winner':36s} {'ms':>7s} {'rung 14 ms':>11s} {'step':>6s}"]
    for r in autotune.recorded_reports():
        if r.tuner != tuner:
            continue
        own = next(t["ms"] for t in r.timed if t["config"] == at.rung14_config(r.shape[3]))
        lines.append(f"{str(tuple(r.shape)):28s} {autotune.format_config(r.best):36s} {r.best_ms:7.4f} {own:11.4f} "
                     f"{own / r.best_ms:5.3f}x")
    lines.append("(one search each: every configuration timed on the same inputs, L2 flushed; rung 14's is one of them)")
    return "\n".join(lines)


def softmax_sass_lines(name: str = "10_intra_overlap", head_dim: int = 64, around: int = 8, lines: int = 10) -> str:
    """Lesson 04f's SASS excerpt: `lines` instructions of CUDA rung `name`'s SASS (sm_90a, the launcher's tiles) from a
    few before its `around`-th MUFU.EX2, addresses and opcodes, the encodings left out: where exp2f's fix-up sits."""
    text = attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", head_dim).text
    ins = [m.group(1).strip() + " " + m.group(2).strip() + ";"
           for m in re.finditer(r"(/\*[0-9a-f]{4,}\*/)\s+([^;]*);", text)]
    i = [k for k, x in enumerate(ins) if " MUFU.EX2 " in x][around]
    return "\n".join(ins[i - lines // 2: i - lines // 2 + lines]) + f"\n(rung {name}, D{head_dim}: SASS for sm_90a)"
