"""The attention ladder's memory model (kernels.attention.workspace_bytes / peak_bytes), without a GPU: the
materialized rungs hold B·H·S² fp32 scores, the fused ones nothing; and what the Triton launchers really
allocate in the interpreter agrees with it. (On a GPU, lesson 04 measures it with torch.cuda.max_memory_allocated.)"""
import pytest
import torch

import kernels.attention as at

BIG = (4, 32, 16384, 64, 0)            # lesson 04's largest S: the score matrix cannot exist on an H100
MATERIALIZED = ["cuda:1_naive", "cuda:2_coalesced", "triton:1_naive", "triton:2_coalesced"]
LADDER = [r for r in at.PROBLEM.rungs if r.backend != "torch"]


def test_the_score_matrix_is_the_workspace_of_the_materialized_rungs():
    for label in MATERIALIZED:
        assert at.workspace_bytes(label, BIG) == 4 * 32 * 16384 ** 2 * 4      # 137 GB > an H100's 80 GB
        assert at.workspace_bytes(label, BIG[:4] + (1,)) == at.workspace_bytes(label, BIG)  # causal: all of it
    assert at.peak_bytes("triton:1_naive", BIG) == 4 * 2 * 4 * 32 * 16384 * 64 + 4 * 32 * 16384 ** 2 * 4


def test_fused_rungs_need_no_workspace():
    fused = [r.label for r in LADDER if r.label not in MATERIALIZED]
    assert "cuda:3_fused" in fused and "triton:6_autotuned" in fused
    for label in fused:
        assert at.workspace_bytes(label, BIG) == 0
        assert at.peak_bytes(label, BIG) == 4 * 2 * 4 * 32 * 16384 * 64  # Q, K, V, O: 1.07 GB


def test_sdpa_is_not_modelled_and_unknown_backends_are_refused():
    assert at.workspace_bytes("torch:sdpa", BIG) is None and at.peak_bytes("torch:sdpa_flash", BIG) is None
    with pytest.raises(ValueError, match="backend"):
        at.workspace_bytes("jax:1_naive", BIG)


@pytest.mark.parametrize("rung", [r for r in LADDER if r.backend == "triton"], ids=lambda r: r.label)
def test_triton_launchers_allocate_what_the_model_says(rung, monkeypatch):
    shape = (1, 2, 19, 64, 1)
    q, k, v, causal = at.PROBLEM.make_inputs(shape, "cpu", torch.Generator().manual_seed(0))
    out = torch.empty_like(q)
    rung.run(q, k, v, causal, out=out)   # first call: rung 6 searches here, outside the count
    allocated = []

    def counted(make):          # torch.empty & co., keeping what they make
        def run(*args, **kwargs):
            allocated.append(make(*args, **kwargs))
            return allocated[-1]
        return run

    for name in ("empty", "empty_like", "zeros", "zeros_like", "full"):
        monkeypatch.setattr(torch, name, counted(getattr(torch, name)))
    rung.run(q, k, v, causal, out=out)
    monkeypatch.undo()
    assert sum(t.numel() * t.element_size() for t in allocated) == at.workspace_bytes(rung.label, shape)
