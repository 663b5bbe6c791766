"""python -m ladder COMMAND

  info                 this machine: world, GPU, datasheet, measured (or recorded) ceilings
  compare [GPU..]      recordings side by side (default: every results/*.json): ceilings, and
                       the top rungs against cuBLAS / SDPA timed in the same run
  results-page         write RESULTS.md from results/*.json: per recorded GPU its provenance, ceilings and
                       each rung's ms, TFLOP/s and × the library at the headline shapes; --check writes
                       nothing and exits 1 if RESULTS.md is stale
  lab [JUPYTER ARGS..] JupyterLab on the repository root, opened at the first lesson
  record [PROBLEM..]   check and time every rung on this GPU, profile with ncu if present,
                       write results/<gpu>.json (rows of the rungs not run this time are kept);
                       `record capstone`: lesson 05's model, profiled and timed end to end
                       `record models`: lesson 05's model and one of its blocks, forward and training step,
                       six ways (eager, compile, CUDA graph; each with and without ladder.ops)
  notebooks [PATH..]   execute notebooks in place, outputs saved (default: every lesson,
                       exercise and solution); outputs recorded on a GPU are kept from a
                       CPU run unless --force
  exercises            list the assignments: id, title, points, the exercise notebook and whether
                       it holds answers
  make-exercises [ID..] write exercises/*.ipynb from solutions/*.ipynb (run unanswered: the checkers'
                       outputs are what a student first sees), and every notebook's Colab badge and
                       set-up cell (ladder.colab); an exercise that holds answers is kept (--force
                       overwrites it); --check writes nothing and fails if an exercise is stale
  grade NOTEBOOK..     execute students' exercise notebooks (errors and all) and print a score
                       per graded task, with the checker's feedback (nbgrader's scoring rule); the
                       assignment is the one the notebook's metadata names, whatever its file name
  sweep [--model] [--grid] [--shape MxNxK..] [--search]   time our matmul rungs and cuBLAS at the model's shapes
                       and 2048³ (--model), a grid of 27 shapes from 256 to 8192 (--grid), the shapes given
                       (none of these: the model's and the grid): fills this GPU's dispatch table (which
                       kernel ladder.ops.matmul runs per shape) and records the rows; --search runs rung 6's
                       and rung 12's searches at each shape first
  profile PROBLEM BACKEND RUNG SIZE..   Nsight Compute counters for one rung
  run-once PROBLEM BACKEND RUNG SIZE..  run a rung once (the target `profile` runs under ncu)
  issue PROBLEM SIZE.. --rungs B:R ..  each rung's instructions, issue rate and occupancy (ncu) [--record]
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import os
import re
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ladder import autotune, ceilings, colab, dispatch, problems as problems_mod, profile
from ladder.runtime import hardware
from ladder import results as results_mod, runner, sweep
from ladder.capstone import decision, endtoend, whole_model
from ladder.runtime.errors import NotAvailable
from ladder.exercises import notebooks as exercise_notebooks
from ladder.exercises.notebooks import execute
from ladder.runtime.world import WORLD, require_gpu

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("notebooks", "solutions", "exercises")
FIRST_LESSON = "notebooks/00_roofline.ipynb"


def cmd_info(args) -> None:
    print(f"world: {WORLD.name}")
    gpu = hardware.detect()
    print(hardware.describe(gpu))
    if gpu:
        c = ceilings.measure(gpu, refresh=args.refresh)
        print("measured: " + ", ".join(f"{k} {v:.2f}" for k, v in c.items()))
    else:
        rec = results_mod.load()
        print(f"ceilings {rec.label}: " + ", ".join(f"{k} {v:.2f}" for k, v in rec.ceilings.items()))


def cmd_compare(args) -> None:
    print(results_mod.side_by_side(args.gpus or None))


def cmd_results_page(args) -> int:
    from ladder import results_page
    if args.check:
        if results_page.stale():
            print(f"{results_page.PAGE.name} is stale: run `python -m ladder results-page`", file=sys.stderr)
            return 1
        print(f"{results_page.PAGE.name} is up to date")
        return 0
    print(f"wrote {results_page.write()}")
    return 0


def cmd_lab(args) -> None:
    """JupyterLab with the repository as its root (lessons, exercises and solutions all reachable), opened
    at the first lesson. Jupyter refuses to run as root unless told: containers and lab images often are."""
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={ROOT}",
               f"--LabApp.default_url=/lab/tree/{FIRST_LESSON}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        print("running as root (a container?): starting JupyterLab with --allow-root", flush=True)
        command.append("--allow-root")
    os.execv(sys.executable, command + args.jupyter_args)


CAPSTONE = "capstone"   # `record capstone`: lesson 05's model, not a problem with rungs
MODELS = "models"       # `record models`: whole models six ways, forward and training (ladder.capstone.whole_model)


def record_capstone(model: str = "gpt2-small") -> Path:
    """Lesson 05's row: the model's profile shares, the four end-to-end variants, the ops alone and the
    swapped ops, all in one run on this GPU, with the ceilings measured in it; merged into the recording."""
    require_gpu("`record capstone` (it profiles and times a model end to end)")
    hardware.require_real("Recording")
    gpu = hardware.detect()
    path = results_mod.path_for(gpu.slug)
    old = results_mod.load(gpu.slug).data if path.exists() else None
    measured = ceilings.measure(gpu, refresh=True)
    record = results_mod.fresh_record(old, gpu) if old else {
        "provenance": results_mod.provenance(gpu), "gpu": gpu.as_dict(),
        "datasheet": ceilings.datasheet_ceilings(gpu.datasheet), "ceilings": measured}
    row = endtoend.measure(model, ceilings=measured)
    if profile.available():  # the lesson's Nsight Compute section, as text for readers without ncu
        row["ncu"] = decision.hottest_op_ncu(model)
    record["capstone"] = [{**row, "recorded": record["provenance"]["date"]}]
    print(endtoend.variant_table(row))
    return results_mod.save(results_mod.merge(old, record))


def record_models() -> Path:
    """The "model" rows: each of whole_model.MODELS, forward and training step, six ways, in one run on this GPU;
    merged into the recording (rows of the same model, variant and step replaced)."""
    require_gpu("`record models` (it times whole models six ways)")
    hardware.require_real("Recording")
    gpu = hardware.detect()
    path = results_mod.path_for(gpu.slug)
    if not path.exists():
        raise SystemExit("`record models` adds to this GPU's recording: `python -m ladder record` first")
    old = results_mod.load(gpu.slug).data
    record = results_mod.fresh_record(old, gpu)
    record["model"] = []
    for name in whole_model.MODELS:
        for step in whole_model.STEPS:
            rows = whole_model.measure(name, step)
            print(f"{name}, {step}:\n{whole_model.table(rows)}")
            record["model"] += [{**r, "recorded": record["provenance"]["date"]} for r in rows]
            saved = results_mod.save(results_mod.merge(old, record))   # kept as each is measured
    return saved


DEFAULT_BACKENDS = ("cuda", "triton", "torch")


def cmd_record(args) -> None:
    for alone, record_it in ((CAPSTONE, record_capstone), (MODELS, record_models)):
        if alone in args.problems:
            if len(args.problems) > 1:
                raise problems_mod.UnknownName(f"record {alone} runs alone (it is a model, not a problem); record "
                                               f"{' '.join(n for n in args.problems if n != alone)} separately")
            start = time.time()
            print(f"wrote {record_it()} in {time.time() - start:.0f} s")
            return
    chosen = [problems_mod.get(n) for n in args.problems] if args.problems else list(problems_mod.problems().values())
    known = {name for p in chosen for r in p.rungs for name in (r.backend, r.label)}
    # the default names every backend: a problem without CUDA rungs (attention_backward) is no mistake
    unknown = [b for b in args.backends if b not in known and (args.backends_given or b not in DEFAULT_BACKENDS)]
    if unknown:
        raise problems_mod.UnknownName(f"no backend or rung {', '.join(unknown)} in {', '.join(p.name for p in chosen)}; "
                                       f"backends: {', '.join(sorted({r.backend for p in chosen for r in p.rungs}))}")
    # the anchors (cuBLAS, SDPA: the torch rungs) are timed again beside any rungs re-recorded, so each
    # rung's "% of cuBLAS" compares two timings of one run
    chosen = [p.only(*args.backends, results_mod.ANCHOR_BACKEND) for p in chosen]
    require_gpu("`record` (it checks, times and profiles every rung)")
    start = time.time()
    old = results_mod.path_for(hardware.detect().slug)
    old = results_mod.load(old.stem).data if old.exists() else None
    if args.warp_states_only:
        args.no_time = True
    if args.no_time:
        if old is None:
            raise SystemExit("--no-time needs an earlier recording for this GPU to add profiles to")
        record = results_mod.fresh_record(old, hardware.detect())
    else:
        res, record = runner.measure_live(chosen)
    if profile.available() and not args.no_profile:
        torch.cuda.empty_cache()   # what the timing cached goes back: each profile runs in a process of its own
        jobs = [(p, r, s) for p in chosen for r in p.rungs if not runner.unavailable(r)
                for s in (p.bench_shapes if args.every_shape else p.bench_shapes[:1])]
        measure = (lambda *job: (None, profile.warp_states(*job))) if args.warp_states_only else \
            profile.profile_and_warp_states
        with ThreadPoolExecutor(args.jobs) as pool:  # each job is an ncu process; ncu profiles one kernel at a time
            found = list(tqdm(pool.map(lambda job: measure(job[0].name, job[1].backend, job[1].name, job[2]), jobs),
                              total=len(jobs), desc="ncu"))
        profiled = {p.name: list(p.bench_shapes[0]) for p in chosen}
        for kind, index in (("profiles", 0), ("warp_states", 1)):
            rows = [{"problem": p.name, "backend": r.backend, "rung": r.name, "shape": list(shape),
                     "metrics": metrics[index],
                     **runner.pass_field(r)}   # profiled in a process of its own: the pass, not what it changed there
                    for (p, r, shape), metrics in zip(jobs, found) if metrics[index] is not None]
            if kind == "profiles":  # one a rung at its problem's profiled shape; the other shapes' apart
                if args.warp_states_only:
                    continue
                record["shape_profiles"] = [x for x in rows if x["shape"] != profiled[x["problem"]]]
                rows = [x for x in rows if x["shape"] == profiled[x["problem"]]]
            record[kind] = rows
    if not args.no_time:
        print(res.table())
    print(f"wrote {results_mod.save(results_mod.merge(old, record))} in {time.time() - start:.0f} s")


def _shape(text: str) -> tuple:
    """'8192x768x3072' -> (8192, 768, 3072)."""
    sizes = text.lower().split("x")
    if len(sizes) != 3 or not all(s.isdigit() and int(s) > 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r} is no MxNxK shape (three positive sizes, e.g. 8192x768x3072)")
    return tuple(map(int, sizes))


def cmd_sweep(args) -> None:
    start = time.time()
    shapes = dispatch.shapes_to_sweep(args.model, args.grid, args.shape)
    if args.warp_states_only:
        print(f"wrote {sweep.record_warp_states(shapes)} in {time.time() - start:.0f} s")
        return
    swept = sweep.sweep(shapes, search=args.search)
    print("\n".join(dispatch.goals(swept.rows)))
    print(f"wrote {swept.table}" + (f" and {swept.recording}" if swept.recording else
                                    " (no recording of this GPU to add the rows to: `python -m ladder record` first)")
          + f" in {time.time() - start:.0f} s")


_GPU_WORLD = re.compile(r"GPU \(.+?\)")


def executed_on(nb) -> str | None:
    """The world a notebook's saved outputs come from: its metadata (set by `ladder notebooks`), else the
    "GPU (<name>)" world line a lesson prints; None when neither says."""
    if "kernel_ladder" in nb.metadata:
        return nb.metadata["kernel_ladder"]["world"]
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            found = _GPU_WORLD.search(out.get("text", ""))
            if found:
                return found.group(0)
    return None


def cmd_notebooks(args) -> None:
    import nbformat   # deferred: 1.4 s to import, and only these commands read notebooks
    paths = [Path(p) for p in args.paths] or [p for d in NOTEBOOK_DIRS for p in sorted((ROOT / d).glob("*.ipynb"))]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    if not WORLD.gpu and not args.force:  # a CPU run would replace real measurements by recorded ones
        worlds = {p: executed_on(nbformat.read(p, as_version=4)) for p in paths}
        on_gpu = {p: w for p, w in worlds.items() if w and w.startswith("GPU")}
        if on_gpu:
            raise NotAvailable(f"the outputs saved in {len(on_gpu)} of these notebooks ({', '.join(f'{p.parent.name}/{p.stem}' for p in on_gpu)}) "
                               f"were measured on a {' / '.join(sorted(set(on_gpu.values())))}; a CPU run would replace "
                               "them with recorded numbers, so nothing was run (--force to run anyway)")
    for path in tqdm(paths, desc="notebooks"):
        nb = nbformat.read(path, as_version=4)
        start = last = time.time()

        def cell_time(cell, cell_index, **_):  # where a notebook spends its minutes, printed as it goes
            nonlocal last
            first = next((line for line in cell.source.splitlines() if not line.startswith("#")), "")
            tqdm.write(f"  cell {cell_index:3d}: {time.time() - last:6.1f} s  {first[:60]}")
            last = time.time()

        execute(nb, path, args.timeout, on_cell_executed=cell_time if args.cell_times else None)
        nb.metadata["kernel_ladder"] = {"world": WORLD.name}
        nbformat.write(nb, path)
        tqdm.write(f"{path}: {time.time() - start:.0f} s")


def cmd_exercises(args) -> None:
    import nbformat   # deferred: 1.4 s to import, and only these commands read notebooks
    print(f"{'id':30s} {'points':>6s}  {'exercise':56s} title")
    for sol in sorted(exercise_notebooks.SOLUTIONS.glob("*.ipynb")):
        solution = nbformat.read(sol, as_version=4)
        points = sum(c.metadata["nbgrader"]["points"] for c in solution.cells if exercise_notebooks.is_graded(c))
        title = solution.cells[0].source.splitlines()[0].lstrip("# ").split(" — ", 1)[-1]
        exercise = exercise_notebooks.EXERCISES / sol.name
        answered = exercise_notebooks.answered_cells(nbformat.read(exercise, as_version=4), solution) \
            if exercise.exists() else []
        state = "missing" if not exercise.exists() else f"{len(answered)} answered" if answered else "blank"
        print(f"{sol.stem:30s} {points:6g}  {str(exercise.relative_to(ROOT)) + ' (' + state + ')':56s} {title}")
    print("grade one: python -m ladder grade NOTEBOOK; write them from solutions/: python -m ladder make-exercises")


def cmd_make_exercises(args) -> int:
    made = exercise_notebooks.make_exercises(lambda nb, path: execute(nb, path, args.timeout),
                                             force=args.force, check=args.check, only=args.names)
    for m in made:
        shown = m.path.relative_to(ROOT) if m.path.is_relative_to(ROOT) else m.path
        print(f"{m.status:8s} {shown}" + (f": {m.detail}" if m.detail else ""))
    if args.check:
        stale = [m for m in made if m.status == "stale"]
        if stale:
            print(f"{len(stale)} exercise(s) stale: run `python -m ladder make-exercises`", file=sys.stderr)
        return 1 if stale else 0
    for path in colab.write_setup_cells():
        print(f"Colab badge and set-up cell: {path.relative_to(ROOT)}")
    kept = [m for m in made if m.status == "kept"]
    if kept:
        print(f"{len(kept)} exercise(s) hold answers and were kept; --force overwrites them", file=sys.stderr)
        return 1
    return 0


def cmd_grade(args) -> int:
    failed = 0
    for path in args.paths:
        try:
            print(exercise_notebooks.grade(Path(path), args.timeout).table(), flush=True)
        except exercise_notebooks.NotAnAssignment as e:
            print(e, file=sys.stderr, flush=True)
            failed += 1
    return 2 if failed else 0


def cmd_run_once(args) -> None:
    require_gpu("run-once")
    autotune.pin_recorded_winners()  # profile what `record` timed, not a search run under ncu
    problem = problems_mod.get(args.problem)
    rung = problem.rung(args.backend, args.rung)
    shape = tuple(args.size)
    inputs = problem.make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(0))
    out = problem.new_output(shape, "cuda")
    profile.profiled_once(rung.timed_call(inputs, out))


def cmd_profile(args) -> None:
    problem = problems_mod.get(args.problem)
    problem.rung(args.backend, args.rung)  # an unknown rung is named here, not by ncu's child process
    require_gpu("`profile` (Nsight Compute)")
    shape = tuple(args.size)
    metrics = profile.profile(args.problem, args.backend, args.rung, shape)
    for k, v in metrics.items():
        print(f"{k:28s} {v}")
    print(profile.summary(metrics, shape, problem.min_bytes(shape)))


def cmd_issue(args) -> None:
    """Each rung's instructions, issue rate and occupancy at one shape, from one ncu run each (profile.ISSUE)."""
    problem = problems_mod.get(args.problem)
    rungs = [label.split(":", 1) for label in args.rungs]
    for label, named in zip(args.rungs, rungs):
        if len(named) != 2:
            raise problems_mod.UnknownName(f"{label!r}: name each rung as backend:rung (e.g. triton:3_tiled)")
    for backend, rung in rungs:
        problem.rung(backend, rung)   # an unknown rung is named here, not by ncu's child process
    require_gpu("`issue` (Nsight Compute)")
    if args.record:
        hardware.require_real("Recording")
    shape = tuple(args.size)
    rows = []
    for backend, rung in rungs:
        try:
            counted = profile.profile(args.problem, backend, rung, shape, profile.ISSUE)
        except RuntimeError as e:   # one rung ncu cannot count: the others still are
            print(f"left out: {backend}:{rung}: {e}", file=sys.stderr)
            continue
        rows.append({"problem": args.problem, "backend": backend, "rung": rung, "shape": list(shape),
                     **{k: v for k, v in counted.items() if k not in ("kernels", "kernel_ns")}})
    if args.record:
        print(results_mod.add_rows(hardware.detect(), "issue", rows))
    print(profile.issue_table(rows, f"{args.problem} {'x'.join(map(str, shape))}, on {hardware.detect().name}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ladder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info")
    p.add_argument("--refresh", action="store_true", help="measure the ceilings again")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("compare", help="recordings side by side: ceilings and the top rungs against their anchors")
    p.add_argument("gpus", nargs="*", help="recording names (results/<name>.json), e.g. nvidia-h200")
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("results-page", help="write RESULTS.md from results/*.json")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if RESULTS.md is stale")
    p.set_defaults(fn=cmd_results_page)
    sub.add_parser("lab", help="JupyterLab on the repository root; other arguments go to JupyterLab "
                               "(e.g. --no-browser --port 8890)").set_defaults(fn=cmd_lab)
    p = sub.add_parser("record")
    p.add_argument("problems", nargs="*")
    p.add_argument("--no-profile", action="store_true", help="no ncu profiles")
    p.add_argument("--no-time", action="store_true", help="profiles only, added to the recording")
    p.add_argument("--warp-states-only", action="store_true",
                   help="ncu's warp states (stall reasons, occupancy) only, added to the recording")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="ncu processes at once (their start-ups overlap; ncu profiles one kernel at a time)")
    p.add_argument("--every-shape", action="store_true",
                   help="profiles and warp states at every headline shape, not only the profiled one (choose the "
                        "rungs with --backends)")
    p.add_argument("--backends", nargs="+", default=None,
                   help="record only these backends' rungs, or these rungs (e.g. triton:6_autotuned torch); "
                        "the others' recorded rows are kept")
    p.set_defaults(fn=cmd_record)
    p = sub.add_parser("notebooks")
    p.add_argument("paths", nargs="*")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--cell-times", action="store_true", help="print each cell's seconds as it finishes")
    p.add_argument("--force", action="store_true", help="on a CPU, overwrite outputs that were recorded on a GPU")
    p.set_defaults(fn=cmd_notebooks)
    sub.add_parser("exercises", help="list the assignments").set_defaults(fn=cmd_exercises)
    p = sub.add_parser("make-exercises", help="write exercises/ from solutions/ (never over answers unless --force)")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--force", action="store_true", help="overwrite exercises that hold answers")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if an exercise is stale")
    p.add_argument("names", nargs="*", help="only these assignments (e.g. 02 or 02_matmul_coalescing)")
    p.set_defaults(fn=cmd_make_exercises)
    p = sub.add_parser("grade", help="execute students' notebooks and score each graded task")
    p.add_argument("paths", nargs="+", metavar="NOTEBOOK")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    p.set_defaults(fn=cmd_grade)
    p = sub.add_parser("sweep", help="fill this GPU's dispatch table: our matmul rungs and cuBLAS, shape by shape")
    p.add_argument("--model", action="store_true", help="the model's five matmul shapes and 2048³")
    p.add_argument("--grid", action="store_true", help="27 shapes: 256, 1449 and 8192 as M, N and K")
    p.add_argument("--shape", nargs="+", default=[], type=_shape, metavar="MxNxK", help="these shapes (too)")
    p.add_argument("--search", action="store_true", help="search rung 6's and rung 12's configurations at each "
                                                         "shape first (tens of seconds a shape)")
    p.add_argument("--warp-states-only", action="store_true",
                   help="time nothing: ncu's warp states of cuBLAS and our fastest rung at each shape, as the "
                        "recorded sweep timed them, added to the recording")
    p.set_defaults(fn=cmd_sweep)
    p = sub.add_parser("issue", help="rungs' instructions, issue rate and occupancy at one shape (ncu)")
    p.add_argument("problem")
    p.add_argument("size", nargs="+", type=int)
    p.add_argument("--rungs", nargs="+", required=True, help="backend:rung each, e.g. triton:3_tiled")
    p.add_argument("--record", action="store_true", help="merge the rows into results/<gpu>.json")
    p.set_defaults(fn=cmd_issue)
    for name, fn in (("profile", cmd_profile), ("run-once", cmd_run_once)):
        p = sub.add_parser(name)
        for arg in ("problem", "backend", "rung"):
            p.add_argument(arg)
        p.add_argument("size", nargs="+", type=int)
        p.set_defaults(fn=fn)
    args, extra = parser.parse_known_args(argv)
    args.jupyter_args = extra
    if args.command == "record":
        args.backends_given = args.backends is not None
        args.backends = args.backends or list(DEFAULT_BACKENDS)
    if args.jupyter_args and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(args.jupyter_args)}")
    try:
        return args.fn(args) or 0
    except NotAvailable as e:
        print(f"not available here: {e}", file=sys.stderr)
        return 2
    except problems_mod.UnknownName as e:
        print(e, file=sys.stderr)
        return 2
