"""RESULTS.md, written from results/*.json: `python -m ladder results-page` (`--check`: write nothing, exit 1 if
RESULTS.md differs from what the recordings give).

Per recorded GPU: its provenance as the file records it (GPU, driver, CUDA, torch, Triton, CuPy, the date of its
newest run), its measured ceilings, then per problem one table: each rung at the problem's headline shapes, its
median ms, TFLOP/s (GB/s for the memory-bound vector add) and its speed against the library anchor timed in the
same run (results.run_anchor: a row's own session, never a later one's); then lesson 05's model end to end. The
page measures nothing: it is a view of the recordings, and tests/test_results_page.py fails while it is stale.
"""
from __future__ import annotations

import math
from pathlib import Path

from ladder import problems as problems_mod, results as results_mod, verdicts

PAGE = Path(__file__).resolve().parent.parent / "RESULTS.md"
# the library rung each problem's ratios are to (its first torch rung where not named here)
ANCHORS = {"vector_add": "torch:add", "matmul": "torch:cublas", "matmul_bias_relu": "torch:compile",
           "attention": "torch:sdpa", "attention_backward": "torch:sdpa"}
MEMORY_BOUND = {"vector_add"}   # rated in GB/s against the copy roof, as verdicts.roof_of does
ANCHOR_NAMES = {"torch:add": "torch.add", "torch:cublas": "cuBLAS", "torch:compile": "torch.compile",
                "torch:sdpa": "SDPA"}


def _sig(x: float, digits: int) -> str:
    """`x` to `digits` significant digits, in plain notation: 1250, 0.1903, 28.6."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:.{max(digits - 1 - math.floor(math.log10(abs(x))), 0)}f}"


def anchor_of(problem) -> str:
    return ANCHORS.get(problem.name) or next(r.label for r in problem.rungs if r.backend == results_mod.ANCHOR_BACKEND)


def provenance_line(rec: results_mod.Recording) -> str:
    p = rec.data["provenance"]
    versions = ", ".join(f"{name} {p[key]}" for name, key in (("driver", "driver"), ("CUDA", "cuda"),
                         ("torch", "torch"), ("Triton", "triton"), ("CuPy", "cupy"), ("Python", "python"))
                         if p.get(key))
    dates = sorted({r["recorded"][:10] for r in rec.runs() if "recorded" in r})
    span = f"; its rows recorded {dates[0]} to {dates[-1]}" if len(dates) > 1 else ""
    return (f"**{p['gpu']}** ({p.get('arch', '?')}), `results/{rec.path.name}`: {versions}; "
            f"newest run {p['date']}{span}.")


def ceilings_line(rec: results_mod.Recording) -> str:
    named = [(name.split(", ")[0], name.split(", ")[-1], rec.ceilings[key])   # "copy, TB/s" -> copy 3.02 TB/s
             for key, name in results_mod.CEILING_NAMES.items() if key in rec.ceilings]
    return "Measured ceilings: " + ", ".join(f"{name} {value:.2f} {unit}" for name, unit, value in named) + "."


def cell(row: dict | None, anchor: dict | None, memory_bound: bool) -> str:
    """'0.1903 ms · 724 · 0.983×': median ms, TFLOP/s (GB/s), × the anchor of its run ('-' where it timed none)."""
    if row is None:
        return ""
    rate = _sig(1000 * row["tbps"], 4) if memory_bound else _sig(row["tflops"], 3)
    times = anchor["ms"] / row["ms"] if anchor else None
    ratio = "-" if times is None else f"{times:.3f}×" if times >= 0.1 else f"{_sig(times, 2)}×"
    return f"{_sig(row['ms'], 4)} ms · {rate} · {ratio}" + ("" if row.get("correct", True) else " WRONG")


def problem_table(rec: results_mod.Recording, problem) -> str | None:
    """The problem's rungs (ladder order, then any recorded rung the problem no longer has) at its headline
    shapes, as a markdown table with a line that says what a cell holds; None when nothing of it is recorded."""
    shapes = verdicts.headline_shapes(problem)
    rows = [r for r in rec.runs(problem.name) if tuple(r["shape"]) in shapes]
    if not rows:
        return None
    anchor, memory_bound = anchor_of(problem), problem.name in MEMORY_BOUND
    recorded = {results_mod.rung_label(r) for r in rows}
    order = [r.label for r in problem.rungs if r.label in recorded]
    order += sorted(recorded - set(order))
    lines = [f"Each cell: median ms · {'GB/s' if memory_bound else 'TFLOP/s'} · × "
             f"{ANCHOR_NAMES.get(anchor, anchor)} (`{anchor}`) timed in the same run (- where that run timed none).",
             "",
             "| rung | " + " | ".join(verdicts.shape_label(problem, s) for s in shapes) + " |",
             "|---" * (len(shapes) + 1) + "|"]
    for label in order:
        cells = []
        for shape in shapes:
            row = next((r for r in rows if results_mod.rung_label(r) == label and tuple(r["shape"]) == shape), None)
            cells.append(cell(row, row and results_mod.run_anchor(row, anchor, rec), memory_bound))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    missing = [r.label for r in problem.rungs if r.label not in recorded]
    if missing:
        lines += ["", "Not recorded on this GPU: " + ", ".join(f"`{m}`" for m in missing) + "."]
    return "\n".join(lines)


def capstone_section(rec: results_mod.Recording) -> str | None:
    from ladder.capstone import endtoend   # deferred: only this section needs the model's code
    row = rec.capstone()
    if row is None:
        return None
    return (f"Lesson 05's model end to end (`python -m ladder record capstone`, {row['model']}):\n\n"
            f"```\n{endtoend.variant_table(row)}\n```")


def models_section(rec: results_mod.Recording) -> str | None:
    """`record models`' rows: each model and step, six ways, × the torch variant each "+ ops" one replaces."""
    from ladder.capstone import whole_model   # deferred, as the capstone's
    rows = rec.data.get("model", [])
    if not rows:
        return None
    tables = [f"{name}, {step}:\n{whole_model.table([r for r in rows if (r['model'], r['step']) == (name, step)])}"
              for name, step in dict.fromkeys((r["model"], r["step"]) for r in rows)]
    return ("Whole models six ways, with and without `ladder.ops` (`python -m ladder record models`; ms per call as a "
            "loop pays it, host included; \"x torch\": the torch variant the row replaces):\n\n```\n"
            + "\n\n".join(tables) + "\n```")


def ops_speed_section(rec: results_mod.Recording) -> str | None:
    """`python -m ladder.ops_speed --record`'s rows: the public ops against PyTorch's, a fresh install and a tuned one."""
    from ladder import ops_speed   # deferred, as the capstone's
    rows = rec.data.get("ops_speed", [])
    tables = [f"A {install} install:\n{ops_speed.table([r for r in rows if r['install'] == install])}"
              for install in ("fresh", "tuned") if any(r["install"] == install for r in rows)]
    if not tables:
        return None
    return ("`ladder.ops` against PyTorch at a model's shapes (`python -m ladder.ops_speed --record`; x anchor: the "
            "median of the rounds' ratios, min-max beside it; the first call includes tuning on first use):\n\n```\n"
            + "\n\n".join(tables) + "\n```")


def gpu_section(rec: results_mod.Recording) -> str:
    parts = [f"## {rec.gpu}", provenance_line(rec), ceilings_line(rec)]
    for problem in problems_mod.problems().values():
        table = problem_table(rec, problem)
        if table:
            shapes = ", ".join("x".join(map(str, s)) for s in verdicts.headline_shapes(problem))
            parts += [f"### {problem.name}", f"Headline shapes: {shapes}.", table]
    capstone = capstone_section(rec)
    if capstone:
        parts += ["### capstone", capstone]
    models = models_section(rec)
    if models:
        parts += ["### models", models]
    speed = ops_speed_section(rec)
    if speed:
        parts += ["### ops", speed]
    return "\n\n".join(parts)


HEADER = """# Recorded results

Generated by `python -m ladder results-page` from `results/*.json`: do not edit by hand. Each recording is made
with `python -m ladder record` on that GPU (see the README's "Re-record results on your GPU"); a rung's ratio is
to the library timed in the same run as the rung, so rows recorded in different runs are each compared fairly.
`python -m ladder compare` prints the side-by-side table below; the lessons print the same rows, rung by rung."""


def page(slugs: list[str] | None = None) -> str:
    slugs = slugs or sorted(p.stem for p in results_mod.RESULTS_DIR.glob("*.json"))
    recs = [results_mod.load(s) for s in slugs]
    parts = [HEADER]
    if len(recs) > 1:
        parts += ["## Side by side", "Ceilings, then each ladder's top rungs at one shape: median time and × the "
                  "anchor timed in the same run.", results_mod.side_by_side(slugs)]
    parts += [gpu_section(r) for r in recs]
    return "\n\n".join(parts) + "\n"


def write(path: Path | None = None) -> Path:
    path = path or PAGE
    path.write_text(page())
    return path


def stale(path: Path | None = None) -> bool:
    path = path or PAGE
    return not path.exists() or path.read_text() != page()
