"""The instruction roofs without a GPU: the mma.sync and wgmma microbenchmarks compile for their architectures,
and their hot loop is the tensor-core instruction and nothing that touches memory (SASS); measure() records the
roofs where the GPU has them; the roofline draws them only when the ceilings hold them, labelled in place, and its
key says which unit each rung uses."""
from __future__ import annotations

import json
import re
import warnings

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import kernels.matmul as mm  # noqa: E402
from ladder import ceilings, figcheck, figures, roofline, sass  # noqa: E402
from ladder.runtime import cuda
from ladder import results as results_mod  # noqa: E402
from ladder.roofline import datasheet_gpu  # noqa: E402

MMA_SYNC, WGMMA = "ceilings/mma_sync_peak.cu", "ceilings/wgmma_peak.cu"
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
MEMORY = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LD", "ST", "LDC", "LDGSTS", "LDSM", "ATOM", "RED")


def instructions(s: sass.Sass) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of every instruction of the (only) kernel."""
    (text,) = s.functions.values()
    return [(int(a, 16), op, rest) for a, op, rest in _INSTRUCTION.findall(text)]


def hot_loop(s: sass.Sass, family: str) -> list[str]:
    """Opcodes of the loop (a backward branch and the code it jumps back over) that holds `family`."""
    code = instructions(s)
    for address, op, rest in code:
        target = re.search(r"0x([0-9a-f]+)", rest)
        if op == "BRA" and target and int(target.group(1), 16) < address:
            body = [o for a, o, _ in code if int(target.group(1), 16) <= a <= address]
            if any(o == family or o.startswith(family + ".") for o in body):
                return body
    raise AssertionError(f"no loop holds {family}")


def family(ops, name: str) -> int:
    return sum(op == name or op.startswith(name + ".") for op in ops)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_mma_sync_loop_is_hmma_only(arch):
    s = sass.cuda_sass(MMA_SYNC, arch)
    loop = hot_loop(s, "HMMA")
    # CHAINS m16n8k16 per iteration; sm_75 has only m16n8k8: two of them per m16n8k16 (the same FLOPs)
    chains = ceilings.MMA_SYNC["chains"]
    assert {op for op in loop if op.startswith("HMMA")} == ({"HMMA.1688.F32"} if arch == "sm_75" else {"HMMA.16816.F32"})
    assert family(loop, "HMMA") == chains * (2 if arch == "sm_75" else 1)
    assert not [op for op in loop if op.split(".")[0] in MEMORY], loop      # registers only
    assert len(loop) - family(loop, "HMMA") <= 8                            # a counter, a compare, a branch
    ops = [op for _, op, _ in instructions(s)]
    assert family(ops, "STG") == 1 and family(ops, "LDG") == 0              # the one store after the loop
    assert sum(family(ops, f) for f in ("LDL", "STL")) == 0
    usage = sass.resource_usage(cuda.compile_cubin(MMA_SYNC, arch))
    assert usage["local_bytes"] == usage["stack_bytes"] == 0 and usage["registers"] <= 64   # no spills


def test_wgmma_loop_is_hgmma_only():
    s = sass.cuda_sass(WGMMA, "sm_90a")
    loop = hot_loop(s, "HGMMA")
    assert family(loop, "HGMMA") == ceilings.WGMMA["k_steps"] and family(loop, "HMMA") == 0
    assert s.text.count("HGMMA.64x256x16.F32") == family(loop, "HGMMA")     # m64n256k16, all of them in the loop
    assert not [op for op in loop if op.split(".")[0] in MEMORY], loop      # A and B are read by the wgmma itself
    assert family(loop, "BAR") == 0 and family(loop, "WARPGROUP.DEPBAR") == 1   # wait_group 1: one group stays in flight
    ops = [op for _, op, _ in instructions(s)]
    assert family(ops, "STG") == 1 and family(ops, "LDG") == 0
    usage = sass.resource_usage(cuda.compile_cubin(WGMMA, "sm_90a"))
    assert usage["local_bytes"] == usage["stack_bytes"] == 0 and usage["registers"] <= 255   # no spills
    assert usage["shared_bytes"] <= 48 << 10        # static tiles: no opt-in to more shared memory needed


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wgmma_peak_is_hopper_only(arch):
    with pytest.raises(cuda.CompileError, match="sm_90a"):
        cuda.compile_cubin(WGMMA, arch)


def test_the_checked_sums_are_exact():
    # every product is a power of two: fp32 sums them exactly, so the GPU run can be checked with ==
    assert ceilings.mma_sync_expected(1024) == 512.0 and ceilings.wgmma_expected(2048) == 16384.0
    assert int(ceilings._half2_bits(ceilings.OPERAND)) == 0x28002800   # 2^-5 in fp16, twice


def test_instruction_roofs_exist_where_the_instruction_does():
    h100, a100, t4 = (datasheet_gpu(n) for n in ("H100", "A100", "T4"))
    assert ceilings.has_wgmma(h100) and not ceilings.has_wgmma(a100) and not ceilings.has_wgmma(t4)
    assert ceilings.wgmma_TFLOPs(a100) is None      # not measured: answered before any GPU work


def test_measure_adds_instruction_roofs_and_leaves_out_one_that_failed(tmp_path, monkeypatch):
    gpu = datasheet_gpu("H100")
    monkeypatch.setattr(ceilings, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(ceilings, "require_gpu", lambda what: None)
    monkeypatch.setattr(ceilings, "mma_sync_TFLOPs", lambda g: 600.0)

    def broken(g):
        raise ceilings.CeilingError("wgmma_peak.cu failed on the H100 SXM (sm_90): CUDADriverError: launch failed")
    monkeypatch.setattr(ceilings, "wgmma_TFLOPs", broken)
    old = {"copy_TBps": 3.0, "l2_TBps": 9.0, "fp32_TFLOPs": 50.0, "fp16_tc_TFLOPs": 690.0}
    cache = tmp_path / f"ceilings-{gpu.slug}.json"
    cache.write_text(json.dumps(old))
    with pytest.warns(RuntimeWarning, match="wgmma_TFLOPs not measured: .*launch failed"):
        result = ceilings.measure(gpu)
    # the old cache's fp16_tc_TFLOPs was cuBLAS's speed: kept as such; the tensor-core roof is the instruction's
    expected = {"copy_TBps": 3.0, "l2_TBps": 9.0, "fp32_TFLOPs": 50.0, "cublas_TFLOPs": 690.0,
                "mma_sync_TFLOPs": 600.0, "fp16_tc_TFLOPs": 600.0}
    assert result == expected and json.loads(cache.read_text()) == result
    monkeypatch.setattr(ceilings, "wgmma_TFLOPs", lambda g: 850.0)     # the next call tries it again
    assert ceilings.measure(gpu)["wgmma_TFLOPs"] == 850.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a100 = datasheet_gpu("A100")   # no wgmma there: nothing to measure, nothing to warn about
        (tmp_path / f"ceilings-{a100.slug}.json").write_text(json.dumps({**old, "mma_sync_TFLOPs": 250.0}))
        assert ceilings.measure(a100) == {**expected, "mma_sync_TFLOPs": 250.0, "fp16_tc_TFLOPs": 250.0}


def test_each_rung_says_its_unit():
    rungs = {r.label: r for r in mm.PROBLEM.rungs}
    h100, a100, t4 = (datasheet_gpu(n) for n in ("H100", "A100", "T4"))
    expect = {"cuda:3b_register_blocked": ("CUDA cores",) * 3, "cuda:6_autotuned": ("mma.sync",) * 3,
              "cuda:7_wgmma": ("wgmma", "wgmma", "wgmma"), "triton:5_pipelined": ("wgmma", "mma.sync", "CUDA cores"),
              "torch:cublas": ("tensor cores",) * 3}
    for label, units in expect.items():
        assert tuple(roofline.unit(mm.PROBLEM, rungs[label], g) for g in (h100, a100, t4)) == units, label


rec = results_mod.load()
ROOFS = {"mma_sync_TFLOPs": 610.0, "wgmma_TFLOPs": 845.0}


def _cuda_matmul(ceilings_: dict):
    return figures.ladder_roofline(rec.runs("matmul"), rec.profiles("matmul"), mm.PROBLEM.only("cuda", "torch"),
                                   (4096,) * 3, ceilings_, rec.data.get("datasheet"), rec.label, "CUDA matmul 4096³")


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_roofline_draws_instruction_roofs_only_when_measured():
    without = _cuda_matmul({k: v for k, v in rec.ceilings.items() if k not in ROOFS})
    gids = {line.get_gid() for ax in without.axes for line in ax.get_lines() if line.get_gid()}
    assert not any(g.startswith(("mma.sync", "wgmma")) for g in gids)
    key = [t.get_text() for t in without.legends[0].get_texts()]
    assert any(t.startswith("no mma.sync or wgmma roof") for t in key)
    plt.close(without)

    fig = _cuda_matmul({**rec.ceilings, **ROOFS})
    try:
        gids = {line.get_gid() for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
        assert {"mma.sync 610 TFLOP/s", "wgmma 845 TFLOP/s"} <= gids
        key = [t.get_text() for t in fig.legends[0].get_texts()]
        named = set(_texts(fig)) | set(key)  # in place, or in the key where the roofs crowd (no room on the line)
        assert {"mma.sync 610 TFLOP/s", "wgmma 845 TFLOP/s"} <= named
        assert any("cuda:4_tensor_core" in t and t.endswith("[mma.sync]") for t in key)
        assert any("cuda:7_wgmma" in t and t.endswith("[wgmma]") for t in key)
        assert any("3b_register_blocked" in t and t.endswith("[CUDA cores]") for t in key)
        assert not any(t.startswith("no mma.sync") for t in key)
        assert figcheck.collisions(fig) == []
    finally:
        plt.close(fig)


def test_roofline_with_only_mma_sync_is_readable():
    # an A100 (no wgmma): the Triton ladder on mma.sync, one instruction roof
    pts = [roofline.Point("triton:5_pipelined", 900.0, 240.0, "triton", unit="mma.sync"),
           roofline.Point("torch:cublas", 1000.0, 280.0, "torch", unit="tensor cores")]
    ceil = {"copy_TBps": 1.9, "fp32_TFLOPs": 19.0, "fp16_tc_TFLOPs": 285.0, "mma_sync_TFLOPs": 290.0}
    ax = roofline.plot(pts, ceil, {"copy_TBps": 2.0, "fp32_TFLOPs": 19.5, "fp16_tc_TFLOPs": 312.0}, source="test")
    try:
        assert "mma.sync 290 TFLOP/s" in [t.get_text() for a in ax.figure.axes for t in a.texts]   # the zoom has room
        assert not any("wgmma" in (line.get_gid() or "") for line in ax.get_lines())
    finally:
        plt.close(ax.figure)


def test_a_roof_with_no_room_on_the_plot_is_named_in_the_key():
    pts = [roofline.Point("cuda:6_autotuned", 900.0, 240.0, "cuda", unit="mma.sync")]   # one rung: no zoom panel
    ceil = {"copy_TBps": 1.9, "fp32_TFLOPs": 19.0, "fp16_tc_TFLOPs": 285.0, "mma_sync_TFLOPs": 290.0}
    ax = roofline.plot(pts, ceil, {"copy_TBps": 2.0, "fp32_TFLOPs": 19.5, "fp16_tc_TFLOPs": 312.0}, source="test")
    try:
        drawn = {line.get_gid() for line in ax.get_lines() if line.get_gid()}
        named = {t.get_text() for t in ax.texts} | {t.get_text() for t in ax.figure.legends[0].get_texts()}
        assert drawn <= named
        assert figcheck.collisions(ax.figure) == []
    finally:
        plt.close(ax.figure)
