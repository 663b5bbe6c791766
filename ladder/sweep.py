"""The shape sweep that fills ladder.dispatch's table: every candidate kernel checked and timed at each shape.

    python -m ladder sweep [--model] [--grid] [--shape MxNxK ..] [--search]

At each shape the sweep runs every candidate once on the same inputs (all outputs kept until each is checked
against the float64 product, so none can pass on a result another left in its memory), then times the correct
ones with ladder.timing.bench (L2 flushed before every run, the median kept), one after the other in one run:
  torch:cublas             torch.matmul, the anchor
  triton:6_autotuned       rung 6 through ladder.ops.matmul, in the configuration the op's own rule gives it (the
                           nearest search winner; with --search, a search at this shape first)
  triton:7_tma_persistent  (TMA, sm_90) rung 6 with its tiles loaded by TMA descriptors, its one configuration
  cuda:12_autotuned        (wgmma, sm_90) CUDA C++ rung 12 in the nearest searched configuration (--search: its own)
Its rows go to results/<gpu>.json under "shape_sweep" (the rows at other shapes, and every other kind, kept), the
table to <cache>/dispatch-<gpu>.json (the cache directory of ladder.autotune: ~/.cache/kernel-ladder or
$KERNEL_LADDER_CACHE), over the entries of an earlier valid table at other shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from kernels import matmul as km
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import autotune, ops, problems, profile, results
from ladder.runtime import cache, hardware
from ladder.check import compare
from ladder.dispatch import (CUBLAS, RUNG6, RUNG7, RUNG12, DispatchTable, cache_path, shape_line, shape_text, suspended,
                             times_cublas, update)
from ladder.runtime.errors import NotAvailable
from ladder.timing import bench, rates
from ladder.runtime.world import device, require_gpu


@dataclass(frozen=True)
class Candidate:
    label: str
    run: Callable                                 # run(a, b) -> a @ b
    config: Callable[[tuple], dict | None]        # config(shape): the configuration it runs there
    search: Callable[[tuple], object] | None = None   # search(shape): its search there (`--search`)


def candidates(gpu) -> list[Candidate]:
    """What the sweep times on `gpu`, cuBLAS first: rung 6 where the op runs it (sm_80 on), rungs 7 and 12 where
    the GPU has what they need."""
    problem = problems.get("matmul")

    def rung(label: str):
        return problem.rung(*label.split(":"))
    found = [Candidate(CUBLAS, rung(CUBLAS).run, lambda shape: None)]
    if ops.choose("matmul", gpu).kernel == RUNG6:
        found.append(Candidate(RUNG6, lambda a, b: ops.matmul(a, b), lambda shape: ops.matmul_choice(*shape).config,
                               lambda shape: triton_search.tune([shape])))
    if rung(RUNG7).unavailable_reason(gpu) is None:
        found.append(Candidate(RUNG7, rung(RUNG7).run, lambda shape: tm.TMA_PERSISTENT))
    if rung(RUNG12).unavailable_reason(gpu) is None:
        found.append(Candidate(RUNG12, rung(RUNG12).run, km.HOPPER_TUNER.best,
                               lambda shape: km.tune([shape], km.HOPPER_TUNER)))
    return found


def measure(shape: tuple, name: str, chosen: list[Candidate], seed: int = 0) -> list[dict]:
    """One "shape_sweep" row per candidate at `shape`: checked against float64, then timed if correct."""
    problem = problems.get("matmul")
    a, b = problem.make_inputs(shape, device(), torch.Generator(device()).manual_seed(seed))
    reference = problem.reference(a, b)
    outputs: dict[str, torch.Tensor] = {}
    # every first call (it may compile) before any check, each output kept: no two share memory
    errors = {c.label: autotune._error(lambda: outputs.__setitem__(c.label, c.run(a, b))) for c in chosen}
    rows = []
    for c in chosen:
        backend, rung = c.label.split(":")
        row = {"problem": "matmul", "backend": backend, "rung": rung, "shape": list(shape), "name": name,
               "config": c.config(shape)}
        if errors[c.label]:
            rows.append({**row, "correct": False, "error": errors[c.label]})
            continue
        verdict = compare(outputs.pop(c.label), reference)
        if not verdict.ok:
            rows.append({**row, "correct": False, "rel_error": verdict.rel_error})
            continue
        timing = bench(lambda: c.run(a, b), warmed=True)
        rows.append({**row, "ms": timing.median_ms, "ms_p20": timing.p20_ms, "ms_p80": timing.p80_ms,
                     **rates(problem.flops(shape), problem.min_bytes(shape), timing.median_ms),
                     "correct": True, "rel_error": verdict.rel_error})
    return rows


def record(rows: list[dict], gpu) -> Path | None:
    """The rows merged into `gpu`'s recording under "shape_sweep" (ladder.results.merge: rows at other shapes,
    and every other kind of row, kept); None where this GPU has no recording yet (`python -m ladder record`)."""
    if cache.FRESH_GPU or not results.path_for(gpu.slug).exists():
        return None
    old = results.load(gpu.slug).data
    return results.save(results.merge(old, {**results.fresh_record(old, gpu), "shape_sweep": rows}))


@dataclass(frozen=True)
class Swept:
    rows: list[dict]
    table: Path
    recording: Path | None   # None: no recording of this GPU to add the rows to


def _gpu_for_sweep():
    require_gpu("`sweep` (it times every candidate kernel at each shape)")
    hardware.require_real("Recording a shape sweep")
    return hardware.detect()


def _save(rows: list[dict], gpu) -> tuple[Path, Path | None]:
    """The table of `rows` over the earlier table's other shapes, written; the rows recorded (see `record`)."""
    update(gpu, DispatchTable.from_rows({}, rows).entries.values())
    return cache_path(gpu.slug), record(rows, gpu)


def sweep(shapes: dict[tuple, str], search: bool = False, chosen: list[Candidate] | None = None,
          say: Callable[[str], None] = print) -> Swept:
    """Check and time `chosen` (default: `candidates` of this GPU) at each of `shapes` ({shape: name}); with
    `search`, each candidate's search at the shape first. After each shape the table and the recording are
    written (a sweep cut short keeps the shapes it finished); the op uses the new table from its next call."""
    gpu = _gpu_for_sweep()
    chosen = candidates(gpu) if chosen is None else chosen
    if all(c.label == CUBLAS for c in chosen):
        raise NotAvailable(f"on {gpu.name} ladder.ops.matmul runs torch.matmul at every shape: nothing to choose")
    say(f"{len(shapes)} shapes x {len(chosen)} candidates ({', '.join(c.label for c in chosen)}) on {gpu.name}")
    rows = []
    with suspended():
        for shape, name in shapes.items():
            for c in chosen:
                if search and c.search:
                    c.search(shape)
            measured = measure(shape, name, chosen)
            say(shape_line(measured))
            rows += measured
            table, recording = _save(rows, gpu)
    return Swept(rows, table, recording)


def record_warp_states(shapes: dict[tuple, str], say: Callable[[str], None] = print) -> Path:
    """Nsight Compute's warp states (ladder.profile.warp_states) of cuBLAS and of our fastest rung at each of
    `shapes`, as this GPU's recorded sweep timed them, added to its recording under "warp_states" at that shape:
    the counters that say why a rung of ours trails cuBLAS there. No timing runs."""
    gpu = _gpu_for_sweep()
    old = results.load(gpu.slug).data
    fastest = times_cublas(old.get("shape_sweep", []))
    rows = []
    for shape, name in shapes.items():
        if shape not in fastest:
            say(f"{name} {shape_text(shape)}: not swept on this GPU: `python -m ladder sweep --shape {shape_text(shape)}` first")
            continue
        for label in (CUBLAS, fastest[shape][0]):
            backend, rung = label.split(":")
            rows.append({"problem": "matmul", "backend": backend, "rung": rung, "shape": list(shape),
                         "metrics": profile.warp_states("matmul", backend, rung, shape)})
            say(f"{name} {shape_text(shape)} {label}: " + ", ".join(
                f"{r} {v:.2g}" for r, v in profile.top_stalls(rows[-1]["metrics"])))
    return results.save(results.merge(old, {**results.fresh_record(old, gpu), "warp_states": rows}))
