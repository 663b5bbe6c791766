"""The L2 ceiling on a GPU: ladder.ceilings.l2_TBps measures a bandwidth above DRAM's (the buffer stays in L2)
and below what the SMs could ask for, and measure() records it beside the others (an older cache gains it)."""
from __future__ import annotations

import json

import pytest
import torch

from ladder import ceilings
from ladder.runtime.hardware import detect


@pytest.fixture(scope="module")
def gpu():
    found = detect()
    assert found is not None, "tests/gpu needs a CUDA GPU"
    return found


def test_l2_read_sums_what_it_reads(gpu):
    x = torch.rand(5 * ceilings.L2_BLOCK, device="cuda")
    out = ceilings.l2_read(x, passes=3, programs=2 * gpu.sm_count)
    assert torch.isclose(out.sum(), 3 * x.sum(), rtol=1e-4)


def test_l2_bandwidth_is_above_dram_and_steady(gpu):
    dram = ceilings.copy_TBps()
    l2 = [ceilings.l2_TBps(gpu) for _ in range(2)]
    print(f"{gpu.name}: DRAM copy {dram:.2f} TB/s, L2 read {l2[0]:.2f} and {l2[1]:.2f} TB/s")
    assert all(x > 1.3 * dram for x in l2), "a buffer that fits in L2 should read faster than DRAM copies"
    assert all(x < 100 for x in l2)
    assert abs(l2[0] - l2[1]) < 0.15 * max(l2), "two measurements more than 15% apart"
    # a buffer 8x larger than L2 comes from DRAM: far slower than the one that fits
    assert ceilings.l2_TBps(gpu, nbytes=8 * gpu.l2_bytes, passes=4) < 0.8 * min(l2)


def test_measure_adds_l2_to_an_older_cache(gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(ceilings, "CACHE_DIR", tmp_path)
    old = {"copy_TBps": 3.0, "fp32_TFLOPs": 50.0, "fp16_tc_TFLOPs": 600.0}
    (tmp_path / f"ceilings-{gpu.slug}.json").write_text(json.dumps(old))
    result = ceilings.measure(gpu)
    assert {k: result[k] for k in old} == old and result["l2_TBps"] > 0
    assert json.loads((tmp_path / f"ceilings-{gpu.slug}.json").read_text()) == result


# ---------------------------------------------------------------- instruction roofs (mma.sync, wgmma)

def test_mma_sync_peak_computes_what_it_counts(gpu):
    if not gpu.has("tensor_cores"):
        pytest.skip(f"{gpu.name} has no tensor cores: no mma.sync roof")
    out = ceilings.mma_sync_run(gpu, iters=16, blocks=2)
    assert (out == ceilings.mma_sync_expected(16)).all(), out[:8]


def test_wgmma_peak_computes_what_it_counts(gpu):
    if not ceilings.has_wgmma(gpu):
        pytest.skip(f"{gpu.name} ({gpu.arch}) has no wgmma: no wgmma roof")
    out = ceilings.wgmma_run(gpu, iters=16, blocks=2)
    assert (out == ceilings.wgmma_expected(16)).all(), out[:8]


def test_instruction_roofs_are_plausible_and_steady(gpu):
    mma = [ceilings.mma_sync_TFLOPs(gpu) for _ in range(2)]
    if mma[0] is None:
        pytest.skip(f"{gpu.name} has no tensor cores")
    wg = [ceilings.wgmma_TFLOPs(gpu) for _ in range(2)]
    sheet = gpu.datasheet.fp16_tc_TFLOPs if gpu.datasheet else None
    print(f"{gpu.name}: mma.sync {mma[0]:.0f} and {mma[1]:.0f} TFLOP/s, "
          + (f"wgmma {wg[0]:.0f} and {wg[1]:.0f} TFLOP/s, " if wg[0] else "no wgmma, ")
          + f"datasheet fp16 tensor {sheet} TFLOP/s")
    assert abs(mma[0] - mma[1]) < 0.1 * max(mma), "two mma.sync measurements more than 10% apart"
    if ceilings.has_wgmma(gpu):   # an H100 or H200: mma.sync well below wgmma, wgmma near the datasheet's 989
        assert 200 < mma[0] < 1000 and 500 < wg[0] < 1000
        assert abs(wg[0] - wg[1]) < 0.1 * max(wg), "two wgmma measurements more than 10% apart"
        assert mma[0] < wg[0]
    else:   # before Hopper mma.sync is the tensor cores' own instruction: near the datasheet's rate
        assert wg == [None, None]
        assert sheet is None or 0.5 * sheet < mma[0] < 1.1 * sheet


def test_measure_adds_instruction_roofs_to_an_older_cache(gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(ceilings, "CACHE_DIR", tmp_path)
    old = {"copy_TBps": 3.0, "l2_TBps": 9.0, "fp32_TFLOPs": 50.0, "fp16_tc_TFLOPs": 600.0}
    (tmp_path / f"ceilings-{gpu.slug}.json").write_text(json.dumps(old))
    result = ceilings.measure(gpu)
    assert {k: result[k] for k in old} == old
    assert ("mma_sync_TFLOPs" in result) == gpu.has("tensor_cores")
    assert ("wgmma_TFLOPs" in result) == ceilings.has_wgmma(gpu)
    print("measured: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()))
