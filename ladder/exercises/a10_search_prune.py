"""Assignment 10: designing a search space's prune (CUDA matmul rung 6, kernels/matmul.py).

Before timing anything, an autotuner should drop the configurations that cannot run or would spill. The student
proposes the rule: prune_reason(c, gpu) -> a reason (str) or None to keep c, for rung 6's configurations
c = {BM, BN, BK, WARPS_M, WARPS_N, STAGES, GROUP_M} and a GPU (ladder.runtime.hardware.GPU: smem_per_block_bytes,
has("cp.async")). No rule is given and none is kept here: the check judges the rule by what NVRTC makes of the
configurations (compile-only, no GPU), on an H100 (sm_90, which `explore` shows) and on a T4 (sm_75, held out):
- every configuration kept must compile and fit in the shared memory a block may have;
- none kept may spill more than SMALL_SPILL bytes of local memory per thread (a few bytes the compiler's
  whims put on the stack are left to the search's second prune, on the compiled kernel: cuda.without_spills);
- it must keep at least KEEP of the configurations that compile without local memory and fit.
A failure names one configuration and what the compiler said about it: facts of that configuration only.
What NVRTC says is cached per configuration, in memory and under the cache directory (keyed by the NVRTC
version and the kernel's source), so only the first check compiles: the 126 configurations for sm_90, and for
sm_75 those that fit a T4's 64 KiB (two threads, about 30 s on two cores).
"""
from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder import sass
from ladder.runtime import cuda
from ladder.runtime.cache import CACHE_DIR
from ladder.exercises.grading import Fail, Result, judge, still_blank
from ladder.roofline import datasheet_gpu


TASK = "search-space prune"
SOURCE, KERNEL = "matmul/6_autotuned.cu", "matmul_grouped"   # what rung 6's search launches
SMALL_SPILL = 64     # bytes of local memory per thread a kept configuration may have (16 registers' worth)
KEEP = 0.9           # of the configurations that compile clean and fit, the share a prune must keep
GPU_NAMES = ("H100", "T4")   # the check's GPUs; `explore` compiles for the first
_CODE_KEYS = ("BM", "BN", "BK", "WARPS_M", "WARPS_N", "STAGES")   # GROUP_M orders the blocks: same registers
_JUDGING = contextvars.ContextVar("judging", default=False)
_LOCK = threading.Lock()


def configs() -> list[dict]:
    """Rung 6's search space (kernels.matmul.TUNER) less the 256x256 tiles on 4 or 8 warps: each takes NVRTC
    2-15 s to compile (they spill on every GPU), more than the other configurations together."""
    return [c for c in mm.TUNER.configs() if not (c["BM"] == c["BN"] == 256 and cm.threads(c) < 512)]


@functools.lru_cache(maxsize=None)
def gpu(name: str):
    """The datasheet's GPU (its limits; no device needed)."""
    return datasheet_gpu(name)


def config(BM: int, BN: int, BK: int, WARPS_M: int, WARPS_N: int, STAGES: int, GROUP_M: int = 8) -> dict:
    """One of rung 6's configurations, as the search (and prune_reason) gets it."""
    return dict(BM=BM, BN=BN, BK=BK, WARPS_M=WARPS_M, WARPS_N=WARPS_N, STAGES=STAGES, GROUP_M=GROUP_M)


def gpus() -> list:
    return [gpu(name) for name in GPU_NAMES]


def shared_kib(c: dict) -> float:
    """The dynamic shared memory rung 6's launcher asks for, in KiB."""
    return cm.shared_bytes(c) / 1024


@dataclass(frozen=True)
class Compiled:
    """What NVRTC made of one configuration for one architecture."""
    error: str | None = None   # why it refused to compile (the kernel's static_assert), else None
    registers: int = 0         # per thread
    local_bytes: int = 0       # per thread: the stack and local memory that hold what did not fit in registers


def _key(c: dict) -> str:
    return ",".join(f"{k}={c[k]}" for k in _CODE_KEYS)


def _compile(arch: str, c: dict) -> Compiled:
    try:
        cubin = cuda.compile_cubin(SOURCE, arch, tuple(sorted((k, str(v)) for k, v in c.items())),
                                   (f"--ptxas-options=--entry={KERNEL}",))  # not rung 5's kernel beside it
    except cuda.CompileError as e:
        asserts = re.findall(r'static_assert\([^"]*"([^"]+)"', str(e))
        errors = re.findall(r"error: (.+)", str(e))
        return Compiled(error=(asserts or errors or ["NVRTC refused it"])[0])
    usage = sass.resource_usage(cubin)
    return Compiled(registers=usage["registers"], local_bytes=usage["stack_bytes"] + usage["local_bytes"])


@functools.lru_cache(maxsize=None)
def _cache_file(arch: str) -> Path:
    """Where NVRTC's answers for `arch` are kept: named by the NVRTC version and the kernel's inlined source."""
    from cuda.bindings import nvrtc
    _, major, minor = nvrtc.nvrtcVersion()
    digest = hashlib.sha256(f"{cuda.source(SOURCE)}\n{KERNEL}\n{cuda.include_dir(major)}".encode()).hexdigest()[:16]
    root = CACHE_DIR
    return root / "a10_search_prune" / f"{arch}-nvrtc{major}.{minor}-{digest}.json"


@functools.lru_cache(maxsize=None)
def _known(arch: str) -> dict[str, Compiled]:
    try:
        return {k: Compiled(**v) for k, v in json.loads(_cache_file(arch).read_text()).items()}
    except (OSError, ValueError, TypeError):
        return {}


def _save(arch: str) -> None:
    path = _cache_file(arch)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in sorted(_known(arch).items())}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: the answers stay in memory


def compiled_all(arch: str, cs: list[dict]) -> list[Compiled]:
    """NVRTC's answer for each configuration (compiled once each, two at a time, the slowest first)."""
    if _JUDGING.get():
        raise Fail("your prune compiles: it must decide from the configuration alone (that is what it saves)")
    known = _known(arch)
    todo = list({_key(c): c for c in cs if _key(c) not in known}.values())
    if todo:
        todo.sort(key=lambda c: -(c["BM"] // c["WARPS_M"]) * (c["BN"] // c["WARPS_N"]))  # big warp tiles spill slowly
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda c: _compile(arch, c), todo))
        with _LOCK:
            known.update({_key(c): r for c, r in zip(todo, done)})
            _save(arch)
    return [known[_key(c)] for c in cs]


def name(c: dict) -> str:
    return f"{c['BM']}x{c['BN']}x{c['BK']} on {c['WARPS_M']}x{c['WARPS_N']} warps, {c['STAGES']} stages"


def _facts(r: Compiled | None, c: dict, g, limit: bool = True) -> str:
    shared = f"{shared_kib(c):.0f} KiB of shared memory" + (
        f" (a block may have {g.smem_per_block_bytes // 1024} KiB)" if limit or r is None else "")
    if r is None:
        return shared
    if r.error:
        return f"NVRTC refuses it: {r.error}"
    spill = f"{r.local_bytes} bytes of local memory per thread (spilled)" if r.local_bytes else "no local memory"
    return f"{r.registers} registers, {spill}, {shared}"


def explore(*cs: dict) -> None:
    """Print what the compiler makes of each configuration for an H100 (sm_90), one line each."""
    g = gpu(GPU_NAMES[0])
    fits = [c for c in cs if shared_kib(c) * 1024 <= g.smem_per_block_bytes]
    got = dict(zip(map(_key, fits), compiled_all(g.arch, fits)))
    for c in cs:
        print(f"{name(c)}: {_facts(got.get(_key(c)), c, g, limit=False)}")


def _where(g) -> str:
    return (f"on the {g.name.split()[0]} ({g.arch}, {g.smem_per_block_bytes // 1024} KiB per block, "
            f"{'with' if g.has('cp.async') else 'no'} cp.async)")


def _a_stub(prune_reason) -> bool:
    """The exercise's stub: None, or a function with a `...` left in it that keeps every configuration. A rule
    with a blank left over but unused is judged as it is."""
    if prune_reason is None or prune_reason is ...:
        return True
    if not callable(prune_reason) or not still_blank(prune_reason):
        return False
    token = _JUDGING.set(True)
    try:
        return all(prune_reason(dict(c), g) is None for g in gpus() for c in configs())
    except Exception:
        return False
    finally:
        _JUDGING.reset(token)


class SearchPrune:
    def check(self, prune_reason) -> Result:
        def body() -> str:
            cs = configs()
            reasons = {}
            token = _JUDGING.set(True)
            try:
                for g in gpus():
                    for c in cs:
                        got = prune_reason(dict(c), g)
                        if got is not None and not isinstance(got, str):
                            raise Fail(f"return a reason (a str) or None to keep the configuration, not {got!r}")
                        reasons[g.name, _key(c)] = got
            finally:
                _JUDGING.reset(token)
            counts = []
            for g in gpus():
                kept = [c for c in cs if reasons[g.name, _key(c)] is None]
                fits = [c for c in cs if shared_kib(c) * 1024 <= g.smem_per_block_bytes]
                truth = dict(zip(map(_key, fits), compiled_all(g.arch, fits)))
                runs = [c for c in kept if truth.get(_key(c)) and not truth[_key(c)].error]
                if len(runs) < len(kept):
                    c = next(c for c in kept if c not in runs)
                    raise Fail(f"{_where(g)} your prune keeps {len(kept) - len(runs)} configuration(s) that cannot "
                               f"run, e.g. {name(c)}: {_facts(truth.get(_key(c)), c, g)}")
                spills = [c for c in runs if truth[_key(c)].local_bytes > SMALL_SPILL]
                if spills:
                    c = max(spills, key=lambda c: truth[_key(c)].local_bytes)
                    raise Fail(f"{_where(g)} your prune keeps {len(spills)} configuration(s) that spill registers, "
                               f"e.g. {name(c)}: {_facts(truth[_key(c)], c, g)}")
                clean = [c for c in fits if not truth[_key(c)].error and not truth[_key(c)].local_bytes]
                lost = [c for c in clean if reasons[g.name, _key(c)] is not None]
                if len(clean) - len(lost) < KEEP * len(clean):
                    c = lost[0]
                    raise Fail(f"{_where(g)} your prune drops too much that runs well (keep {KEEP:.0%} of what "
                               f"compiles without spilling and fits), e.g. {name(c)} "
                               f"({reasons[g.name, _key(c)]!r}): {_facts(truth[_key(c)], c, g)}")
                small = len(runs) - len(clean) + len(lost)   # kept, and spilling SMALL_SPILL bytes or fewer
                counts.append(f"on the {g.name.split()[0]} it keeps {len(kept)} of {len(cs)}: "
                              f"{len(clean) - len(lost)} of the {len(clean)} that compile clean and fit"
                              + (f", {small} that spill a few bytes" if small else ""))
            return "correct: " + "; ".join(counts)
        return judge(TASK, (...,) if _a_stub(prune_reason) else (), body)
