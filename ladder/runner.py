"""Check and time the rungs of a problem: live on a GPU, or from the recording on CPU.

`results(problem)` is what a notebook calls: on a GPU it checks every rung on the ragged shapes,
then times it at the benchmark shapes against ceilings measured in the same process; without a
GPU it returns the recorded runs, labelled as recorded.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ladder import ceilings as ceilings_mod, problems
from ladder import results as results_mod
from ladder.results import ANCHOR_BACKEND
from ladder.check import CheckResult, check
from ladder.runtime.hardware import detect, require_real
from ladder.problems import Problem, Rung
from ladder.timing import bench, rates
from ladder.runtime.world import WORLD, device


def unavailable(rung: Rung) -> str | None:
    """Why `rung` cannot run in this world, or None."""
    if not WORLD.gpu:
        if rung.backend == "cuda":
            return "CUDA C++ needs a GPU to run: here it is compiled (ladder.sass) instead"
        if rung.needs == "gpu" or (rung.backend == "torch" and rung.needs):  # Triton rungs: the interpreter
            return f"needs a GPU{'' if rung.needs == 'gpu' else ' with ' + rung.needs} (there is no CPU version of it here)"
        return None
    return rung.unavailable_reason(detect())


COMPILE_WORKERS = 8


def compile_ahead(problem: Problem) -> list[Future]:
    """GPU: run each CUDA and Triton rung of `problem` once at a small shape for every compiled variant its check
    and headline shapes need (`problem.compile_shape`), in COMPILE_WORKERS processes at once. Their compilers fill
    Triton's and CuPy's caches on disk, which this process then loads from instead of compiling each variant in
    turn (the fp32 flash rung: ~5 s a variant). Returns the workers' futures: wait for them before timing anything.
    A launch that fails in a worker is left for this process to meet, and report, where it runs that rung."""
    if not WORLD.gpu or problem.compile_shape is None:
        return []
    shapes = dict.fromkeys(problem.compile_shape(s) for s in [*problem.check_shapes, *problem.bench_shapes])
    labels = [r.label for r in problem.rungs if r.backend != "torch" and not r.searches and unavailable(r) is None]
    if not labels:
        return []
    pool = ProcessPoolExecutor(COMPILE_WORKERS, mp_context=multiprocessing.get_context("spawn"))
    pending = [pool.submit(_compile_variant, problem.name, label, shape) for label in labels for shape in shapes]
    pool.shutdown(wait=False)  # the workers exit when the last variant is compiled
    return pending


def _compile_variant(problem_name: str, label: str, shape: tuple) -> None:
    """In a worker process: one launch of the rung `label` at `shape`, for what it compiles."""
    problem = problems.get(problem_name)
    rung = problem.rung(*label.split(":", 1))
    try:
        rung.run(*problem.make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(0)))
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 -- this process does not report: the lesson's own launch will
        pass


def check_rung(problem: Problem, rung: Rung, shapes: list[tuple] | None = None, seed: int = 0):
    """[(shape, CheckResult)] on fresh random inputs for each shape, output poisoned first."""
    where = device()
    if shapes is None:
        shapes = problem.check_shapes if WORLD.gpu else problem.interpret_shapes
    report = []
    for i, shape in enumerate(shapes):
        gen = torch.Generator(where).manual_seed(seed + i)
        inputs = problem.make_inputs(shape, where, gen)
        report.append((shape, check(rung.run, inputs, problem.new_output(shape, where),
                                    problem.reference(*inputs))))
    return report


def format_checks(problem: Problem, rungs: list[Rung] | None = None) -> str:
    """One line per rung: all shapes ok, or the first failure (deterministic text for nbval); under emulation
    the first line says what the checks were run on."""
    gpu = detect()
    lines = [gpu.emulation_note] if gpu is not None and gpu.emulated_on else []
    for rung in rungs or problem.rungs:
        reason = unavailable(rung)
        if reason:
            lines.append(f"{rung.label:22s} not run: {reason}")
            continue
        try:
            report = check_rung(problem, rung)
        except RuntimeError as e:
            if rung.backend != ANCHOR_BACKEND:   # ours: a crash is a bug, shown as one
                raise
            # PyTorch's library rung refuses a check shape ("No available kernel": SDPA's cuDNN backward at a
            # ragged S): it is a yardstick, not under test; say so, and check the rest of the ladder
            lines.append(f"{rung.label:22s} not run: PyTorch refused a check shape ({str(e).splitlines()[0][:80]})")
            continue
        bad = [(s, r) for s, r in report if not r.ok]
        shapes = ", ".join(str(s[0] if len(s) == 1 else s) for s, _ in report)
        note = rung.fallback_note(gpu) if WORLD.gpu else None
        lines.append(f"{rung.label:22s} " + (f"correct on shapes {shapes}" if not bad
                                              else f"WRONG at {bad[0][0]}: {bad[0][1]}")
                     + (f" [{note}]" if note else ""))
    return "\n".join(lines)


def shapes_for(problem: Problem, rung: Rung) -> list[tuple]:
    """The benchmark shapes, then (unless the rung is slow) the size sweep's others."""
    sweep = [] if rung.slow else [s for s in problem.sweep_shapes if s not in problem.bench_shapes]
    return list(problem.bench_shapes) + sweep


def time_rung(problem: Problem, rung: Rung, shape: tuple, gen_seed: int = 1) -> dict:
    """Check at `shape`, then time; one `runs` row."""
    gen = torch.Generator("cuda").manual_seed(gen_seed)
    inputs = problem.make_inputs(shape, "cuda", gen)
    out = problem.new_output(shape, "cuda")
    verdict: CheckResult = check(rung.run, inputs, out, problem.reference(*inputs))
    timing = bench(rung.timed_call(inputs, out), warmed=True)  # the check compiled it
    row = {"problem": problem.name, "backend": rung.backend, "rung": rung.name, "shape": list(shape),
           "ms": timing.median_ms, "ms_p20": timing.p20_ms, "ms_p80": timing.p80_ms,
           **rates(problem.flops(shape), problem.min_bytes(shape), timing.median_ms),
           "correct": verdict.ok, "rel_error": verdict.rel_error}
    return {**row, **pass_field(rung)}


def pass_field(rung: Rung) -> dict:
    """What a recorded row of `rung` says of the PTX pass that compiled it: a Triton rung's {"ptx_pass": its
    Rung.ptx_pass() (the pass's name and content hash, and what it changed at the rung's last launch in this
    process), or None where the rung runs what Triton compiles}; {} for the other backends (no PTX of ours)."""
    return {"ptx_pass": rung.ptx_pass() if rung.ptx_pass else None} if rung.backend == "triton" else {}


@dataclass
class Results:
    """Runs of one or more problems, with the ceilings they are measured against."""
    rows: list[dict]
    ceilings: dict
    datasheet: dict | None
    gpu: str
    label: str   # "live on <GPU>" or "recorded on <GPU>, <date>"

    def table(self, problem: str | None = None) -> str:
        head = f"{'rung':22s} {'shape':>12s} {'ms':>8s} {'p20-p80 ms':>15s} {'TB/s':>5s} {'% copy':>6s} {'TFLOP/s':>7s}  check"
        lines = [f"{self.label}; copy ceiling {self.ceilings['copy_TBps']:.2f} TB/s", head]
        for r in self.rows:
            if problem and r["problem"] != problem:
                continue
            shape = "x".join(str(d) for d in r["shape"])
            pct = 100 * r["tbps"] / self.ceilings["copy_TBps"]
            lines.append(f"{r['backend'] + ':' + r['rung']:22s} {shape:>12s} {r['ms']:8.4f} "
                         f"{r['ms_p20']:7.4f}-{r['ms_p80']:<7.4f} {r['tbps']:5.2f} {pct:6.1f} {r['tflops']:7.2f}  "
                         f"{'ok' if r['correct'] else 'WRONG'}")
        return "\n".join(lines)


def measure_live(problem_list: list[Problem], progress: bool = True, shapes: list[tuple] | None = None,
                 tune: bool = True) -> tuple[Results, dict]:
    """Check and time every runnable rung of each problem on this GPU for a recording (`ladder record`): the
    results and the raw record. Refused under emulation (NotAvailable): its timings are not the emulated GPU's.

    `shapes` replaces the benchmark shapes and the sweep; `tune=False` skips the autotuning searches
    (the autotuned rungs then use what is cached or recorded for this GPU).
    """
    require_real("Recording")
    return _measure(problem_list, progress, shapes, tune)


def _measure(problem_list: list[Problem], progress: bool, shapes: list[tuple] | None,
             tune: bool) -> tuple[Results, dict]:
    gpu = detect()
    ceil = ceilings_mod.measure(gpu, refresh=True)
    rows, skipped, tuned, measured = [], [], [], {}
    for problem in problem_list:
        runnable = [r.label for r in problem.rungs if unavailable(r) is None]
        if tune and problem.tune:  # searches first, so the autotuned rungs run their winners
            tuned += [report.as_dict() for report in problem.tune(runnable)]
        if problem.measure:  # before the timings: what it allocates is not held beside the timed inputs
            for kind, found in problem.measure(runnable).items():
                measured.setdefault(kind, []).extend(found)
    jobs = [(p, r, s) for p in problem_list for r in p.rungs for s in (shapes or shapes_for(p, r))]
    for problem, rung, shape in tqdm(jobs, desc="timing rungs", disable=not progress):
        reason = unavailable(rung)
        if reason:
            skipped.append({"problem": problem.name, "backend": rung.backend, "rung": rung.name, "reason": reason})
            continue
        reason = rung.unavailable_at(shape) if rung.unavailable_at else None
        if reason:
            skipped.append({"problem": problem.name, "backend": rung.backend, "rung": rung.name, "shape": list(shape),
                            "reason": reason})
            continue
        rows.append(time_rung(problem, rung, shape))
    sheet = ceilings_mod.datasheet_ceilings(gpu.datasheet)
    record = {"provenance": results_mod.provenance(gpu), "gpu": gpu.as_dict(), "datasheet": sheet,
              "ceilings": ceil, "runs": rows, "not_run": skipped, "autotune": tuned, **measured}
    return Results(rows, ceil, sheet, gpu.name, f"live on {gpu.emulation_note or gpu.name}"), record


def results(problem: Problem, shapes: list[tuple] | None = None, tune: bool = True) -> Results:
    """Live measurements on a GPU (at `shapes` if given; labelled as emulated under emulation); the recorded
    ones (labelled so) without."""
    if WORLD.gpu:
        return _measure([problem], progress=False, shapes=shapes, tune=tune)[0]
    rec = results_mod.load()
    labels = {r.label for r in problem.rungs}
    runs = [r for r in rec.runs(problem.name) if f"{r['backend']}:{r['rung']}" in labels]
    return Results(runs, rec.ceilings, rec.data.get("datasheet"), rec.gpu, rec.label)
