"""Recorded GPU runs: results/<gpu-slug>.json, one file per GPU, with provenance.

{"provenance": {gpu, driver, cuda, torch, triton, cupy, python, date, clocks},
 "gpu": {...}, "datasheet": {...}, "ceilings": {"copy_TBps", "l2_TBps", "fp32_TFLOPs", "cublas_TFLOPs",
     "mma_sync_TFLOPs", "wgmma_TFLOPs", "fp16_tc_TFLOPs" (the highest instruction roof)},
 "runs": [{"problem", "backend", "rung", "shape", "ms", "ms_p20", "ms_p80", "tflops", "tbps",
           "correct", "rel_error", "ptx_pass"?}] ("ptx_pass", Triton rows: the PTX pass of ours that compiled what was
           timed, {"name", "sha256", "dropped", "split"} (Rung.ptx_pass), or null; missing in rows recorded before the
           field was: none went through a pass, but attention's rung 7 might have (RUNG7_THROUGH_PASS)),
 "profiles": [{"problem", "backend", "rung", "shape", "metrics": {...}}] (ncu, one per rung at its problem's
   profiled shape), "shape_profiles": [the same] (at other shapes: `record --every-shape`),
 "warp_states": [{"problem", "backend", "rung", "shape", "metrics": {...}}] (ncu's stall reasons and occupancy),
 "autotune": [{"problem", "tuner", ...}], "power": [{"problem", "backend", "rung", "shape", "W", "MHz", ...}],
 "capstone": [{"model", "config", "ceilings", "variants", "profiles", "ops", "swaps", ...}] (lesson 05's model),
 "launch": [{"op", "shape", "call", "us", "anchor", "anchor_us", "ratio", "kernel_us", ...}] (host cost per call:
   ladder.ops against PyTorch's own op in the same run, `python -m ladder.launch --record`),
 "shape_sweep": [{"problem", "backend", "rung", "shape", "name", "config", "ms", ..., "correct"}] (each candidate of
   ladder.dispatch at the model's shapes and a grid, cuBLAS timed in the same run: `python -m ladder sweep`),
 "memory": [{"problem", "backend", "rung", "shape", "peak_bytes", ...}] (peak bytes allocated by a call, e.g.
   attention_backward's forward + backward per rung: Problem.measure),
 "model": [{"model", "variant", "step", "ms", "ms_p20", "ms_p80", "first_call_s", "rel_error", ...}] (a whole model
   six ways, forward and training step, in one run: `python -m ladder record models`, ladder.capstone.whole_model),
 "sessions": [{"date", "ceilings", "anchors": [runs rows of the torch backend], "note"?}]}

Every row says when it was recorded ("recorded": the date of its run). Each timed run is a session: the
ceilings measured in it and the anchors (the torch rows: cuBLAS, SDPA, ...) timed beside its rungs. A rung's
"% of cuBLAS" or "% of roof" is computed against its own session, never a later one's; a session whose
ceilings or anchors were not kept has None or [] there, and its "note" says why. The top-level "ceilings"
are the newest session's.
"""
from __future__ import annotations

import datetime
import json
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from ladder import ptx
from ladder.roofline import with_tensor_core_roof
from ladder.runtime import cache, hardware
from ladder.runtime.errors import NotAvailable


_HERE = Path(__file__).resolve().parent
# A clone (or an editable install) reads and records results/; a non-editable install reads the copy inside
# the package (pyproject.toml installs results/ as ladder.recorded).
RESULTS_DIR = (_HERE.parent / "results" if (_HERE.parent / "pyproject.toml").is_file() else _HERE / "recorded")
# The GPU whose recording the CPU world shows, when several are recorded: the one the lessons' committed outputs
# come from (their CHECK_OUTPUT cells print its counters).
PREFERRED = "nvidia-h100-80gb-hbm3"


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


def _nvidia_smi(fields: str) -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
        return [f.strip() for f in out.splitlines()[0].split(",")]
    except (OSError, IndexError, subprocess.SubprocessError):
        return []


def provenance(gpu) -> dict:
    smi = _nvidia_smi("driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit")
    keys = ["driver", "sm_clock_MHz", "max_sm_clock_MHz", "mem_clock_MHz", "power_limit_W"]
    return {
        "gpu": gpu.name, "slug": gpu.slug, "arch": gpu.arch,
        **dict(zip(keys, smi)),
        "cuda": torch.version.cuda, "torch": torch.__version__, "triton": _version("triton"),
        "cupy": _version("cupy"), "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def rung_label(row: dict) -> str:
    """A recorded row's rung as the lessons name it: "backend:rung"."""
    return f"{row['backend']}:{row['rung']}"


@dataclass
class Recording:
    path: Path
    data: dict

    @property
    def gpu(self) -> str:
        return self.data["provenance"]["gpu"]

    @property
    def label(self) -> str:
        return f"recorded on {self.gpu}"

    @property
    def ceilings(self) -> dict:
        return self.data["ceilings"]

    def runs(self, problem: str | None = None, **match) -> list[dict]:
        return [r for r in self.data.get("runs", [])
                if (problem is None or r["problem"] == problem)
                and all(r.get(k) == v for k, v in match.items())]

    def profiles(self, problem: str | None = None) -> list[dict]:
        return [p for p in self.data.get("profiles", []) if problem is None or p["problem"] == problem]

    def shape_profiles(self, problem: str | None = None) -> list[dict]:
        """ncu profiles at shapes other than the one each rung is profiled at (`record --every-shape`)."""
        return [p for p in self.data.get("shape_profiles", []) if problem is None or p["problem"] == problem]

    def warp_states(self, problem: str | None = None) -> list[dict]:
        """ncu's warp states (stall reasons, occupancy, launch) of each rung profiled: ladder.profile.warp_states."""
        return [p for p in self.data.get("warp_states", []) if problem is None or p["problem"] == problem]

    def session(self, row: dict) -> dict | None:
        """The session (ceilings and anchors of one run) that `row` was recorded in."""
        return session_of(self.data, row)

    def capstone(self, model: str = "gpt2-small") -> dict | None:
        """`record capstone`'s row for `model` (ladder.capstone.endtoend.measure), or None if not recorded."""
        return next((r for r in self.data.get("capstone", []) if r["model"] == model), None)

    def power(self, problem: str | None = None) -> list[dict]:
        """`python -m ladder.power --record`'s rows: speed, watts, clock, pJ/FLOP, GFLOP per clock."""
        return [p for p in self.data.get("power", []) if problem is None or p["problem"] == problem]


# From 2026-11-29 until Triton attention's rung 8 took the pass, rung 7 ("triton:7_tma") was compiled through
# ladder/ptx.py's pass by default, and its rows did not say so. The recordings kept in results/ have no such row
# (the H100's rung 7 rows are of 2026-11-27, as compiled: "ptx_pass": null there). A recording made elsewhere in
# that time is read with those rows marked as through the pass, its version unknown (at D64 the 4-warp winners gave
# it nothing to change): re-record them (`record attention --backends triton:7_tma triton:8_barrier_pass`). Its
# "autotune" reports of rung 7 are kept as rung 7's: the same kernel's tiles, valid as compiled (a search only
# orders its configurations by them, or, pinned, times that winner).
RUNG7_THROUGH_PASS = ("attention", "triton", "7_tma", "2026-11-29")


def _mark_rung7_through_pass(data: dict) -> dict:
    problem, backend, rung, since = RUNG7_THROUGH_PASS
    for kind in ("runs", "profiles", "shape_profiles", "warp_states"):
        for row in data.get(kind, []):
            if ((row.get("problem"), row.get("backend"), row.get("rung")) == (problem, backend, rung)
                    and "ptx_pass" not in row and row.get("recorded", "")[:10] >= since):
                row["ptx_pass"] = {"name": ptx.NAME, "sha256": None}
    return data


def path_for(slug: str) -> Path:
    return RESULTS_DIR / f"{slug}.json"


def load(slug: str | None = None) -> Recording:
    """The recording for `slug`; by default this GPU's, else the preferred GPU's, else any. Under
    KERNEL_LADDER_FRESH_GPU=1 the recording of the GPU this process runs on is absent (ladder.runtime.cache)."""
    hidden = _live_slug() if cache.FRESH_GPU else None
    if slug is not None and slug == hidden:
        raise NotAvailable(f"{slug}'s recording is ignored: {cache.FRESH_GPU_ENV}=1 makes this GPU a fresh one")
    files = [p for p in sorted(RESULTS_DIR.glob("*.json")) if p.stem != hidden]
    if slug is None:   # this GPU's own recording, else the one the lessons' committed outputs come from, else any
        found = [p for p in (path_for(s) for s in (_live_slug(), PREFERRED) if s) if p in files] or files
        path = found[0] if found else None
    else:
        path = path_for(slug)
    if path is None or not path.exists():
        raise NotAvailable(f"no recorded results {'for ' + slug + ' ' if slug else ''}in {RESULTS_DIR}")
    return Recording(path, _tensor_core_roofs(_mark_rung7_through_pass(json.loads(path.read_text()))))


def _tensor_core_roofs(data):
    """Every set of ceilings in a recording with the tensor-core roof an instruction's (roofline.with_tensor_core_roof):
    recordings written when it held cuBLAS's speed are read as today's."""
    if isinstance(data, dict):
        return {k: with_tensor_core_roof(v) if k == "ceilings" and isinstance(v, dict) else _tensor_core_roofs(v)
                for k, v in data.items()}
    return [_tensor_core_roofs(v) for v in data] if isinstance(data, list) else data


def _live_slug() -> str | None:
    gpu = hardware.detect()
    return gpu.slug if gpu else None


def load_having(kind: str) -> Recording:
    """The recording `load()` reads by default (this GPU's, else the preferred GPU's) if it has rows of `kind`
    (e.g. "capstone"), else the first that does; the default one if none has (its rows of that kind are then
    empty)."""
    first = load()
    if first.data.get(kind):
        return first
    others = (load(p.stem) for p in sorted(RESULTS_DIR.glob("*.json")))
    return next((r for r in others if r.data.get(kind)), first)


def save(data: dict) -> Path:
    if cache.FRESH_GPU:   # this GPU's recording reads as absent: a save would replace it with this run's rows alone
        raise NotAvailable(f"nothing is recorded under {cache.FRESH_GPU_ENV}=1: its recording reads as absent here")
    path = path_for(data["provenance"]["slug"])
    RESULTS_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def _key(kind: str, row: dict) -> tuple:
    """What a row is about: its problem and rung (an autotune report: its problem and tuner; a capstone
    row: its model; a launch row: its op and call; an ops_speed row: its op, case and install)."""
    if kind == "capstone":
        return (row["model"],)
    if kind == "launch":
        return (row["op"], row["call"])
    if kind == "model":
        return (row["model"], row["variant"], row["step"])
    if kind == "ops_speed":
        return (row["op"], row["case"], row["install"])
    if kind == "occupancy":   # lesson 04e's experiment: a rung at each blocks an SM or key tile asked for, per shape
        return (row["problem"], row["backend"], row["rung"], tuple(row["shape"]), row["blocks_per_sm"],
                row.get("key_tile"))
    if kind in ("warp_states", "shape_profiles", "shape_sweep", "memory", "issue"):  # more than one shape per rung
        return (row["problem"], row["backend"], row["rung"], tuple(row["shape"]))
    return (row["problem"], row["tuner"]) if kind == "autotune" else (row["problem"], row["backend"], row["rung"])


ROW_KINDS = ("runs", "profiles", "shape_profiles", "warp_states", "autotune", "power", "capstone", "launch",
             "shape_sweep", "memory", "model", "ops_speed", "occupancy", "issue")
ANCHOR_BACKEND = "torch"   # the library rungs a run times beside ours: cuBLAS, SDPA, torch.add


def session_of(data: dict, row: dict) -> dict | None:
    return next((s for s in data.get("sessions", []) if s["date"] == row.get("recorded")), None)


def run_anchor(row: dict, anchor: str, recording: "Recording | None" = None) -> dict | None:
    """The `anchor` ("torch:cublas") row timed in the same run as `row`, at its shape; None when that run
    timed no such anchor. A recorded row (one with a "recorded" date) is looked up in its session."""
    if "recorded" not in row:
        return None
    session = (recording or load()).session(row) or {"anchors": []}
    return next((a for a in session["anchors"] if f"{a['backend']}:{a['rung']}" == anchor
                 and a["problem"] == row["problem"] and a["shape"] == row["shape"]), None)


def _sessions(old: dict, new: dict) -> list[dict]:
    """The old sessions still referred to by a row, and the new run's (when it timed anything)."""
    date = new.get("provenance", {}).get("date")
    if not new.get("runs"):  # a run that timed nothing (ncu only) replaces no session, even one of its minute
        return list(old.get("sessions", []))
    kept = [s for s in old.get("sessions", []) if s["date"] != date]
    if date:
        kept.append({"date": date, "ceilings": new.get("ceilings"),
                     "anchors": [r for r in new["runs"] if r["backend"] == ANCHOR_BACKEND]})
    return kept


def fresh_record(old: dict, gpu) -> dict:
    """A recording to add rows to, to be merged into `old`: its GPU facts and ceilings, today's provenance."""
    return {**{k: v for k, v in old.items() if k not in ROW_KINDS}, "provenance": provenance(gpu)}


def add_rows(gpu, kind: str, rows: list[dict]) -> Path:
    """`rows` of `kind` merged into `gpu`'s recording and saved (the `--record` of the tools that add one kind)."""
    path = path_for(gpu.slug)
    if not path.exists():
        raise SystemExit("--record needs an earlier recording for this GPU (python -m ladder record)")
    old = load(path.stem).data
    return save(merge(old, {**fresh_record(old, gpu), kind: rows}))


def merge(old: dict | None, new: dict) -> dict:
    """New provenance; of the old runs, profiles, autotune reports and power samples, those about a rung (or
    tuner) that `new` has none of are kept. Every row gets the date it was recorded; a run that timed rows adds
    its session (its ceilings and anchors), and the old rows keep pointing at theirs."""
    def dated(rows, record):  # each row says when it was recorded (the provenance is the newest run's)
        date = record.get("provenance", {}).get("date")
        return [r if "recorded" in r or date is None else {**r, "recorded": date} for r in rows]

    new = {**new, "runs": dated(new.get("runs", []), new)}
    if not old:
        return {**new, "sessions": _sessions({}, new)}  # a first recording: one session
    keys = [k for k in old if k in new or k in ROW_KINDS] + [k for k in new if k not in old]
    merged = {k: new.get(k) for k in keys}  # the old file's order: a recording's diff shows what changed
    for kind in ROW_KINDS:
        fresh = dated(new.get(kind, []), new)
        again, placed, rows = {_key(kind, r) for r in fresh}, set(), []
        for r in dated(old.get(kind, []), old):  # the old order: a rung recorded again stays where it was
            k = _key(kind, r)
            if k not in again:
                rows.append(r)
            elif k not in placed:
                rows += [x for x in fresh if _key(kind, x) == k]
                placed.add(k)
        merged[kind] = rows + [x for x in fresh if _key(kind, x) not in placed]
    if not new.get("runs"):  # rows added without timing (ncu, power) measured no ceilings
        merged["ceilings"] = old["ceilings"]
    in_use = {r.get("recorded") for r in merged["runs"]}
    merged["sessions"] = [s for s in _sessions(old, new) if s["date"] in in_use]
    return merged


CEILING_NAMES = {"copy_TBps": "copy, TB/s", "l2_TBps": "L2 read, TB/s", "fp32_TFLOPs": "fp32 FMA, TFLOP/s",
                 "fp16_tc_TFLOPs": "tensor-core roof (highest instruction ceiling), TFLOP/s",
                 "cublas_TFLOPs": "cuBLAS 8192³ (an anchor), TFLOP/s"}
# the rows a side-by-side compares: the memory-bound vector add, each ladder's top rungs, beside their anchor
HEADLINES = [("vector_add", "cuda:2_vectorized", (1000000000,), "torch:add"),
             ("matmul", "cuda:7_wgmma", (8192, 8192, 8192), "torch:cublas"),
             ("matmul", "cuda:8_tma_warp_specialized", (8192, 8192, 8192), "torch:cublas"),
             ("matmul", "cuda:10_cluster_multicast", (4096, 4096, 4096), "torch:cublas"),
             ("matmul", "cuda:10_cluster_multicast", (8192, 8192, 8192), "torch:cublas"),
             ("matmul", "cuda:11_tma_store", (4096, 4096, 4096), "torch:cublas"),
             ("matmul", "cuda:11_tma_store", (8192, 8192, 8192), "torch:cublas"),
             ("matmul", "cuda:12_autotuned", (4096, 4096, 4096), "torch:cublas"),
             ("matmul", "cuda:12_autotuned", (8192, 8192, 8192), "torch:cublas"),
             ("matmul", "triton:6_autotuned", (4096, 4096, 4096), "torch:cublas"),
             ("matmul", "triton:6_autotuned", (8192, 8192, 8192), "torch:cublas"),
             ("attention", "cuda:6_autotuned", (4, 32, 4096, 64, 0), "torch:sdpa"),
             ("attention", "triton:6_autotuned", (4, 32, 4096, 64, 0), "torch:sdpa"),
             ("attention", "triton:6_autotuned", (4, 32, 4096, 128, 0), "torch:sdpa")]


def side_by_side(slugs: list[str] | None = None) -> str:
    """A markdown table of recordings side by side: the measured ceilings, then each headline rung's time and
    its ratio to the anchor timed in the same run ("-" where a recording lacks the row or its run's anchor)."""
    recs = [load(s) for s in (slugs or sorted(p.stem for p in RESULTS_DIR.glob("*.json")))]
    lines = ["| | " + " | ".join(r.gpu for r in recs) + " |", "|---" * (len(recs) + 1) + "|"]
    for key, name in CEILING_NAMES.items():
        lines.append(f"| {name} | " + " | ".join(f"{r.ceilings[key]:.2f}" if key in r.ceilings else "not measured"
                                                  for r in recs) + " |")
    for problem, label, shape, anchor in HEADLINES:
        backend, rung = label.split(":")
        cells = []
        for r in recs:
            row = next(iter(r.runs(problem, backend=backend, rung=rung, shape=list(shape))), None)
            base = row and run_anchor(row, anchor, r)
            cells.append("-" if row is None else f"{row['ms']:.3f} ms" + (f", {base['ms'] / row['ms']:.3f}x {anchor.split(':')[1]}"
                                                                        if base else ""))
        lines.append(f"| {problem} {label} {'x'.join(map(str, shape))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
