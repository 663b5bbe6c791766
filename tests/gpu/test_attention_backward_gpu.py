"""The attention backward on a GPU (kernels/triton/attention_backward.py, rung 2, through ladder.ops.attention's
autograd): dQ, dK, dV at model shapes, causal and not, D 64 and 128, within 2x the error of PyTorch's own fp16
backward (SDPA's math backend, and its FlashAttention-2 backend: the algorithm rung 2 writes out); NaN-poisoned
strided buffers; a very large logit; the log-sum-exp's gradient; what each rung keeps from the forward, in bytes
the allocator holds; a training step of a small block through the ops, eager and compiled; rungs 3 and 4 (called
directly) within 2x PyTorch's error, rtol = atol = 1e-2 at B 4, 128 x 128, D 64 (rung 2 too), poisoned buffers,
a very large logit, NaN; eager calls that leave nothing behind; gradcheck in float64 of rungs 2-4. Run with
`pytest tests/gpu/test_attention_backward_gpu.py -o addopts="" -v`; it times nothing."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import ops_helpers
from kernels import attention_backward_search as backward_search
from kernels.triton import attention_backward as ab
from ladder import ops
from ladder.check import compare

GEN = torch.Generator("cuda").manual_seed(11)
ERROR_RATIO = 2.0   # as in tests/test_attention_backward.py


def randn(*shape):
    return torch.randn(*shape, generator=GEN, device="cuda").half()


def packed(B, H, S, D):
    """q, k, v as views of one (B, S, 3, H, D) projection."""
    return randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4)


def grads(attention, q, k, v, do) -> tuple:
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    attention(q, k, v).backward(do)
    return q.grad, k.grad, v.grad


def sdpa(causal, backend=SDPBackend.MATH):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


@pytest.mark.parametrize("backend", [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], ids=["math", "flash"])
@pytest.mark.parametrize("B, H, S, D", [(2, 16, 2048, 64), (2, 8, 2048, 128), (1, 4, 1023, 64), (1, 4, 1000, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_within_twice_pytorchs_error(B, H, S, D, causal, backend):
    q, k, v = packed(B, H, S, D)
    do = randn(B, S, H, D).transpose(1, 2)
    want = grads(sdpa(causal), *(t.float() for t in (q, k, v, do)))   # fp32, math: the reference
    theirs = grads(sdpa(causal, backend), q, k, v, do)
    ours = grads(lambda q, k, v: ops.attention(q, k, v, causal=causal), q, k, v, do)
    for name, got, pytorch, exact in zip(("dQ", "dK", "dV"), ours, theirs, want):
        error, limit = compare(got, exact).rel_error, ERROR_RATIO * compare(pytorch, exact).rel_error
        assert error <= limit, f"{name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"


@pytest.mark.parametrize("backend", [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], ids=["math", "flash"])
@pytest.mark.parametrize("B, H, S, D", [(2, 8, 2048, 64), (2, 8, 2048, 128), (1, 4, 1023, 64), (1, 4, 1000, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_output_and_gradients_within_twice_pytorchs_bf16_error(B, H, S, D, causal, backend):
    q, k, v = (t.bfloat16() for t in packed(B, H, S, D))
    do = randn(B, S, H, D).transpose(1, 2).bfloat16()
    exact_o = sdpa(causal)(*(t.float() for t in (q, k, v)))
    for name, got, pytorch in (("O", ops.attention(q, k, v, causal=causal), sdpa(causal, backend)(q, k, v)),):
        assert got.dtype == torch.bfloat16
        error, limit = compare(got, exact_o).rel_error, ERROR_RATIO * compare(pytorch, exact_o).rel_error
        assert error <= limit, f"{name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"
    want = grads(sdpa(causal), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(causal, backend), q, k, v, do)
    ours = grads(lambda q, k, v: ops.attention(q, k, v, causal=causal), q, k, v, do)
    for name, got, pytorch, exact in zip(("dQ", "dK", "dV"), ours, theirs, want):
        assert got.dtype == torch.bfloat16
        error, limit = compare(got, exact).rel_error, ERROR_RATIO * compare(pytorch, exact).rel_error
        assert error <= limit, f"{name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"


@pytest.mark.parametrize("D", [64, 128])
def test_every_gradient_element_written_into_poisoned_strided_buffers(D):
    q, k, v = packed(1, 4, 777, D)
    do = randn(1, 4, 777, D)
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    buffers = tuple(torch.full((1, 777, 4, D), float("nan"), dtype=torch.float16, device="cuda").transpose(1, 2)
                    for _ in range(3))
    ab.backward(q, k, v, out, lse, do, True, out=buffers)
    for got, want in zip(buffers, grads(lambda q, k, v: ops.attention(q, k, v, causal=True), q, k, v, do)):
        assert compare(got, want).ok   # no NaN left (other strides: maybe another specialization, same numbers)


def test_a_very_large_logit_stays_finite():
    q, k, v = packed(1, 4, 1000, 64)
    q = q * 30
    do = randn(1, 4, 1000, 64)
    want = grads(sdpa(True), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(True), q, k, v, do)
    for got, pytorch, exact in zip(grads(lambda q, k, v: ops.attention(q, k, v, causal=True), q, k, v, do),
                                   theirs, want):
        assert torch.isfinite(got).all()
        assert compare(got, exact).rel_error <= max(ERROR_RATIO * compare(pytorch, exact).rel_error, 2e-3)


def test_the_log_sum_exp_has_a_gradient():
    q, k, v = (randn(2, 4, 300, 128).requires_grad_() for _ in range(3))
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    weights = torch.randn(out.shape, generator=GEN, device="cuda")
    ((out.float() * weights).sum() + lse.sum()).backward()
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    scores = exact[0] @ exact[1].mT / 128 ** 0.5
    scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ((torch.softmax(scores, -1) @ exact[2]) * weights.double()).sum().add(torch.logsumexp(scores, -1).sum()).backward()
    for got, want in zip((q, k, v), exact):
        assert compare(got.grad, want.grad).ok


def test_what_each_rung_keeps_for_the_backward():
    """Bytes the allocator holds while the graph waits for its backward: rung 1 its probabilities, B·H·S² fp32
    (here 512 MiB), rung 2 O and the log-sum-exp. Printed for the recording (-s shows them)."""
    B, H, S, D = 1, 8, 4096, 64
    q, k, v = (randn(B, H, S, D).requires_grad_() for _ in range(3))
    do = randn(B, H, S, D)
    for rung, attention in (("1_materialized", lambda: ab.materialized(q, k, v, True)),
                            ("2_flash", lambda: ops.attention(q, k, v, causal=True))):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = attention()
        kept = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
        out.backward(do)
        peak = torch.cuda.max_memory_allocated() - before
        print(f"{rung}: kept {kept / 2**20:.1f} MiB for the backward (saved_bytes: "
              f"{ab.saved_bytes(B, H, S, D, rung) / 2**20:.1f}), peak {peak / 2**20:.1f} MiB")
        if rung == "1_materialized":
            assert kept >= 4 * B * H * S * S
        else:  # O is what the caller holds; beyond it, the log-sum-exp (allocations round up to 512 bytes)
            assert kept <= 4 * B * H * S + 512
        del out
        for t in (q, k, v):
            t.grad = None


def test_a_training_step_through_the_ops():
    """The block's parameter gradients (through ops.matmul's and ops.attention's backward) against float64,
    within 2x the error of the same block in fp16 on PyTorch's ops; then an SGD step lowers the loss."""
    block, reference = ops_helpers.make("cuda")
    pytorch = ops_helpers.Block(kernels=ops_helpers.TORCH_OPS)
    pytorch.load_state_dict(block.state_dict())
    pytorch.to("cuda", torch.float16)
    x = torch.randn(2, 256, 128, generator=GEN, device="cuda")
    target = torch.randn(2, 256, 128, generator=GEN, device="cuda").double()
    losses = []
    for model, inputs in ((block, x.half()), (pytorch, x.half()), (reference, x.double())):
        losses.append((model(inputs).double() * target).sum())
        losses[-1].backward()
    for (name, ours), theirs, exact in zip(block.named_parameters(), pytorch.parameters(), reference.parameters()):
        error = compare(ours.grad, exact.grad).rel_error
        limit = ERROR_RATIO * compare(theirs.grad, exact.grad).rel_error
        assert error <= max(limit, 1e-4), f"{name}: error {error:.2e}, PyTorch's fp16 {limit / ERROR_RATIO:.2e}"
    # gradients of tens: steps of about 1e-4, above fp16's rounding of weights near 0.1, and first order
    torch.optim.SGD(block.parameters(), lr=1e-5).step()
    assert all(torch.isfinite(p).all() for p in block.parameters())
    assert (block(x.half()).double() * target).sum() < losses[0]


def test_a_compiled_training_step_matches_eager():
    """torch.compile(fullgraph) of a training step: the forward (ladder::attention) and the backward
    (ladder::attention_backward) are triton_ops, their kernels launched through wrap_triton, so Inductor launches
    them from its own code; the gradients equal eager's to fp16 rounding."""
    block, _ = ops_helpers.make("cuda")
    twin, _ = ops_helpers.make("cuda")
    x = torch.randn(2, 128, 128, generator=GEN, device="cuda").half()
    target = torch.randn(2, 128, 128, generator=GEN, device="cuda")
    compiled = torch.compile(twin, fullgraph=True)
    for model in (block, compiled):
        (model(x).float() * target).sum().backward()
    for (name, eager), traced in zip(block.named_parameters(), twin.parameters()):
        assert compare(traced.grad, eager.grad, 1e-2).ok, name  # Inductor fuses the layer norms its own way


# ------------------------------------------------------------- rungs 3 (dQ by atomics) and 4 (rung 2, tiles searched)
# Called directly on the forward's O and log-sum-exp (ladder.ops' autograd runs rung 2). The inputs are fp16: the
# forward and the backward take fp16 (and float64), not bf16. Rung 4 runs the winners cached on this GPU (by
# `python -m ladder record attention_backward`), else rung 2's tiles.

RUNGS = {"2_flash": ab.backward, "3_atomic_dq": ab.atomic_dq_backward, "4_autotuned": backward_search.autotuned_backward}


def rung_grads(rung, q, k, v, do, causal):
    out, lse = torch.ops.ladder.attention(q, k, v, causal)
    return RUNGS[rung](q, k, v, out, lse, do, causal)


@pytest.mark.parametrize("rung", ["3_atomic_dq", "4_autotuned"])
@pytest.mark.parametrize("backend", [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], ids=["math", "flash"])
@pytest.mark.parametrize("B, H, S, D", [(2, 16, 2048, 64), (2, 8, 2048, 128), (1, 4, 1023, 64), (1, 4, 1000, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_rungs_3_and_4_within_twice_pytorchs_error(B, H, S, D, causal, backend, rung):
    q, k, v = packed(B, H, S, D)
    do = randn(B, S, H, D).transpose(1, 2)
    want = grads(sdpa(causal), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(causal, backend), q, k, v, do)
    for name, got, pytorch, exact in zip(("dQ", "dK", "dV"), rung_grads(rung, q, k, v, do, causal), theirs, want):
        error, limit = compare(got, exact).rel_error, ERROR_RATIO * compare(pytorch, exact).rel_error
        assert error <= limit, f"{rung} {name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"


@pytest.mark.parametrize("rung", list(RUNGS))
@pytest.mark.parametrize("causal", [False, True])
def test_within_rtol_atol_1e_2_at_b4_128x128_d64(rung, causal):
    """The issue's elementwise bound: |got − want| ≤ 1e-2 + 1e-2·|want| for every element of dQ, dK, dV at B 4,
    S 128 (128 x 128 scores), D 64, against fp32."""
    q, k, v = packed(4, 4, 128, 64)
    do = randn(4, 4, 128, 64)
    want = grads(sdpa(causal), *(t.float() for t in (q, k, v, do)))
    for got, exact in zip(rung_grads(rung, q, k, v, do, causal), want):
        torch.testing.assert_close(got.float(), exact, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rung", ["3_atomic_dq", "4_autotuned"])
@pytest.mark.parametrize("D", [64, 128])
def test_rungs_3_and_4_write_every_element_of_poisoned_strided_buffers(rung, D):
    q, k, v = packed(1, 4, 777, D)
    do = randn(1, 4, 777, D)
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    buffers = tuple(torch.full((1, 777, 4, D), float("nan"), dtype=torch.float16, device="cuda").transpose(1, 2)
                    for _ in range(3))
    RUNGS[rung](q, k, v, out, lse, do, True, out=buffers)
    for got, want in zip(buffers, ab.backward(q, k, v, out, lse, do, True)):
        assert compare(got, want).ok


@pytest.mark.parametrize("rung", ["3_atomic_dq", "4_autotuned"])
def test_rungs_3_and_4_a_very_large_logit_stays_finite(rung):
    q, k, v = packed(1, 4, 1000, 64)
    q = q * 30
    do = randn(1, 4, 1000, 64)
    want = grads(sdpa(True), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(True), q, k, v, do)
    for got, pytorch, exact in zip(rung_grads(rung, q, k, v, do, True), theirs, want):
        assert torch.isfinite(got).all()
        assert compare(got, exact).rel_error <= max(ERROR_RATIO * compare(pytorch, exact).rel_error, 2e-3)


def test_rung_3_nan_propagates():
    """A NaN in dO is no number in the gradients: the check fails it (NaN never passes)."""
    q, k, v = packed(1, 4, 300, 64)
    do = randn(1, 4, 300, 64)
    do[0, 2, 17, 3] = float("nan")
    got = rung_grads("3_atomic_dq", q, k, v, do, False)
    assert all(g[0, 2].isnan().any() for g in got) and not compare(got[0], got[0].nan_to_num()).ok


def test_eager_backward_calls_leave_nothing_behind():
    """An eager backward launches its kernels itself: torch's kernel side table (where a wrap_triton launch
    keeps its non-tensor arguments, one entry per launch) and the memory allocated do not grow with calls."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    q, k, v, do = (randn(2, 4, 256, 64) for _ in range(4))
    leaves = tuple(t.requires_grad_() for t in (q, k, v))

    def step():
        torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)
    step()
    torch.cuda.synchronize()
    entries, allocated = len(kernel_side_table.constant_args), torch.cuda.memory_allocated()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    assert len(kernel_side_table.constant_args) == entries
    assert torch.cuda.memory_allocated() == allocated


@pytest.mark.parametrize("rung", list(RUNGS))
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64_on_the_gpu(rung, causal):
    """gradcheck's full Jacobians (not fast mode) in float64 on the GPU, B 1, H 1, S 130 (past the K/V programs'
    128 keys and the Q programs' 128 queries at D 64: the diagonal, unmasked and ragged passes all run), D 64,
    whose scale 1/8 is exact in fp32; float64 launches its own tiles (ab.FLOAT64_TILES). Tolerances 100x tighter
    than gradcheck's defaults. Measured on the H100 at this shape (one draw), both full Jacobians entry by entry:
    the largest |numerical - analytical| is 8.5e-10 (causal 8.7e-10), the same for all three rungs (rung 4's
    float64 launches are rung 2's, bit for bit), under 1% of this tolerance: the rounding of central differences
    at eps 1e-6, which sits at atol 1e-9, where one case of six had failed. Rung 3 adds dQ with float64 atomics
    (float64 operands take no TMA), in a different order each run (1e-16 from rung 2): nondet_tol lets two runs'
    sums differ by rounding, which gradcheck's reentrancy check otherwise forbids."""
    qkv = torch.randn(1, 130, 3, 1, 64, generator=GEN, device="cuda", dtype=torch.float64)
    attention = ops_helpers.Float64Attention.apply
    assert torch.autograd.gradcheck(lambda x: attention(*x.permute(2, 0, 3, 1, 4), causal, RUNGS[rung]),
                                    (qkv.requires_grad_(),), atol=1e-7, rtol=1e-5, nondet_tol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_later_calls_through_the_compiled_launcher_match_the_first(D, causal):
    """The first eager call at a shape launches through Triton's own path; later ones through the compiled kernel's
    launcher (ladder.runtime.direct_launch). Rung 2 repeats bit for bit, so the two must agree exactly, on fresh
    operands of the same shape and strides (the later call's addresses differ) and on a ragged length."""
    for S in (200, 256):
        first = [randn(1, 3, S, D) for _ in range(4)]
        second = [randn(1, 3, S, D) for _ in range(4)]
        outs = []
        for q, k, v, do in (first, second, first):
            o, lse = torch.ops.ladder.attention(q, k, v, causal, None)
            outs.append(ab.backward(q, k, v, o, lse, do, causal))
        assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[2]))
        want = grads(sdpa(causal), *(t.double() for t in second[:3]), second[3].double())
        assert all(compare(g, w.to(g.dtype)).ok for g, w in zip(outs[1], want))


@pytest.mark.parametrize("way", ["two kernels", "one kernel", "one kernel, dQ by the TMA"])
@pytest.mark.parametrize("D", [64, 128])
def test_a_replayed_backward_matches_the_path_it_replays(D, way, monkeypatch):
    """autotuned_backward's eager calls after the first at a layout replay the first's launches on their own
    tensors (_replayed). Each must give what the path it replays gives on the same operands (rung 2 and rung 3's
    dK, dV bit for bit; rung 3's dQ, summed by atomics in a varying order, within rounding): fresh operands of the
    recorded layout, another layout (packed views, ragged S) in between, a dLSE, one tensor given as q, k and v."""
    one = {"two kernels": None, "one kernel": dict(ab.GPU_TILES[D]["dkdv_atomic"], DQ_BY_TMA=False),
           "one kernel, dQ by the TMA": dict(ab.GPU_TILES[D]["dkdv_atomic"], DQ_BY_TMA=True)}[way]
    tiles = {"delta": ab.TILES[D]["delta"], "dkdv": ab.GPU_TILES[D]["dkdv"], "dq": ab.GPU_TILES[D]["dq"],
             "one_kernel": one}
    monkeypatch.setattr(backward_search, "tuned_tiles", lambda S, D, causal: tiles)
    backward_search.autotune.forget()   # no replay recorded with other tiles at these layouts
    try:
        for causal in (False, True):
            plain = [randn(2, 3, 256, D) for _ in range(4)]
            calls = [plain, [randn(2, 3, 256, D) for _ in range(4)], [*packed(2, 3, 200, D), randn(2, 3, 200, D)],
                     plain]
            x = randn(2, 3, 256, D)
            calls.append([x, x, x, randn(2, 3, 256, D)])
            for q, k, v, do in calls:
                o, lse = torch.ops.ladder.attention(q, k, v, causal, None)
                dlse = torch.randn(lse.shape, generator=GEN, device="cuda")
                for given in (None, dlse):
                    got = backward_search.autotuned_backward(q, k, v, o, lse, do, causal, dlse=given)
                    want = backward_search._backward(q, k, v, o, lse, do, causal, None, given, None)
                    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
                    assert torch.equal(got[0], want[0]) if one is None else compare(got[0], want[0]).ok
    finally:
        backward_search.autotune.forget()
