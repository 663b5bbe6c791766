"""Vector add rungs that run in this world (Triton under the interpreter on CPU), and input checks."""
import pytest
import torch

import kernels.vector_add as va
from kernels.cuda import vector_add as cva
from kernels.triton import vector_add as tva
from ladder.runtime import validate
from ladder.check import compare
from ladder.runner import check_rung, unavailable
from ladder.runtime.world import device

PROBLEM = va.PROBLEM


@pytest.mark.parametrize("rung", [r for r in PROBLEM.rungs if r.backend != "cuda"], ids=lambda r: r.label)
def test_runnable_rungs_correct_on_ragged_sizes(rung):
    assert unavailable(rung) is None
    report = check_rung(PROBLEM, rung, seed=123)
    assert [s for s, _ in report] == PROBLEM.interpret_shapes
    for shape, result in report:
        assert result.ok, (shape, str(result))


def test_triton_writes_every_element_it_owns_and_no_more():
    n = 1000
    a, b = (torch.randn(n).half() for _ in range(2))
    guard = torch.full((n + 64,), 7.0, dtype=torch.float16)
    out = guard[:n]
    tva.blocked(a, b, out=out)
    assert torch.equal(out, a + b)
    assert torch.all(guard[n:] == 7.0)  # nothing written past the end


def test_cuda_rungs_say_why_they_do_not_run_on_cpu():
    for rung in PROBLEM.rungs:
        if rung.backend == "cuda":
            assert "needs a GPU" in unavailable(rung)


@pytest.mark.parametrize("fn", [tva.blocked, va.torch_add])
def test_bad_inputs_are_named(fn):
    a = torch.randn(100).half()
    with pytest.raises(ValueError, match="a must be torch.float16"):
        fn(a.float(), a)
    with pytest.raises(ValueError, match="shape mismatch"):
        fn(a, a[:50])
    with pytest.raises(ValueError, match="not contiguous"):
        fn(torch.randn(200).half()[::2], a)
    with pytest.raises(ValueError, match="1 dimension"):
        fn(a.view(10, 10), a.view(10, 10))
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        fn([1.0] * 100, a)


def test_cuda_launchers_refuse_cpu_tensors_by_name():
    a = torch.randn(16).half()
    for fn in (cva.scalar, cva.vectorized):
        with pytest.raises(ValueError, match="a is on cpu"):
            fn(a, a)


def test_alignment_check_names_the_offset():
    t = torch.zeros(64, dtype=torch.float16)[1:17]
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        validate.tensor("a", t, dtype=torch.float16, ndim=1, device="cpu", align_bytes=16)


def test_compare_catches_nan_and_wrong_values():
    ref = torch.ones(100)
    out = torch.ones(100, dtype=torch.float16)
    assert compare(out, ref).ok
    out[3] = float("nan")
    bad = compare(out, ref)
    assert not bad.ok and bad.non_finite == 1 and "NaN" in str(bad)
    out[3] = 1.5
    assert not compare(out, ref).ok


def test_world_is_cpu_interpreter_here():
    import os
    assert device() == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
