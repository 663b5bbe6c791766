"""The T4 and A100 code paths on this GPU (KERNEL_LADDER_EMULATE=sm_75 / sm_80): every CUDA rung of every
problem, compiled to PTX for the emulated architecture and JIT-compiled by the driver, checked at ragged shapes
with fresh data and a NaN-poisoned output. Run with `pytest tests/gpu -o addopts=""`."""
import pytest
import torch

import kernels.attention as at
import kernels.matmul as mm
import kernels.vector_add as va
from kernels.cuda import matmul as cm
from ladder import autotune
from ladder.runtime import cuda, hardware
from ladder.runner import check_rung, unavailable
from ladder.runtime.world import WORLD

# Beyond each problem's check shapes: more ragged ones (S = 129 at D = 64 once faulted on the T4 path).
EXTRA_SHAPES = {
    "vector_add": [],
    "matmul": [(127, 255, 129), (513, 257, 1000), (64, 72, 24)],
    "attention": [(1, 2, 129, 64, 0)] + [(1, 2, S, D, causal) for S in (100, 333, 1000) for D in (64, 128)
                                          for causal in (0, 1)],
}
CUDA_RUNGS = [(p, r) for p in (va.PROBLEM, mm.PROBLEM, at.PROBLEM) for r in p.rungs if r.backend == "cuda"]


@pytest.fixture(params=sorted(hardware.EMULATED))
def emulated(request, monkeypatch, tmp_path):
    """This GPU answering as the one the parameter names, with no search cached (rung 6 runs its default)."""
    monkeypatch.setenv(hardware.EMULATE_ENV, request.param)
    hardware.detect.cache_clear()
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    autotune._BEST.clear()
    yield request.param
    monkeypatch.undo()
    hardware.detect.cache_clear()
    autotune._BEST.clear()


def test_this_gpu_answers_as_the_emulated_one(emulated):
    gpu = hardware.detect()
    real = torch.cuda.get_device_name()
    assert gpu.arch == emulated and gpu.emulated_on == real and gpu.sm_count == {"sm_75": 40, "sm_80": 108}[emulated]
    assert WORLD.name == f"GPU ({gpu.emulation_note})"
    assert gpu.emulation_note.startswith(f"emulated {emulated} on {real}: correctness only, timings are not")


def test_kernels_are_built_for_the_emulated_architecture(emulated, tmp_path):
    source = tmp_path / "arch.cu"
    source.write_text('extern "C" __global__ void arch(int* x) { x[0] = __CUDA_ARCH__; }\n')
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    cuda.launch(cuda.load(source), "arch", 1, 1, (out,))
    assert out.item() == int(emulated.removeprefix("sm_")) * 10


@pytest.mark.parametrize("problem, rung", CUDA_RUNGS, ids=lambda x: getattr(x, "label", getattr(x, "name", "")))
def test_every_cuda_rung_correct_under_emulation(problem, rung, emulated):
    reason = unavailable(rung)
    if rung.needs == "wgmma":  # rungs 7 and 8, Hopper's instructions: N/A on the older GPUs, said so
        assert reason.endswith("needs wgmma")
        return
    assert reason is None
    shapes = problem.check_shapes + EXTRA_SHAPES[problem.name]
    for shape, result in check_rung(problem, rung, shapes, seed=11):
        assert result.ok, (emulated, rung.label, shape, str(result))
    torch.cuda.synchronize()  # no sticky error left behind


def test_rung_6_default_fits_the_emulated_gpu(emulated):
    gpu = hardware.detect()
    config = mm.TUNER.best((1000, 1000, 1000))
    assert config == cm.default_config(gpu) and mm.prune_reason(config, gpu) is None
    assert (config["STAGES"] == 2) == (emulated == "sm_75")
