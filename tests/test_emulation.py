"""Emulation without a GPU: KERNEL_LADDER_EMULATE=sm_75|sm_80 makes a big GPU answer as a T4 or an A100
(limits, datasheet, a name and slug that say so), refuses recordings, and leaves only the CUDA C++ rungs,
compiled to PTX for the emulated architecture. tests/gpu/test_emulation_gpu.py runs them."""
import pytest
import torch

import kernels.attention as at
import kernels.matmul as mm
import kernels.vector_add as va
from kernels.cuda import matmul as cm
from ladder import results, runner
from ladder.runtime import cuda, hardware
from ladder.runtime.hardware import GPU
from ladder.runtime.errors import NotAvailable

H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, hardware.datasheet_for("H100"))
T4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, hardware.datasheet_for("T4"))
PROBLEMS = [va.PROBLEM, mm.PROBLEM, at.PROBLEM]


@pytest.mark.parametrize("arch, capability, sms, smem, model", [
    ("sm_75", (7, 5), 40, 64 << 10, "T4"), ("sm_80", (8, 0), 108, 166912, "A100")])
def test_an_emulated_gpu_has_the_small_gpus_limits_and_says_so(arch, capability, sms, smem, model):
    gpu = hardware.emulate(H100, arch)
    assert (gpu.capability, gpu.sm_count, gpu.smem_per_block_bytes, gpu.arch) == (capability, sms, smem, arch)
    assert gpu.l2_bytes == H100.l2_bytes and gpu.memory_bytes == H100.memory_bytes  # what the kernels get
    assert gpu.name == f"emulated {model} ({arch}) on NVIDIA H100 80GB HBM3"
    assert gpu.datasheet.name.startswith(model) and gpu.emulated_on == H100.name
    article = "an" if model == "A100" else "a"
    assert gpu.emulation_note == (f"emulated {arch} on NVIDIA H100 80GB HBM3: correctness only, "
                                  f"timings are not {article} {model}'s")
    assert gpu.emulation_note in hardware.describe(gpu) and H100.emulation_note is None


def test_an_emulated_slug_never_names_a_real_recording():
    slugs = {hardware.emulate(H100, arch).slug for arch in hardware.EMULATED}
    assert all(s.startswith("emulated-") for s in slugs)
    recorded = {p.stem for p in results.RESULTS_DIR.glob("*.json")}
    assert recorded and not slugs & recorded
    assert not any(hardware.slug(sheet.name).startswith("emulated") for _, sheet in hardware.DATASHEETS)


def test_emulation_covers_older_architectures_only():
    with pytest.raises(NotAvailable, match="emulation covers sm_75, sm_80"):
        hardware.emulate(H100, "sm_86")
    with pytest.raises(NotAvailable, match="older architecture"):
        hardware.emulate(T4, "sm_80")


@pytest.fixture
def emulated_t4(monkeypatch):
    gpu = hardware.emulate(H100, "sm_75")
    monkeypatch.setattr(hardware, "detect", lambda index=0: gpu)
    return gpu


def test_recording_is_refused_under_emulation(emulated_t4):
    with pytest.raises(NotAvailable, match="Recording is refused under KERNEL_LADDER_EMULATE: emulated sm_75 on"):
        runner.measure_live([va.PROBLEM])


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_only_cuda_rungs_run_under_emulation(problem, emulated_t4):
    for rung in problem.rungs:
        reason = rung.unavailable_reason(emulated_t4)
        if rung.backend != "cuda":   # Triton and PyTorch would run the H100's code
            assert "compiles for the real GPU, not for sm_75" in reason, rung.label
        elif rung.needs == "wgmma":  # matmul rungs 7-12, attention rung 7: Hopper's instructions
            assert reason.endswith("needs wgmma")
        else:
            assert reason is None, rung.label


def test_cuda_sources_compile_to_ptx_for_the_emulated_architecture(emulated_t4, monkeypatch):
    assert cuda._target("matmul/5_pipelined.cu", None) == "compute_75"
    for hopper_only in ("matmul/7_wgmma.cu", "matmul/8_tma_warp_specialized.cu", "matmul/9_persistent.cu",
                        "matmul/10_cluster_multicast.cu", "matmul/11_tma_store.cu", "attention/7_wgmma_tma.cu",
                        "attention/8_warp_specialized.cu", "attention/9_pingpong.cu",
                        "attention/10_intra_overlap.cu", "attention/11_fast_exp2.cu",
                        "attention/12_three_consumers.cu", "attention/13_persistent.cu",
                        "attention/14_critical_path.cu", "attention/15_autotuned.cu"):
        with pytest.raises(NotAvailable, match="built for sm_90a: not on the emulated T4"):
            cuda._target(hopper_only, "sm_90a")
    # __CUDA_ARCH__ follows the virtual architecture: rung 5's cp.async path from compute_80 only
    for arch, async_copies in (("compute_75", False), ("compute_80", True)):
        ptx = cuda.compile_cubin("matmul/5_pipelined.cu", arch, tuple(sorted(cm.TWO_STAGES.items()))).decode()
        assert f".target sm_{arch[-2:]}" in ptx and ("cp.async" in ptx) == async_copies


def test_rung_6_defaults_fit_every_gpu_in_the_table():
    for _, sheet in hardware.DATASHEETS:
        gpu = GPU(sheet.name, sheet.capability, sheet.sm_count, 0, sheet.smem_per_block_bytes, 0, sheet)
        assert mm.prune_reason(mm.TUNER.default(gpu), gpu) is None, sheet.name
        for D, tuner in at.TUNERS.items():
            assert tuner.prune(tuner.default(gpu), gpu) is None, (sheet.name, D)
