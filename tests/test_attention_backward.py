"""The attention backward without a GPU: rung 2's kernels (kernels/triton/attention_backward.py) in Triton's
interpreter, through ladder.ops.attention's autograd. gradcheck in float64 (the same kernels, float64 sums);
fp16 at ragged S, causal and not, D 64 and 128, within 2x the error of PyTorch's own fp16 backward; NaN-poisoned
gradient buffers, strided ones, a very large logit, the log-sum-exp's own gradient; torch.library's opcheck with
gradients; what each rung saves for the backward; the kernels compiled for sm_90. Tiny shapes: the interpreter is slow. tests/gpu/ has the same at
model shapes."""
import importlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels.triton import attention_backward as ab
from ladder import ops, sass
from ladder.check import compare


def randn(gen, *shape, dtype=torch.float16):
    return torch.randn(*shape, generator=gen, dtype=dtype)


def packed(gen, B, H, S, D, dtype=torch.float16):
    """q, k, v as a model hands them over: views of one (B, S, 3, H, D) projection, none contiguous."""
    return randn(gen, B, S, 3, H, D, dtype=dtype).permute(2, 0, 3, 1, 4)


def grads(attention, q, k, v, do) -> tuple:
    """dQ, dK, dV of attention(q, k, v) given dO, through autograd (the inputs themselves left alone)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    attention(q, k, v).backward(do)
    return q.grad, k.grad, v.grad


def sdpa(causal):
    def run(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


# ------------------------------------------------------------- gradcheck, float64

class Float64Attention(torch.autograd.Function):
    """(O, LSE) by float64 torch math; the backward rung 2's kernels, in float64 (the same kernels: their sums
    take the log-sum-exp's dtype). gradcheck then holds the kernels' dQ, dK, dV, the log-sum-exp's gradient
    included, to finite differences of the exact function. ladder.ops.attention itself is fp16 only, and the
    flash forward rounds O to fp16, so the forward here is torch's."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        S, D = q.shape[-2:]
        s = q @ k.mT / math.sqrt(D)
        if causal:
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(s, -1)
        out = torch.exp(s - lse[..., None]) @ v
        ctx.causal = causal
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return *ab.backward(q, k, v, out, lse, do, ctx.causal, dlse=dlse), None


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64(causal, monkeypatch):
    """S = 50 against the interpreter's tiles (K/V programs 32 keys in 16-query steps, Q programs 32 queries in
    16-key steps): every pass runs, the diagonal, the unmasked steps before and after it, S's ragged end. D = 64:
    its scale, 1/8, is exact in the fp32 the launcher passes it as (at D = 128, 1/√128 is off by 1e-8). Fast
    mode: one random direction; on a failure gradcheck would rebuild both Jacobians for its message, a backward
    per output element (minutes in the interpreter), which is skipped."""
    # atol: fast mode scales it by the random projection's sums; the float64 kernels agree to about 1e-15
    monkeypatch.setattr(importlib.import_module("torch.autograd.gradcheck"), "_run_slow_mode_and_get_error",
                        lambda *args: "(the slow mode's full Jacobians: skipped, minutes in the interpreter)",
                        raising=False)
    qkv = torch.randn(1, 50, 3, 2, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: Float64Attention.apply(*x.permute(2, 0, 3, 1, 4), causal),
                                    (qkv.requires_grad_(),), fast_mode=True, atol=1e-10, rtol=1e-7)


# ------------------------------------------------------------- fp16 through ladder.ops.attention

# Error: ladder.check's, ‖got − want‖/‖want‖ over each gradient, against autograd through SDPA's math backend in
# fp32 on the same fp16 inputs and dO. PyTorch's own: the same backend run in fp16. Ours rounds P and dS to fp16
# before their products (the tensor cores' operands on a GPU); measured 1.3-1.6x PyTorch's on the CPU.
ERROR_RATIO = 2.0


@pytest.mark.parametrize("S, D, causal", [(67, 64, False), (67, 128, True), (130, 64, True), (130, 128, False)])
def test_fp16_gradients_within_twice_pytorchs_error(S, D, causal):
    gen = torch.Generator().manual_seed(S + D + causal)
    q, k, v = packed(gen, 1, 2, S, D)
    do = randn(gen, 1, S, 2, D).transpose(1, 2)   # dO strided too: the gradient of a (B, S, H·D) reshape
    want = grads(sdpa(causal), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(causal), q, k, v, do)
    ours = grads(lambda q, k, v: ops.attention(q, k, v, causal=causal), q, k, v, do)
    for name, got, pytorch, exact in zip(("dQ", "dK", "dV"), ours, theirs, want):
        assert got.dtype == torch.float16 and got.shape == exact.shape
        error, limit = compare(got, exact).rel_error, ERROR_RATIO * compare(pytorch, exact).rel_error
        assert error <= limit, f"{name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"


def test_every_gradient_element_written_into_poisoned_strided_buffers():
    """Buffers full of NaN, laid out (B, S, H, D) in memory: every element must be written, through its strides."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = packed(gen, 1, 2, 67, 64)
    do = randn(gen, 1, 2, 67, 64)
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    buffers = tuple(torch.full((1, 67, 2, 64), float("nan"), dtype=torch.float16).transpose(1, 2) for _ in range(3))
    assert ab.backward(q, k, v, out, lse, do, True, out=buffers) == buffers
    for got, want in zip(buffers, grads(lambda q, k, v: ops.attention(q, k, v, causal=True), q, k, v, do)):
        assert torch.equal(got, want)   # no NaN left, and the same numbers as through autograd


@pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")  # NumPy's, in the interpreter
def test_a_very_large_logit_stays_finite():
    """Q x 30: scores in the thousands, P one-hot; masked scores above the diagonal overflow exp2 to inf, which
    the mask must drop (a where, not a multiply by 0, which would give NaN)."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = packed(gen, 1, 2, 67, 64)
    q = q * 30
    do = randn(gen, 1, 2, 67, 64)
    want = grads(sdpa(True), *(t.float() for t in (q, k, v, do)))
    theirs = grads(sdpa(True), q, k, v, do)
    ours = grads(lambda q, k, v: ops.attention(q, k, v, causal=True), q, k, v, do)
    for got, pytorch, exact in zip(ours, theirs, want):
        assert torch.isfinite(got).all()
        assert compare(got, exact).rel_error <= max(ERROR_RATIO * compare(pytorch, exact).rel_error, 2e-3)


def test_the_log_sum_exp_alone_has_a_gradient():
    """A loss on the log-sum-exp only: O's gradient is None (not a tensor of zeros), D becomes −dLSE."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (randn(gen, 1, 1, 19, 64).requires_grad_() for _ in range(3))
    torch.ops.ladder.attention(q, k, v, False, 0.3)[1].sum().backward()
    exact = [t.detach().double().requires_grad_() for t in (q, k)]
    torch.logsumexp(exact[0] @ exact[1].mT * 0.3, -1).sum().backward()
    assert compare(q.grad, exact[0].grad).ok and compare(k.grad, exact[1].grad).ok
    assert not v.grad.any()   # the log-sum-exp does not depend on V


def test_opcheck_with_gradients():
    """torch.library's checks of ladder::attention with its autograd (the backward traced by AOTAutograd, as
    torch.compile traces a training step) and of ladder::attention_backward, the operator the backward calls."""
    q, k, v = packed(torch.Generator().manual_seed(7), 1, 2, 5, 64)
    for args in [(*(t.detach().requires_grad_() for t in (q, k, v)), True, None),
                 (q.contiguous().requires_grad_(), k, v.contiguous().requires_grad_(), False, 0.2)]:
        assert set(torch.library.opcheck(ops.ATTENTION_OP, args).values()) == {"SUCCESS"}
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    for grad_lse in (None, lse.clone()):
        args = (q, k, v, out, lse, out.clone(), grad_lse, True, None)
        assert set(torch.library.opcheck(torch.ops.ladder.attention_backward.default, args).values()) == {"SUCCESS"}


# ------------------------------------------------------------- what each rung keeps for the backward

def saved(run) -> list:
    """The tensors autograd keeps from run()'s forward for its backward."""
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        run()
    return kept


def test_rung_1_keeps_the_probabilities_rung_2_only_the_log_sum_exp():
    B, H, S, D = 1, 2, 40, 64
    gen = torch.Generator().manual_seed(6)
    q, k, v = (randn(gen, B, H, S, D).requires_grad_() for _ in range(3))
    materialized = saved(lambda: ab.materialized(q, k, v, True))
    flash = saved(lambda: ops.attention(q, k, v, causal=True))
    assert any(t.shape == (B, H, S, S) and t.dtype == torch.float32 for t in materialized)   # P
    assert all(t.numel() <= B * H * S * D for t in flash)   # q, k, v, O and the log-sum-exp (B, H, S)
    fresh = [t for t in flash if t.data_ptr() not in {q.data_ptr(), k.data_ptr(), v.data_ptr()}]
    assert sum(t.numel() * t.element_size() for t in fresh) == ab.saved_bytes(B, H, S, D, "2_flash")
    kept = {t.data_ptr(): t.numel() * t.element_size() for t in materialized if t.dtype == torch.float32}
    assert sum(kept.values()) == ab.saved_bytes(B, H, S, D, "1_materialized")
    do = randn(gen, B, H, S, D)
    want = grads(sdpa(True), *(t.float() for t in (q, k, v, do)))
    for got, exact in zip(grads(lambda q, k, v: ab.materialized(q, k, v, True), q, k, v, do), want):
        assert compare(got, exact).ok


# ------------------------------------------------------------- checks, and the kernels a GPU will compile

def test_bad_operands_are_named():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    lse = torch.zeros(1, 1, 8)
    with pytest.raises(ValueError, match="do is torch.float32"):
        ab.backward(q, q, q, q, lse, q.float(), False)
    with pytest.raises(ValueError, match="D=80"):
        ab.backward(*(q[..., :16].repeat(1, 1, 1, 5),) * 4, lse, q[..., :16].repeat(1, 1, 1, 5), False)
    with pytest.raises(ValueError, match="lse must be torch.float32"):
        ab.backward(q, q, q, q, lse.double(), q, False)


@pytest.mark.parametrize("kernel", ["dkdv", "dq"])
def test_the_kernels_compile_for_hopper(kernel):
    """What the interpreter lets through and a GPU's compiler does not (a global that is no constexpr, a float of
    the wrong width): each kernel as ladder.ops launches it at D = 64, causal, built for sm_90: its products on
    wgmma, its exponentials one MUFU.EX2 each."""
    code = sass.triton_sass(**ab.sass_case(kernel), arch="sm_90")
    assert code.count("HGMMA") > 0 and code.count("MUFU.EX2") > 0
