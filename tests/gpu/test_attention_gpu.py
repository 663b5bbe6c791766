"""Attention ladder on a GPU: every rung on ragged S (causal and not, D 64 and 128) with fresh data and a
NaN-poisoned output, and bad inputs. Run with `pytest tests/gpu -o addopts=""`."""
import pytest
import torch

import kernels.attention as at
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
