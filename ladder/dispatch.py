"""Which kernel ladder.ops.matmul runs at each shape, and in which configuration: a dispatch table that a shape
sweep on this GPU fills (ladder.sweep).

The shapes, (M, N, K) with A M x K and B K x N:
  MODEL_SHAPES  the five matmuls of lesson 05's model (GPT-2 small on 8 sequences of 1024 tokens), under the names
                ladder.capstone.costs gives them; GOAL_SHAPES adds 2048³ (`--model` sweeps these six)
  GRID          every combination of GRID_SIZES (256, 1449, 8192) as M, N and K: 27 shapes, square, tall, wide, deep
                and thin, log-spaced from 256 to 8192. 1449 is their geometric mean (1448) made odd: rows that start
                off 16-byte boundaries, masked edges, the TMA rungs' padded copies (`--grid`)

ladder.sweep fills the table; its docstring says what it times.

An entry is a Case: the shape, B's layout ("row": K x N row-major; "weight_t": the transpose of a row-major N x K,
nn.Linear's weight.t(); "strided": any other view) and the epilogue the call fuses (None, "bias", "relu", "gelu",
"bias_relu", "bias_gelu"), the operands' dtype (fp16; bf16 from first use only) and A's layout ("row"; "transposed":
a.mT of a row-major K x M, as a weight's gradient reads the activations; "strided"). The sweep fills fp16
row-major cases without an epilogue; ladder.first_use fills the case of each call it has not measured, on first use. Only a case's own entry decides: a shape a few sizes away can have
other tiles, alignments and vector loads.

The op's pick in a case is between the candidates it launches: in an eager call EAGER_CANDIDATES (rung 6, rung 7
where this GPU has the TMA, and torch.matmul), under torch.compile OP_CANDIDATES (rung 6 and torch.matmul: rung 7's
launch is not written for wrap_triton, see ladder.ops); rung 12 is timed to show how near cuBLAS our best rung comes, and
ladder.ops says why it does not launch it. A rung of ours is picked only where it beat cuBLAS by more than TIE (1%).
Closer than that, two medians differ by less than clock drift moves them between runs, and cuBLAS costs nothing to
choose: no compile at a new shape, its speed on every layout. An eager call that wants a gradient also asks for a
margin of TRAINING_MARGIN_MS (our autograd path's host cost).

A table holds for one GPU under one software stack: its key is the GPU and the versions of the driver, CUDA, Triton
and PyTorch (VERSION_READERS), and a table whose key is not this process's is ignored as if absent
(`current().reason` names what changed) until a sweep or first use measures again. Writers take the table's lock and
replace the file whole (`update`): processes tuning at once neither corrupt it nor lose each other's entries.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import tempfile
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Callable, NamedTuple

import filelock
import torch
import triton

from ladder import autotune, results
from ladder.runtime import hardware
from ladder.capstone.config import PRESETS
from ladder.runtime.cache import CACHE_DIR
from ladder.runtime.world import WORLD

CUBLAS, RUNG6 = "torch:cublas", "triton:6_autotuned"
RUNG7, RUNG12 = "triton:7_tma_persistent", "cuda:12_autotuned"
OP_CANDIDATES = (RUNG6, CUBLAS)           # what ladder.ops.matmul launches under torch.compile
EAGER_CANDIDATES = (RUNG6, RUNG7, CUBLAS)   # and in an eager call (rung 7 where the GPU has the TMA)
TIE = 0.01             # rung 6 is picked over cuBLAS only when faster by more than this fraction
# Where a gradient is wanted, an eager call on our kernels also pays a Python autograd node and our backward's
# calls, where cuBLAS's run in torch's C++ nodes: in GPT-2's block (B 8, S 1024) on an H100 the training step ran
# 0.09-0.25 ms faster with its MLP's first matmul on cuBLAS than on rung 6 (kernels/NOTES.md). So there our kernel
# runs only where its forward was measured faster by more than this too.
TRAINING_MARGIN_MS = 0.1
GOAL = 0.95            # the bar, x cuBLAS: at each goal shape, and the grid's median


# ------------------------------------------------------------- the shapes

def _model_shapes() -> dict[str, tuple]:
    """The matmuls of one forward pass of lesson 05's model, (M, N, K), by ladder.capstone.costs's names."""
    cfg = PRESETS["gpt2-small"]
    M, d = cfg.tokens, cfg.d_model
    return {"qkv projection": (M, 3 * d, d), "attention output proj.": (M, d, d), "MLP up (d -> 4d)": (M, 4 * d, d),
            "MLP down (4d -> d)": (M, d, 4 * d), "vocabulary projection": (M, cfg.vocab, d)}


MODEL_SHAPES = _model_shapes()
VOCABULARY = MODEL_SHAPES["vocabulary projection"]   # the shape where the goal is to beat cuBLAS
GOAL_SHAPES = {**MODEL_SHAPES, "square 2048": (2048, 2048, 2048)}
GRID_SIZES = (256, round((256 * 8192) ** 0.5) | 1, 8192)   # the middle one: the geometric mean, 1448, made odd
GRID = list(product(GRID_SIZES, repeat=3))
GRID_NAME = "grid"


def shapes_to_sweep(model: bool, grid: bool, given: list[tuple] = ()) -> dict[tuple, str]:
    """{shape: name} of the goal shapes (`model`), the grid (`grid`) and the `given` shapes (named as the goal shapes
    and the grid name theirs, else "given"); none asked for: the goal shapes and the grid."""
    goals, grid_shapes = {s: n for n, s in GOAL_SHAPES.items()}, dict.fromkeys(GRID, GRID_NAME)
    everything = not (model or grid or given)
    return {**(goals if model or everything else {}), **(grid_shapes if grid or everything else {}),
            **{tuple(s): goals.get(tuple(s)) or grid_shapes.get(tuple(s), "given") for s in given}}


def shape_text(shape: tuple) -> str:
    return "x".join(map(str, shape))


# ------------------------------------------------------------- the table

class Case(NamedTuple):
    """What a measurement holds for: a call's shape, B's layout, its epilogue (see the module's docstring), the
    operands' dtype (torch's name for it) and A's layout: a kernel's speed in one layout says nothing of another."""
    M: int
    N: int
    K: int
    layout: str = "row"
    epilogue: str | None = None
    dtype: str = "float16"
    a_layout: str = "row"

    @property
    def shape(self) -> tuple:
        return (self.M, self.N, self.K)

    def __str__(self) -> str:
        extras = [f"A {self.a_layout}"] * (self.a_layout != "row") + [f"B {self.layout}"] * (self.layout != "row")
        return " ".join([shape_text(self.shape), *extras, *([f"+ {self.epilogue}"] if self.epilogue else []),
                         *([self.dtype] if self.dtype != "float16" else [])])


@dataclass(frozen=True)
class Timed:
    config: dict | None   # the configuration timed (None: cuBLAS's own)
    ms: float             # its median


@dataclass(frozen=True)
class Entry:
    case: Case
    timings: dict[str, Timed]   # candidate label -> what it ran and its median, cuBLAS's among them

    @property
    def shape(self) -> tuple:
        return self.case.shape

    def pick(self, among=None, margin_ms: float = 0.0) -> str | None:
        """The candidate to launch, of those timed (and in `among`): the fastest of ours, unless cuBLAS is within
        TIE of it, or within margin_ms (ties among ours: the first timed)."""
        timed = {label: t for label, t in self.timings.items() if among is None or label in among}
        ours = {label: t.ms for label, t in timed.items() if label != CUBLAS}
        best = min(ours, key=ours.get, default=None)
        if CUBLAS in timed and (best is None or timed[CUBLAS].ms <= ours[best] * (1 + TIE) + margin_ms):
            return CUBLAS
        return best

    def as_dict(self) -> dict:
        return {"shape": list(self.shape), "layout": self.case.layout, "epilogue": self.case.epilogue,
                **({"dtype": self.case.dtype} if self.case.dtype != "float16" else {}),
                **({"a_layout": self.case.a_layout} if self.case.a_layout != "row" else {}),
                "timings": {label: {"config": t.config, "ms": t.ms} for label, t in self.timings.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Entry":
        return cls(Case(*d["shape"], d.get("layout", "row"), d.get("epilogue"), d.get("dtype", "float16"),
                        d.get("a_layout", "row")),
                   {label: Timed(t["config"], t["ms"]) for label, t in d["timings"].items()})


@dataclass(frozen=True)
class DispatchTable:
    key: dict                    # process_key() of the process that measured it
    entries: dict[Case, Entry]

    def lookup(self, case: Case) -> Entry | None:
        return self.entries.get(case)

    @classmethod
    def of(cls, key: dict, entries) -> "DispatchTable":
        return cls(key, {e.case: e for e in entries})

    @classmethod
    def from_rows(cls, key: dict, rows: list[dict]) -> "DispatchTable":
        """The table of a sweep's rows: at each shape, every candidate that was timed (correct)."""
        timings: dict[Case, dict] = {}
        for r in rows:
            if "ms" in r:
                timings.setdefault(Case(*r["shape"]), {})[f"{r['backend']}:{r['rung']}"] = Timed(r["config"], r["ms"])
        return cls(key, {c: Entry(c, t) for c, t in timings.items()})

    def over(self, older: "DispatchTable | None") -> "DispatchTable":
        """This table, with `older`'s entries in the cases this one did not measure."""
        return self if older is None else DispatchTable(self.key, {**older.entries, **self.entries})

    def as_dict(self) -> dict:
        return {"key": self.key, "entries": [e.as_dict() for e in self.entries.values()]}

    @classmethod
    def from_dict(cls, d: dict) -> "DispatchTable":
        return cls.of(d["key"], (Entry.from_dict(e) for e in d["entries"]))

    def write(self, path: Path) -> Path:
        """The table written whole to `path`: a new file renamed over the old, so a reader never sees half of it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as f:
            f.write(json.dumps(self.as_dict(), indent=1) + "\n")
        os.replace(f.name, path)
        return path


# ------------------------------------------------------------- its key, its file, the one in effect

def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi gives it (as a recording's provenance holds it); None without a GPU."""
    if not WORLD.gpu:
        return None
    found = results._nvidia_smi("driver_version")
    return found[0] if found else None


# What a table's key holds besides the GPU: a change in any of these can change which kernel is fastest.
VERSION_READERS: dict[str, Callable[[], str | None]] = {
    "driver": driver_version, "cuda": lambda: torch.version.cuda, "triton": lambda: triton.__version__,
    "torch": lambda: torch.__version__}


def process_key(slug: str) -> dict:
    """The key a table swept by this process on GPU `slug` gets, and a table read by it must have."""
    return {"gpu": slug, **{name: read() for name, read in VERSION_READERS.items()}}


def cache_path(slug: str) -> Path:
    return CACHE_DIR / f"dispatch-{slug}.json"


@dataclass(frozen=True)
class Loaded:
    table: DispatchTable | None
    reason: str   # one line: where the table came from, or why there is none


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def load(gpu) -> Loaded:
    """The dispatch table of `gpu` (a ladder.runtime.hardware.GPU; None: the CPU) if its key is this process's."""
    if gpu is None:
        return Loaded(None, "no GPU: the interpreter runs rung 6")
    path = cache_path(gpu.slug)
    try:
        table = DispatchTable.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return Loaded(None, f"none measured on this GPU yet, in {path}: first use or `python -m ladder sweep` fills it")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return Loaded(None, f"{path} is unreadable ({type(e).__name__}: {e}); ignored")
    mine = process_key(gpu.slug)
    changed = [f"{name} {table.key.get(name)} -> {now}" for name, now in mine.items() if table.key.get(name) != now]
    if changed:
        return Loaded(None, f"{path} was measured under other versions ({', '.join(changed)}); ignored until "
                            "first use or `python -m ladder sweep` measures again")
    return Loaded(table, f"{path}: {_cases(len(table.entries))} measured under this process's versions")


_loaded: Loaded | None = None   # the table in effect, read at the first lookup


def current() -> Loaded:
    global _loaded
    if _loaded is None:
        _loaded = load(hardware.detect())
    return _loaded


def lookup(case: Case) -> Entry | None:
    """The entry measured in `case`, or None."""
    table = current().table
    return None if table is None else table.lookup(case)


def update(gpu, entries) -> DispatchTable:
    """`entries` added to `gpu`'s table on disk, over the entries it holds in other cases (where its key is this
    process's), under the table's lock; the result is the table in effect. Choices already made stay made: the
    cases measured were not in the table before."""
    global _loaded
    path = cache_path(gpu.slug)
    with locked(gpu):
        table = DispatchTable.of(process_key(gpu.slug), entries).over(load(gpu).table)
        table.write(path)
    if not suspending:
        _loaded = Loaded(table, f"{path}: {_cases(len(table.entries))} measured under this process's versions")
    return table


def locked(gpu):
    """The lock of `gpu`'s table, held while a process measures a case: a second process waits, then reads the
    entry the first wrote instead of measuring it again (and no two processes time kernels on one GPU at once)."""
    path = cache_path(gpu.slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _lock(f"{path}.lock")


@functools.cache
def _lock(path: str) -> filelock.FileLock:
    """One lock object per file in a process: it is reentrant, where two objects on one file would wait on
    each other."""
    return filelock.FileLock(path)


_ON_RELOAD: list[Callable[[], None]] = []   # what forgets choices made from the table (ladder.ops registers its own)


def on_reload(forget: Callable[[], None]) -> None:
    """Call `forget` whenever the table is read again (`reload`): choices made from the old one are stale."""
    _ON_RELOAD.append(forget)


def reload() -> None:
    """Read the table again at the next lookup; whatever chose from the table chooses again (on_reload)."""
    global _loaded
    _loaded = None
    for forget in _ON_RELOAD:
        forget()


suspending = False   # a sweep is timing the op's own rule: no table, no first-use tuning


@contextlib.contextmanager
def suspended():
    """No table in effect and nothing measured on first use (the op runs rung 6 in its own rule's configuration:
    what the sweep times), and the op's choices forgotten on the way in and out."""
    global _loaded, suspending
    reload()
    _loaded, suspending = Loaded(None, "suspended while a sweep times the op's own rule"), True
    try:
        yield
    finally:
        suspending = False
        reload()


def describe() -> str:
    """One line for ladder.ops.backend: where the kernel per case comes from."""
    return f"per case, the candidate measured fastest on this GPU: {current().reason}"


# ------------------------------------------------------------- what a sweep found

def shape_line(rows: list[dict]) -> str:
    """One shape's rows on one line: each candidate's median, or why it has none."""
    first = rows[0]
    cells = [f"{r['backend']}:{r['rung']} " + (f"{r['ms']:.3f} ms" if "ms" in r else
                                               "failed" if "error" in r else "WRONG") for r in rows]
    return f"{first['name']:24s} {shape_text(first['shape']):>17s}  " + "  ".join(cells)


def times_cublas(rows: list[dict]) -> dict[tuple, tuple[str, float]]:
    """Per shape with cuBLAS and a rung of ours timed: the fastest of ours, and cuBLAS's median over its median
    (over 1: ours is faster)."""
    found = {}
    for entry in DispatchTable.from_rows({}, rows).entries.values():
        ours = {label: t.ms for label, t in entry.timings.items() if label != CUBLAS}
        if ours and CUBLAS in entry.timings:
            best = min(ours, key=ours.get)
            found[entry.shape] = (best, entry.timings[CUBLAS].ms / ours[best])
    return found


def goals(rows: list[dict]) -> list[str]:
    """The issue's goals, each met or not by the rows (those whose shapes were swept): GOAL x cuBLAS at each goal
    shape (the vocabulary projection: faster than cuBLAS), and as the median over the grid."""
    ratio = times_cublas(rows)
    lines = []
    for name, shape in GOAL_SHAPES.items():
        if shape in ratio:
            best, x = ratio[shape]
            met, bar = (x > 1, "beat cuBLAS") if shape == VOCABULARY else (x >= GOAL, f">= {GOAL}x")
            lines.append(f"{name:24s} {shape_text(shape):>17s}  {best} {x:.3f}x cuBLAS  "
                         f"{'met' if met else 'NOT met'} ({bar})")
    on_grid = [ratio[s][1] for s in GRID if s in ratio]
    if on_grid:
        median = statistics.median(on_grid)
        lines.append(f"grid median over {len(on_grid)} shapes: {median:.3f}x cuBLAS  "
                     f"{'met' if median >= GOAL else 'NOT met'} (>= {GOAL}x)")
    return lines
