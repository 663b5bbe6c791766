"""Attention ladder on a GPU: every rung on ragged S (causal and not, D 64 and 128) with fresh data and a
NaN-poisoned output, and bad inputs. Run with `pytest tests/gpu -o addopts=""`."""
import pytest
import torch

import kernels.attention as at
from ladder.check import compare
from ladder.runner import check_rung, unavailable

RUNNABLE = [r for r in at.PROBLEM.rungs if unavailable(r) is None]


@pytest.mark.parametrize("rung", RUNNABLE, ids=lambda r: r.label)
def test_every_rung_correct_on_ragged_s(rung):
    for shape, result in check_rung(at.PROBLEM, rung, seed=7):
        assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("rung", [r for r in RUNNABLE if r.backend == "triton"], ids=lambda r: r.label)
def test_bad_inputs_are_named(rung):
    q = torch.randn(1, 2, 64, 64, device="cuda").half()
    with pytest.raises(ValueError, match="is on cpu"):
        rung.run(q.cpu(), q.cpu(), q.cpu(), False)
    with pytest.raises(ValueError, match="D=96 is not supported"):
        x = torch.randn(1, 2, 64, 96, device="cuda").half()
        rung.run(x, x, x, False)


def test_cuda_search_times_what_fits_and_the_winner_is_used():
    shape = (1, 4, 1000, 128, 1)
    report, = at.tune_cuda([shape])
    assert report.failed == [] and len(report.timed) >= 10, report.summary()
    assert report.best == at.TUNERS[128].best(shape)
    autotuned = next(r for r in RUNNABLE if r.label == "cuda:6_autotuned")
    for shape_, result in check_rung(at.PROBLEM, autotuned, [shape, (2, 3, 333, 128, 0)], seed=3):
        assert result.ok, (shape_, str(result))


@pytest.mark.parametrize("rung", [r for r in RUNNABLE if r.backend == "torch"], ids=lambda r: r.label)
def test_anchors_take_misaligned_views_and_empty_inputs_without_faulting(rung):
    base = torch.randn(1 * 2 * 300 * 64 + 1, device="cuda").half()
    q = base[1:].view(1, 2, 300, 64)  # starts 2 bytes into its allocation: SDPA's kernels would fault
    k, v = torch.randn_like(q), torch.randn_like(q)
    assert q.data_ptr() % 16 == 2
    for causal in (False, True):
        assert compare(rung.run(q, k, v, causal), at.reference(q, k, v, causal)).ok
    empty = torch.empty(1, 2, 0, 64, device="cuda").half()
    assert rung.run(empty, empty, empty, False).shape == (1, 2, 0, 64)
    torch.cuda.synchronize()  # nothing sticky: the next CUDA call works
    assert torch.ones(1, device="cuda").item() == 1
