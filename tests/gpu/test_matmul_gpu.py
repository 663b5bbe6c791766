"""CUDA and Triton matmul ladders (and the fused matmul + bias + ReLU) on a GPU: correctness on ragged shapes with fresh data, bad inputs, edge cases,
and one autotuning search. Run with `pytest tests/gpu -o addopts=""`."""
import pytest
import torch

import kernels.matmul as mm
import kernels.matmul_bias_relu as mbr
from kernels import matmul_triton_search as triton_search
from ladder import autotune
from ladder.check import compare
from ladder.runner import check_rung, unavailable

PROBLEM = mm.PROBLEM
RUNNABLE = [r for r in PROBLEM.rungs if unavailable(r) is None]
KERNELS = [r for r in RUNNABLE if r.backend != "torch"]


@pytest.mark.parametrize("rung", RUNNABLE, ids=lambda r: r.label)
def test_every_rung_correct_on_ragged_shapes(rung):
    for seed in (0, 1):  # fresh random data each time, output poisoned with NaN first
        for shape, result in check_rung(PROBLEM, rung, seed=100 * seed):
            assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("rung", KERNELS, ids=lambda r: r.label)
def test_bad_inputs_are_named(rung):
    a = torch.randn(64, 32, device="cuda").half()
    b = torch.randn(32, 48, device="cuda").half()
    with pytest.raises(ValueError, match="float16"):
        rung.run(a.float(), b)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        rung.run(a, b[:31])
    with pytest.raises(ValueError, match="not contiguous"):   # every other column: no rung reads it in place
        rung.run(a, torch.randn(32, 96, device="cuda").half()[:, ::2])
    with pytest.raises(ValueError, match="is on cpu"):
        rung.run(a.cpu(), b.cpu())


@pytest.mark.parametrize("rung", KERNELS, ids=lambda r: r.label)
def test_views_that_do_not_start_on_16_bytes_and_empty_dimensions(rung):
    base = torch.randn(65 * 40 + 1, device="cuda").half()
    a = base[1:].view(65, 40)  # starts 2 bytes into an allocation
    b = torch.randn(40, 24, device="cuda").half()
    assert compare(rung.run(a, b), a.double() @ b.double()).ok
    assert rung.run(a[:0], b).shape == (0, 24)
    zero_k = rung.run(torch.empty(5, 0, device="cuda").half(), torch.empty(0, 7, device="cuda").half())
    assert torch.equal(zero_k, torch.zeros(5, 7, device="cuda").half())


@pytest.mark.parametrize("rung", KERNELS, ids=lambda r: r.label)
def test_an_output_view_that_starts_2_bytes_in(rung):
    """out = a view 2 bytes into its allocation: the tensor-core rungs store pairs of halves (4 bytes), so their
    launcher computes into an aligned C and copies it in; every rung is right and writes nothing outside out."""
    a, b = torch.randn(300, 72, device="cuda").half(), torch.randn(72, 136, device="cuda").half()
    base = torch.full((300 * 136 + 2,), float("nan"), device="cuda").half()
    out = base[1:1 + 300 * 136].view(300, 136)
    assert rung.run(a, b, out=out) is out and compare(out, a.double() @ b.double()).ok
    assert base[0].isnan() and base[-1].isnan()


def test_autotune_search_reports_and_caches_its_winner():
    shape = (512, 512, 512)
    report = mm.tune([shape])[0]
    assert report.tried + len(report.pruned) == len(mm.TUNER.configs())
    assert not report.failed and report.timed[0]["ms"] <= report.timed[-1]["ms"]
    assert mm.TUNER.best(shape) == report.best


def test_triton_search_reports_what_it_did():
    [report] = triton_search.tune([(2048, 2048, 2048)])  # 17 GFLOP: worth a search (autotune.SEARCH_MIN_FLOP)
    assert report.tried + len(report.pruned) == len(triton_search.autotuned_kernel.configs)
    # the prune counts the pipeline's buffers; the epilogue's scratch can still overflow shared memory
    assert all("shared memory" in f["reason"] for f in report.failed), report.failed
    assert report.timed and report.timed[0]["ms"] <= report.timed[-1]["ms"]
    assert report.best == autotune.triton_config_dict(triton_search.autotuned_kernel.best_config)
    [small] = triton_search.tune([(512, 512, 512)])      # 0.27 GFLOP: the smallest tiles, no search
    assert len(small.timed) + len(small.untimed) == 1
    assert len(small.pruned) == len(triton_search.autotuned_kernel.configs) - 1
    assert any("microseconds" in p["reason"] for p in small.pruned)


@pytest.mark.parametrize("rung", [r for r in mbr.PROBLEM.rungs if unavailable(r) is None], ids=lambda r: r.label)
def test_bias_relu_rungs_correct_on_ragged_shapes(rung):
    for shape, result in check_rung(mbr.PROBLEM, rung, seed=3):
        assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("rung", [r for r in KERNELS if r.label in ("cuda:6_autotuned", "cuda:12_autotuned")],
                         ids=lambda r: r.label)
def test_searched_rungs_validate_their_operands_once(rung, monkeypatch):
    """Rungs 6 and 12 pick a configuration by the validated shape and launch with it: one validation a call."""
    calls = []
    validate = mm._operands
    monkeypatch.setattr(mm, "_operands", lambda *args, **kw: calls.append(args) or validate(*args, **kw))
    a, b = (torch.randn(s, device="cuda").half() for s in ((300, 136), (136, 264)))
    out = rung.run(a, b)
    assert len(calls) == 1 and compare(out, mm.reference(a, b)).ok
