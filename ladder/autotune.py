"""Autotuning: a small tuner for CUDA C++ kernels, and a log of what @triton.autotune does.

A small autotuner for CUDA C++ kernels whose tile parameters are preprocessor defines.

A `Tuner` knows a search space (every combination of some values), a prune rule (configurations
that cannot run on this GPU, or are not worth timing, with the reason), and how to run one
configuration. `search(shape)` compiles the survivors (in parallel threads: NVRTC does not hold
the GIL), checks each against the reference, times it, and keeps the winner in a cache per GPU
(~/.cache/kernel-ladder/autotune.json). `best(shape)` answers from that cache, then from the
recorded results of this GPU, then with the default: it never searches on its own, so a call
never takes minutes by surprise.

For Triton kernels, `@triton.autotune` searches; a `TritonSearchLog` is plugged in as its prune hook
and its timer, so each search leaves the same `Report`: what was pruned and why, timed, or failed.
"""
from __future__ import annotations

import inspect
import itertools
import json
import math
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import torch
import triton

from ladder import results as results_mod
from ladder.runtime import world
from ladder.runtime.cache import CACHE_DIR
from ladder.check import compare
from ladder.runtime.errors import NotAvailable, Spills
from ladder.runtime.hardware import detect
from ladder.timing import search_bench


CACHE = CACHE_DIR / "autotune.json"
# Each configuration runs this long (ms) before and while it is timed. Triton's default (25 / 100) is a short
# burst: on a power-capped GPU (an H100 at 700 W) the clocks are still high then, and configurations that
# tie in a burst differ by 5% once the clocks settle, as they do when the winner is timed and used.
# (Shorter for short kernels: see ladder.timing.search_bench.)
SEARCH_WARMUP_MS, SEARCH_REP_MS = 100, 300
# A Triton search first times each configuration in short windows; one already SCREEN_MARGIN x slower than the
# best seen so far keeps that time (clock drift moves a ranking by ~5%, not 10%), the others are timed again
# in the full windows above. The configurations come likeliest winner first (likeliest_first), so the best so far
# is soon near the best: in the H100's recorded attention searches half of them were over 1.10x the winner.
SCREEN_WARMUP_MS, SCREEN_REP_MS, SCREEN_MARGIN = 10, 40, 1.10
# Under this many FLOPs a launch runs for microseconds: a search (seconds) costs more than it could ever save,
# so only the configuration with the smallest tiles (the most programs, to fill the SMs) is kept.
SEARCH_MIN_FLOP = 1e10
COMPILE_THREADS = 16  # a search compiles its configurations in parallel, then times them one at a time


def _key(shape: tuple) -> str:
    return "x".join(str(d) for d in shape)


_NUMBER = re.compile(r"\b\d+\b")


def reason_kind(reason: str) -> str:
    """A prune reason with its numbers taken out: the reasons of one kind share it."""
    return _NUMBER.sub("#", reason)


def _with_ranges(kind: str, numbers: list[list[int]]) -> str:
    """A kind of reason with each of its numbers written back as the range the reasons of that kind span
    ("needs 136-256 registers per thread (> 128)"): real numbers, never a placeholder."""
    spans = iter(f"{min(c)}" if min(c) == max(c) else f"{min(c)}-{max(c)}" for c in zip(*numbers))
    return re.sub("#", lambda _: next(spans), kind)


def fold_reasons(reasons: list[str]) -> Counter:
    """How many reasons of each kind, each kind written with the ranges its numbers span."""
    kinds: dict[str, list[list[int]]] = {}
    for r in reasons:
        kinds.setdefault(reason_kind(r), []).append([int(x) for x in _NUMBER.findall(r)])
    return Counter({_with_ranges(kind, numbers): len(numbers) for kind, numbers in kinds.items()})


@dataclass
class Report:
    """What one search did: the winner, and everything tried, pruned or failed on the way."""
    problem: str
    tuner: str
    shape: tuple
    gpu: str
    best: dict
    best_ms: float
    seconds: float
    timed: list[dict] = field(default_factory=list)      # {"config", "ms", "tflops"}
    pruned: list[dict] = field(default_factory=list)     # {"config", "reason"}
    failed: list[dict] = field(default_factory=list)     # {"config", "reason"}
    untimed: list[dict] = field(default_factory=list)    # kept but never timed: Triton >= 3.9 takes a lone survivor as is

    @property
    def tried(self) -> int:
        return len(self.timed) + len(self.failed)

    def pruned_by_reason(self) -> Counter:
        """How many configurations each kind of reason removed, its numbers as the range they take (fold_reasons)."""
        return fold_reasons([p["reason"] for p in self.pruned])

    def summary(self) -> str:
        n = len(self.timed) + len(self.pruned) + len(self.failed) + len(self.untimed)
        lines = [f"{self.tuner} at {_key(self.shape)} on {self.gpu}: {n} configurations, {len(self.pruned)} pruned, "
                 f"{self.tried} run, {len(self.failed)} failed; search took {self.seconds:.0f} s"]
        lines += [f"  pruned {k:3d}: {reason}" for reason, k in self.pruned_by_reason().most_common()]
        lines += [f"  failed: {format_config(f['config'])}: {f['reason']}" for f in self.failed]
        screened = sum(1 for t in self.timed if t.get("screened"))
        if screened:
            lines.append(f"  {screened} of the {len(self.timed)} timed in short windows only: over {SCREEN_MARGIN}x "
                         "the best timed before them")
        timing = f"{self.best_ms:.3f} ms" if self.timed else "not timed: the only configuration left"
        lines.append(f"winner: {format_config(self.best)}  {timing}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"problem": self.problem, "tuner": self.tuner, "shape": list(self.shape), "gpu": self.gpu, "best": self.best,
                "best_ms": self.best_ms, "seconds": self.seconds, "timed": self.timed,
                "pruned": self.pruned, "failed": self.failed, "untimed": self.untimed}

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        return cls(d["problem"], d["tuner"], tuple(d["shape"]), d["gpu"], d["best"], d["best_ms"], d["seconds"],
                   d["timed"], d["pruned"], d["failed"], d.get("untimed", []))


def format_config(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


@dataclass
class Tuner:
    problem: str
    name: str
    space: dict[str, list]
    prune: Callable[[dict, object], str | None]     # prune(config, gpu) -> reason or None
    compile: Callable[[dict], object]                 # compile(config): build it, raise if it cannot be (Spills: pruned)
    run: Callable                                     # run(config, a, b, out=None) -> out
    default: Callable[[object], dict]                 # default(gpu): what runs where no search has (fits that GPU)
    listed: list[dict] | None = None                  # a short list timed instead of the space's every point

    def configs(self) -> list[dict]:
        if self.listed is not None:
            return [dict(c) for c in self.listed]
        keys = list(self.space)
        return [dict(zip(keys, values)) for values in itertools.product(*self.space.values())]

    def search(self, inputs: tuple, reference: torch.Tensor, flops: float, new_output: Callable,
               warmup_ms: int = SEARCH_WARMUP_MS, rep_ms: int = SEARCH_REP_MS, shape: tuple | None = None) -> Report:
        """Time every configuration that survives pruning on `inputs`; cache and return the report.
        `shape` names the problem's shape in the report (default: a matmul's (M, N, K) of inputs a, b)."""
        gpu = detect()
        if gpu is None:
            raise NotAvailable("autotuning runs kernels: it needs a GPU")
        shape = shape or (inputs[0].shape[0], inputs[1].shape[1], inputs[0].shape[1])
        start = time.time()
        pruned, alive = [], []
        for c in self.configs():
            reason = self.prune(c, gpu)
            (pruned.append({"config": c, "reason": reason}) if reason else alive.append(c))
        failed, timed = [], []
        with ThreadPoolExecutor(max_workers=COMPILE_THREADS) as pool:
            compiled = list(pool.map(lambda c: _error(self.compile, c), alive))
        out = new_output()
        for c, error in zip(alive, compiled):
            if error and error.startswith(f"{Spills.__name__}: "):
                pruned.append({"config": c, "reason": error.removeprefix(f"{Spills.__name__}: ")})
                continue
            if error is None:
                out.fill_(float("nan"))
                error = _error(self.run, c, *inputs, out=out)
            if error is None:
                torch.cuda.synchronize()
                verdict = compare(out, reference)
                error = None if verdict.ok else f"wrong result: {verdict}"
            if error:
                failed.append({"config": c, "reason": error})
                continue
            ms = search_bench(lambda: self.run(c, *inputs, out=out), warmup_ms, rep_ms, [0.5])[0]
            timed.append({"config": c, "ms": ms, "tflops": flops / ms / 1e9})
        if not timed:
            raise RuntimeError(f"{self.name}: no configuration ran correctly at {_key(shape)}: {failed[:3]}")
        timed.sort(key=lambda t: t["ms"])
        report = Report(self.problem, self.name, shape, gpu.name, timed[0]["config"], timed[0]["ms"], time.time() - start,
                        timed, pruned, failed)
        store(gpu.slug, report)
        return report

    def nearest(self, shape: tuple) -> Report | None:
        """The search report of the tuned shape nearest to `shape` on this GPU (cache, then recording), or None."""
        gpu = detect()
        slug = gpu.slug if gpu else None

        def find():  # launchers ask on every call: read the cache once per shape
            reports = cached_reports(slug, self.problem, self.name)
            return min(reports, key=lambda r: _distance(r.shape, shape)) if reports else None
        return remembered(("report", slug, self.problem, self.name, tuple(shape)), find)

    def best(self, shape: tuple) -> dict:
        """The winner for the tuned shape nearest to `shape` on this GPU (`nearest`), else this GPU's default; also
        the default where that winner is pruned now (a prune rule added since it was searched). Pinned (`ladder
        run-once`), a shape searched nowhere but swept takes the configuration the sweep timed (`swept_config`)."""
        gpu = detect()

        def choose():
            report = self.nearest(shape)
            searched_here = report is not None and tuple(report.shape) == tuple(shape)
            swept = PIN_RECORDED and not searched_here and swept_config(gpu, self.name, shape)
            winner = swept or (report.best if report else None)
            return winner if winner and self.prune(winner, gpu) is None else self.default(gpu)
        return remembered(("best", gpu.slug if gpu else None, self.problem, self.name, tuple(shape)), choose)


def swept_config(gpu, label: str, shape: tuple) -> dict | None:
    """The configuration this GPU's recorded shape sweep (`python -m ladder sweep`) timed rung `label` in at exactly
    `shape`, if it did: what `ladder run-once` pins, so that ncu profiles the kernel the sweep timed (a search at
    that shape leaves its report in the local cache only)."""
    if gpu is None:
        return None
    try:
        rows = results_mod.load(gpu.slug).data.get("shape_sweep", [])
    except NotAvailable:
        return None
    return next((r["config"] for r in rows if f"{r['backend']}:{r['rung']}" == label
                 and tuple(r["shape"]) == tuple(shape) and r.get("config")), None)


_BEST: dict[tuple, dict] = {}


def remembered(key: tuple, compute: Callable):
    """compute(), kept until this process's search cache changes (`store` forgets it): for what a launcher derives
    from search winners on every call. key: names the answer, starting with a string of its own."""
    found = _BEST.get(key, _UNKNOWN)   # a launcher's key hashed once a call, not twice
    if found is _UNKNOWN:
        found = _BEST[key] = compute()
    return found


_UNKNOWN = object()


def _error(fn, *args, **kwargs) -> str | None:
    """None if fn(*args) works; else the first line of what went wrong (it rules the configuration out)."""
    try:
        fn(*args, **kwargs)
        return None
    except Exception as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return f"{type(e).__name__}: {first}"


def _distance(a: tuple, b: tuple) -> float:
    """How far two shapes are: log-ratios per dimension; any difference counts (flags: causal 0 vs 1)."""
    return sum(abs(math.log(max(x, 1)) - math.log(max(y, 1))) + 1e-3 * (x != y) for x, y in zip(a, b))


def _read_cache() -> dict:
    try:
        return json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}


def store(slug: str, report: Report) -> None:
    """`report` kept in the local search cache of GPU `slug` (its other reports kept)."""
    data = _read_cache()
    data.setdefault(slug, {}).setdefault(report.tuner, {})[_key(report.shape)] = report.as_dict()
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    # written aside, then renamed over the cache: a process reading it meanwhile sees the old file or the new one
    scratch = CACHE.with_name(f"{CACHE.name}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps(data, indent=1))
    os.replace(scratch, CACHE)
    forget()


def forget() -> None:
    """Forget every answer read or derived from the searches (`nearest`, `best`, `remembered`): the next call reads
    the cache again."""
    _BEST.clear()


def cached_reports(slug: str | None, problem: str | None = None, tuner: str | None = None) -> list[Report]:
    """Searches done on this GPU: the local cache's, and those recorded in results/ for it at shapes the cache has
    not searched (a search here at one shape does not hide the recorded winners at others); of `problem` and
    `tuner` only if given."""
    if slug is None:
        return []

    def wanted(reports):
        return [r for r in reports if problem in (None, r.problem) and tuner in (None, r.tuner)]
    local = wanted([Report.from_dict(d) for per_shape in _read_cache().get(slug, {}).values() for d in per_shape.values()])
    searched = {(r.tuner, tuple(r.shape)) for r in local}
    return local + [r for r in wanted(recorded_reports(slug)) if (r.tuner, tuple(r.shape)) not in searched]


def recorded_reports(slug: str | None = None) -> list[Report]:
    try:
        rec = results_mod.load(slug)
    except NotAvailable:
        return []
    return [Report.from_dict(d) for d in rec.data.get("autotune", [])]


def recorded_report(tuner: str, shape: tuple, slug: str | None = None) -> Report | None:
    """`tuner`'s recorded search at exactly `shape` in `slug`'s recording (default: the preferred one), if any."""
    return next((r for r in recorded_reports(slug) if r.tuner == tuner and tuple(r.shape) == tuple(shape)), None)


# ---------------------------------------------------------------- @triton.autotune, logged

def triton_configs(space: dict, pre_hook=None) -> list:
    """Every combination of `space` (constexprs, plus num_warps and num_stages) as triton.Configs, each with
    `pre_hook` (called with the launch's arguments and the configuration's before it compiles or runs)."""
    launch = ("num_warps", "num_stages")
    configs = []
    for values in itertools.product(*space.values()):
        c = dict(zip(space, values))
        configs.append(triton.Config({k: v for k, v in c.items() if k not in launch},
                                     num_warps=c["num_warps"], num_stages=c["num_stages"], pre_hook=pre_hook))
    return configs


def triton_config_dict(c) -> dict:
    return {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}


def _tile_area(config) -> int:
    """The product of a Triton configuration's BLOCK_* sizes: the work of one program."""
    return math.prod(v for k, v in config.kwargs.items() if k.startswith("BLOCK_"))


def likeliest_first(configs: list, earlier: Report | None) -> list:
    """The order a search times `configs` in: an earlier search's ranking on this GPU at this shape (local cache or
    results/), the configurations it did not time after it; without one, the biggest tiles first (at the
    sizes worth a search, the fewest loads per FLOP usually win)."""
    rank = {json.dumps(t["config"], sort_keys=True): i
            for i, t in enumerate(sorted(earlier.timed, key=lambda t: t["ms"]))} if earlier else {}
    return sorted(configs, key=lambda c: (rank.get(json.dumps(triton_config_dict(c), sort_keys=True), len(rank)),
                                          -_tile_area(c)))


def compile_ahead(kernel, configs, named_args: dict, launch_kwargs: dict) -> None:
    """Compile `kernel` for each of `configs` in parallel threads (Triton's AsyncCompileMode), so that the
    autotuner, which compiles each configuration only when it comes to time it, finds them all compiled:
    on a fresh machine a search's time is mostly compilation. A compilation that fails fails again, as
    before, when the autotuner launches it. Where Triton has no AsyncCompileMode, or one without
    ignore_errors (its first versions: a failed compilation there raises out of the block), the
    autotuner compiles them itself, one at a time."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    if "ignore_errors" not in inspect.signature(AsyncCompileMode).parameters:
        return
    launch = {k: v for k, v in launch_kwargs.items() if k not in ("grid", "warmup")}
    with ThreadPoolExecutor(max_workers=COMPILE_THREADS) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for c in configs:
            if c.pre_hook is not None:   # e.g. a descriptor's box, read into the signature compiled here
                c.pre_hook({**named_args, **launch_kwargs, **c.all_kwargs()})
            kernel.warmup(*named_args.values(), grid=(1,), **launch, **c.all_kwargs())


PIN_RECORDED = False


def pin_recorded_winners() -> None:
    """From now on, a Triton search whose winner this GPU has recorded (local cache or results/) times only
    that winner, and a CUDA rung's Tuner.best takes the configuration the recorded shape sweep timed at that very
    shape where it timed one and no search ran there (swept_config). `ladder run-once`, the process ncu profiles,
    does this: it then runs the configuration that `record` timed, not the winner of a new search run under ncu,
    whose instrumentation can change the ranking (on the H100 it once made a 128x128 tile win rung 6's search)."""
    global PIN_RECORDED
    PIN_RECORDED = True


class TritonSearchLog:
    """What @triton.autotune did at each new key: pass `prune` as its early_config_prune hook and `bench`
    as its do_bench; after a launch that searched, `finish` turns what they saw into a Report.

    shape_of(args) -> the shape a launch works on; label_of(args) -> (problem, tuner name);
    flops(problem, shape) -> its FLOPs; reason(config, shape, gpu, configs) -> why a config is pruned or None;
    kernel: the @triton.jit function tuned, to compile the kept configurations ahead, all at once.
    """

    def __init__(self, shape_of: Callable, label_of: Callable, flops: Callable, reason: Callable, kernel=None):
        self.shape_of, self.label_of, self.flops, self.reason = shape_of, label_of, flops, reason
        self.kernel = kernel
        self.reports: list[Report] = []
        self.current: dict | None = None

    def prune(self, configs, named_args, **kwargs):
        start, args = time.time(), {**named_args, **kwargs}
        shape, label, gpu = self.shape_of(args), self.label_of(args), detect()
        dicts = [triton_config_dict(c) for c in configs]
        kept, pruned = [], []
        for c, d in zip(configs, dicts):
            why = self.reason(d, shape, gpu, dicts)
            (pruned.append({"config": d, "reason": why}) if why else kept.append(c))
        flops = self.flops(label[0], shape)
        if gpu is not None and len(kept) > 1 and flops < SEARCH_MIN_FLOP:
            smallest = min(kept, key=_tile_area)
            pruned += [{"config": triton_config_dict(c), "reason": f"{flops:.1e} FLOP run in microseconds: a search "
                        "costs more than it can save (the smallest tiles are kept)"} for c in kept if c is not smallest]
            kept = [smallest]
        # Earlier searches of this tuner: a Triton search is never written to the local cache (Tuner.search, CUDA's,
        # is), so these are the ones recorded in results/. Triton attention rung 7's recorded while it compiled
        # through ladder/ptx.py by default are kept as its own: the same kernel's tiles (results.RUNG7_THROUGH_PASS).
        earlier = [r for r in cached_reports(gpu.slug, *label) if tuple(r.shape) == tuple(shape)] if gpu else []
        if PIN_RECORDED and earlier:
            kept = [c for c in kept if triton_config_dict(c) == earlier[0].best] or kept  # not in the space: a search
        kept = likeliest_first(kept, earlier[0] if earlier else None)
        self.current = dict(shape=shape, label=label, start=start, kept=kept, pruned=pruned, times=[], screened=[])
        if self.kernel is not None and gpu is not None:
            compile_ahead(self.kernel, kept, named_args, kwargs)
        return kept

    def bench(self, kernel_call, quantiles):
        """Time one configuration: on a GPU in short windows, then (unless already SCREEN_MARGIN x slower than the best
        timed before it) in the full ones (search_bench); one timed call in the interpreter."""
        screened = False
        try:
            if world.WORLD.gpu:
                ms = search_bench(kernel_call, SCREEN_WARMUP_MS, SCREEN_REP_MS, quantiles)
                best = min((t for t in self.current["times"] if not isinstance(t, str)), default=float("inf"))
                screened = ms[0] > SCREEN_MARGIN * best
                if not screened:
                    ms = search_bench(kernel_call, SEARCH_WARMUP_MS, SEARCH_REP_MS, quantiles)
            else:
                start = time.perf_counter()
                kernel_call()
                ms = [(time.perf_counter() - start) * 1e3] * len(quantiles)
        except Exception as e:  # the autotuner rules out what does not compile (e.g. OutOfResources)
            self.current["times"].append(f"{type(e).__name__}: {str(e).strip()[:200]}")
            self.current["screened"].append(False)
            raise
        self.current["times"].append(ms[0])
        self.current["screened"].append(screened)
        return ms

    def start(self) -> None:
        """Before a launch: the prune hook runs (and sets `current`) only if the launch searches."""
        self.current = None

    def finish(self, best) -> None:
        """After a launch: if it searched, its Report (the autotuner times the survivors in order)."""
        if self.current is None:
            return
        s, self.current = self.current, None
        (problem, tuner), shape = s["label"], s["shape"]
        timed, failed = [], []
        for c, t, screened in zip(s["kept"], s["times"], s["screened"]):
            if isinstance(t, str):
                failed.append({"config": triton_config_dict(c), "reason": t})
            else:
                timed.append({"config": triton_config_dict(c), "ms": t, "tflops": self.flops(problem, shape) / t / 1e9,
                              **({"screened": True} if screened else {})})
        untimed = [{"config": triton_config_dict(c)} for c in s["kept"][len(s["times"]):]]
        timed.sort(key=lambda t: t["ms"])
        best_ms = timed[0]["ms"] if timed else float("nan")  # nothing timed: one configuration survived
        gpu = detect()
        self.reports.append(Report(problem, tuner, shape, gpu.name if gpu else "CPU (Triton interpreter)",
                                   triton_config_dict(best), best_ms, time.time() - s["start"], timed,
                                   s["pruned"], failed, untimed))

    def latest(self, tuner: str) -> dict[tuple, Report]:
        """The newest report per shape of one tuner."""
        return {r.shape: r for r in self.reports if r.tuner == tuner}
