"""Should you write this kernel? The three conditions and the six checks, per swappable op, each answered
from a measurement of the recorded run or marked as a judgement with its reason.

Three conditions (all must hold): room above the floor, the op is hot, its shape is stable.
Six checks: hot (> 5% of the time), an off-the-shelf kernel exists, stable shape, survives a model change,
maintainable, and a speed-up big enough (>= 2x end to end).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ladder import profile
from ladder.runtime import world
from ladder.capstone import costs
from ladder.capstone.model import PRESETS
from ladder.lessons.source import ROOT, lines_of_code

ROOM = 1.5            # an op at 1.5x its floor or more has room above it
HOT_CONDITION = 0.10  # the conditions' "hot": a tenth of the run time
HOT_CHECK = 0.05      # the checks' "hot": 5% of wall-clock
END_TO_END = 2.0      # the speed-up worth a kernel of one's own, end to end
NOT_RECORDED = "not recorded yet: run `python -m ladder record capstone` on a GPU"

# What no measurement answers, with the reason (the source files are counted, not guessed).
JUDGEMENTS = {
    "attention": {
        "stable shape": (True, "inference at a fixed sequence length and head size 64: one shape per model"),
        "survives a model change": (False, "the kernel takes head sizes 64 and 128 only, and no grouped-query "
                                    "heads, sliding window or dropout: a new model can need any of them"),
        "maintainable": (False, "{lines} lines of code in its file (kernels, launchers, search space), tuned per GPU; "
                         "the library kernel is maintained for every GPU by others"),
    },
    "MLP up + GELU": {
        "stable shape": (True, "K = d and N = 4d are fixed; M = batch x sequence changes with the batch (a search per M)"),
        "survives a model change": (False, "tied to GELU's tanh form: a model with SwiGLU or another "
                                    "activation needs a new epilogue"),
        "maintainable": (True, "the epilogue is a few of its file's {lines} lines of code; the matmul is the "
                         "ladder's rung 6, kept correct by its tests"),
    },
}
SOURCES = {"attention": "kernels/triton/attention.py", "MLP up + GELU": "kernels/triton/matmul.py"}


@dataclass
class Row:
    question: str
    answer: str
    favours_writing: bool | None   # None: not recorded yet
    kind: str                      # "measured" or "judgement"
    evidence: str


def _recorded_op(row: dict | None, swap: str) -> dict | None:
    return next((o for o in row["swaps"] if o["swap"] == swap), None) if row else None


def rows_for(swap: str, row: dict | None) -> list[Row]:
    """The three conditions, then the six checks, for one swap; `row` is the recorded capstone row (or None)."""
    cfg = PRESETS[row["model"]] if row else PRESETS["gpt2-small"]
    op = _recorded_op(row, swap)
    lines = lines_of_code((ROOT / SOURCES[swap]).read_text())
    judged = {q: Row(q, "yes" if yes else "no", yes, "judgement", why.format(lines=lines))
              for q, (yes, why) in JUDGEMENTS[swap].items()}
    if op is None:
        missing = lambda q: Row(q, "?", None, "measured", NOT_RECORDED)  # noqa: E731
        room, hot10, hot5, shelf, big = (missing(q) for q in (
            "room above the floor", "hot (>= 10% of time)", "hot (> 5% of wall-clock)",
            "no off-the-shelf kernel as fast", f"speed-up >= {END_TO_END:g}x end to end"))
    else:
        floor = sum(o.floor_ms(row["ceilings"]) for o in costs.ops(cfg) if o.name in costs.SWAPS[swap])
        headroom = op["torch_ms"] / floor
        share = op["torch_ms"] * cfg.layers / row["variants"]["eager"]["ms"]
        room = Row("room above the floor", "yes" if headroom >= ROOM else "no", headroom >= ROOM, "measured",
                   f"eager {1e3 * op['torch_ms']:.1f} µs vs floor {1e3 * floor:.1f} µs: {headroom:.2f}x the floor")
        hot10 = Row("hot (>= 10% of time)", "yes" if share >= HOT_CONDITION else "no", share >= HOT_CONDITION,
                    "measured", f"{100 * share:.1f}% of the eager forward pass")
        hot5 = Row("hot (> 5% of wall-clock)", "yes" if share > HOT_CHECK else "no", share > HOT_CHECK, "measured",
                   f"{100 * share:.1f}%")
        library = min(op["torch_ms"], op["compile_ms"])
        faster = op["ours_ms"] < library
        shelf = Row("no off-the-shelf kernel as fast", "yes" if faster else "no", faster, "measured",
                    f"ours {1e3 * op['ours_ms']:.1f} µs, eager {1e3 * op['torch_ms']:.1f} µs, "
                    f"torch.compile {1e3 * op['compile_ms']:.1f} µs")
        gain = row["variants"]["eager"]["ms"] / row["variants"]["eager + ours"]["ms"]
        predicted = costs.amdahl(share, op["torch_ms"] / op["ours_ms"])
        big = Row(f"speed-up >= {END_TO_END:g}x end to end", "yes" if gain >= END_TO_END else "no",
                  gain >= END_TO_END, "measured",
                  f"both swaps: {gain:.3f}x measured; this one alone by Amdahl: {predicted:.3f}x")
    conditions = [room, hot10, judged["stable shape"]]
    checks = [hot5, shelf, judged["stable shape"], judged["survives a model change"], judged["maintainable"], big]
    return conditions + checks


def verdict(rows: list[Row]) -> str:
    if any(r.favours_writing is None for r in rows):
        return "no verdict until the measured rows are recorded"
    against = [r.question for r in rows if not r.favours_writing]
    return "write it" if not against else "do not write it; answered no: " + ", ".join(dict.fromkeys(against))


def table(swap: str, row: dict | None) -> str:
    rows = rows_for(swap, row)
    out = [f"{swap}", f"{'':3s}{'question':34s} {'answer':6s} {'kind':9s} evidence"]
    for i, r in enumerate(rows):
        if i in (0, 3):
            out.append("  three conditions:" if i == 0 else "  six checks:")
        out.append(f"{'':3s}{r.question:34s} {r.answer:6s} {r.kind:9s} {r.evidence}")
    out.append(f"  verdict: {verdict(rows)}")
    return "\n".join(out)


def recorded_answers(rec) -> list[str]:
    """Three answers the ladder's own recording already gives, each computed from its rows (and each row's
    own run's ceilings): an op with no room, a library kernel at its roof, and a fusion compile already makes."""
    def at(problem, rung, shape):
        return next(r for r in rec.runs(problem) if f"{r['backend']}:{r['rung']}" == rung and r["shape"] == shape)

    add = at("vector_add", "torch:add", [10**9])
    copy = (rec.session(add) or {}).get("ceilings") or rec.ceilings
    cublas = next((p for p in rec.profiles("matmul") if p["rung"] == "cublas"), None)
    shape = [4096] * 3
    eager, compiled, fused = (at("matmul_bias_relu", r, shape)["ms"]
                              for r in ("torch:three_ops", "torch:compile", "triton:fused"))
    return [
        f"torch.add, 10^9 fp16 elements: {add['tbps']:.2f} TB/s = {100 * add['tbps'] / copy['copy_TBps']:.0f}% "
        "of the copy bandwidth measured in its run: no room above the floor",
        (f"cuBLAS, {'x'.join(map(str, cublas['shape']))}: tensor pipe busy {cublas['metrics']['tensor_pipe_pct']:.1f}% "
         "of its cycles (ncu): the tensor cores seldom idle" if cublas else "cuBLAS: no ncu profile recorded"),
        f"relu(A·B + bias) at 4096³: torch.compile {eager / compiled:.2f}x over eager, our fused kernel "
        f"{eager / fused:.2f}x: compile already captures {100 * (eager / compiled - 1) / (eager / fused - 1):.0f}% "
        "of the fusion's gain",
    ]


def headroom_table(row: dict | None) -> str:
    """Each op of the recorded model alone: its time, its floor at the run's ceilings, how far above it."""
    if row is None:
        return NOT_RECORDED
    cfg = PRESETS[row["model"]]
    timed = {o["op"]: o["torch_ms"] for o in row["ops"]}
    lines = [f"{'op':24s} {'x':>3s} {'µs alone':>9s} {'floor µs':>9s} {'x floor':>8s} {'% of eager':>10s}"]
    for op in costs.ops(cfg):
        ms, floor = timed[op.name], op.floor_ms(row["ceilings"])
        share = ms * op.per_forward / row["variants"]["eager"]["ms"]
        lines.append(f"{op.name:24s} {op.per_forward:3d} {1e3 * ms:9.1f} {1e3 * floor:9.1f} {ms / floor:8.2f} "
                     f"{100 * share:9.1f}%")
    return "\n".join(lines)


# ---------------------------------------------------------------- Nsight Compute on the hottest op

def hottest_op_ncu(model: str = "gpt2-small") -> dict:
    """ncu's speed-of-light, memory-workload and roofline sections for the hottest op, the vocabulary projection
    run once as the model runs it (ladder/capstone/hot_op.py; a GPU with ncu)."""
    command = profile.ncu_sections_command([sys.executable, "-m", "ladder.capstone.hot_op", model])
    shown = profile.ncu_sections_command(["python", "-m", "ladder.capstone.hot_op", model])
    return {"command": " ".join(shown), "text": profile.program_sections(command)}


def ncu_report(row: dict | None, label: str, model: str = "gpt2-small") -> str:
    """The sections live where a GPU and ncu are (a minute), else as `record capstone` saved them."""
    if world.WORLD.gpu and profile.available():
        found, source = hottest_op_ncu(model), "live"
    elif row and row.get("ncu"):
        found, source = row["ncu"], label
    else:
        return "no ncu here, and the recording holds no ncu sections (`python -m ladder record capstone` on a GPU with ncu)"
    return f"$ {found['command']}    ({source})\n{found['text']}"



def padding_report(row: dict | None, label: str) -> str:
    """The hottest op, and the fix that is a shape: the vocabulary projection alone at the model's vocabulary and
    padded to a multiple of 64, Amdahl's prediction for the model from the two, and the model measured both ways."""
    if not row or "vocab_padding" not in row:
        return NOT_RECORDED
    v, eager = row["vocab_padding"], row["variants"]["eager"]["ms"]
    op = next(o for o in costs.ops(PRESETS[row["model"]]) if o.name == "vocabulary projection")
    floor = op.floor_ms(row["ceilings"])
    lines = [f"{label}: the vocabulary projection alone (8192 tokens x 768 -> vocabulary), eager model {eager:.3f} ms"]
    for vocab, ms, kernel in ((v["vocab"], v["alone_ms"], v.get("kernel")),
                              (v["padded"], v["padded_alone_ms"], v.get("padded_kernel"))):
        lines.append(f"  vocabulary {vocab}: {1e3 * ms:7.1f} µs alone = {ms / floor:.2f}x its floor "
                     f"({1e3 * floor:.1f} µs), {100 * ms / eager:.1f}% of the eager forward pass")
        lines.append(f"    cuBLAS ran {kernel}" if kernel else "    its kernel's name: not in this recording")
    speedup = v["alone_ms"] / v["padded_alone_ms"]
    predicted = eager - v["alone_ms"] + v["padded_alone_ms"]
    measured = v["eager_padded"]
    lines.append(f"  padding makes the op {speedup:.2f}x faster; Amdahl: {eager:.3f} -> {predicted:.3f} ms "
                 f"({eager / predicted:.2f}x) for the model")
    lines.append(f"  measured, eager model with the padded vocabulary: {measured['ms']:.3f} ms "
                 f"(p20-p80 {measured['ms_p20']:.3f}-{measured['ms_p80']:.3f}): {eager / measured['ms']:.2f}x")
    compiled = compiled_projection(row)
    if compiled:
        name, us = compiled
        lines.append(f"  torch.compile's projection, unpadded: {name} {us:.0f} µs a forward pass = "
                     f"{us / 1e3 / floor:.2f}x its floor")
    return "\n".join(lines)


def compiled_projection(row: dict) -> tuple[str, float] | None:
    """The vocabulary projection's kernel in torch.compile's recorded profile, and its µs per forward pass: the
    model's one linear layer without a bias, so the heaviest matmul kernel with no bias epilogue in its name."""
    top = row.get("profiles", {}).get("torch.compile", {}).get("top", [])
    return next(((name, us) for name, family, us in top if family == "matmul" and "bias" not in name), None)
