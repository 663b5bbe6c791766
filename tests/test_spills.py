"""No register spills in what rung 6's searches time, on sm_75, sm_80 and sm_90, checked without a GPU.

Each search prunes twice: before compiling, on a register budget model (`registers_needed`: a thread may use
min(255, 65536 / threads) registers); after, on the compiled kernel's local memory (`cuda.without_spills`,
which raises ladder.runtime.errors.Spills). Here NVRTC compiles every configuration the model keeps; the SASS shows which
spill (LDL/STL), and each of those must have local memory, so the second prune catches it. The defaults that
run where no search has must not spill at all."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import kernels.attention as at
import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder import autotune, sass
from ladder.runtime import cuda
from ladder.runtime.errors import Spills
from ladder.roofline import datasheet_gpu

ARCHS = {"sm_75": "T4", "sm_80": "A100", "sm_90": "H100"}


def _compiled(job):
    arch, path, defines = job
    cubin = cuda.compile_cubin(path, arch, tuple(sorted(defines.items())))
    code = sass.disassemble(cubin, arch)
    usage = sass.resource_usage(cubin)
    return code.count("LDL") + code.count("STL"), usage["stack_bytes"] + usage["local_bytes"]


def _kept(arch):
    gpu = datasheet_gpu(ARCHS[arch])
    jobs = [(arch, "matmul/6_autotuned.cu", c) for c in mm.TUNER.configs() if mm.prune_reason(c, gpu) is None]
    jobs += [(arch, "attention/6_autotuned.cu", dict(HEAD_DIM=D, **c))
             for D, tuner in at.TUNERS.items() for c in tuner.configs() if tuner.prune(c, gpu) is None]
    return jobs


@pytest.mark.parametrize("arch", ARCHS)
def test_every_spill_the_model_lets_through_has_local_memory(arch):
    jobs = _kept(arch)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_compiled, jobs))
    unseen = [job for job, (spills, local) in zip(jobs, results) if spills and not local]
    assert not unseen, f"spills without local memory: the compiled-kernel prune would miss {unseen}"
    timed = [job for job, (spills, local) in zip(jobs, results) if not local]
    assert all(not spills for spills, local in results if not local)
    caught = len(jobs) - len(timed)
    assert len(timed) >= 10 and caught <= len(jobs) // 5, (arch, len(jobs), caught)  # the model does most of it
    print(f"{arch}: {len(jobs)} kept by the register model, {caught} more pruned for spilling, "
          f"{len(timed)} timed, none spilling")


@pytest.mark.parametrize("arch", ARCHS)
def test_the_defaults_never_spill(arch):
    gpu = datasheet_gpu(ARCHS[arch])
    jobs = [(arch, "matmul/6_autotuned.cu", cm.default_config(gpu)),
            (arch, "matmul/5_pipelined.cu", cm.pipelined_config(gpu))]
    jobs += [(arch, f"attention/{name}.cu", dict(HEAD_DIM=D, **tuner.default(gpu)))
             for D, tuner in at.TUNERS.items() for name in ("5_pipelined", "6_autotuned")]
    for job in jobs:
        assert _compiled(job) == (0, 0), job


def test_a_search_prunes_what_spills(monkeypatch):
    """A configuration whose compile raises Spills is listed as pruned, with the reason, and never timed."""
    gpu = datasheet_gpu("H100")
    monkeypatch.setattr(autotune, "detect", lambda: gpu)
    monkeypatch.setattr(autotune, "store", lambda slug, report: None)

    def build(c):
        if c["X"] == 2:
            raise Spills("spills registers: 8 bytes of local memory per thread")

    ran = []
    tuner = autotune.Tuner("toy", "cuda:toy", {"X": [1, 2]}, prune=lambda c, g: None, compile=build,
                           run=lambda c, *args, out: ran.append(c["X"]) or out.fill_(1.0),
                           default=lambda g: {"X": 1})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # the toy runs on the CPU
    monkeypatch.setattr(autotune, "search_bench", lambda fn, *a: [1.0])
    monkeypatch.setattr(autotune, "compare", lambda out, ref: type("V", (), {"ok": True})())
    report = tuner.search((torch.ones(2, 2), torch.ones(2, 2)), torch.ones(2, 2), 1.0, lambda: torch.empty(2, 2))
    assert report.pruned == [{"config": {"X": 2}, "reason": "spills registers: 8 bytes of local memory per thread"}]
    assert 2 not in ran and report.best == {"X": 1}
