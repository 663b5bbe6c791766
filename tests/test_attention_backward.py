"""The attention backward without a GPU: rung 2's kernels (kernels/triton/attention_backward.py) in Triton's
interpreter, through ladder.ops.attention's autograd. gradcheck in float64 (the same kernels, float64 sums);
fp16 at ragged S, causal and not, D 64 and 128, within 2x the error of PyTorch's own fp16 backward; NaN-poisoned
gradient buffers, strided ones, a very large logit, the log-sum-exp's own gradient; torch.library's opcheck with
gradients; what each rung saves for the backward; the kernels compiled for sm_90. Rungs 3 (dQ by atomics) and 4
(rung 2's tiles searched: its search's plumbing with the GPU's parts stood in for); the recorded problem
`attention_backward` (kernels/attention_backward.py, which also holds rung 4's search): its cases, FLOPs, rung 1's
N/A where it cannot fit, its rungs through the harness's check. Tiny shapes: the interpreter is slow. tests/gpu/ has
the same at model shapes."""
import functools
import importlib
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import attention_backward as problem_module
from kernels import attention_backward_search as backward_search
from kernels.triton import attention_backward as ab
from ladder import autotune, ops, sass
from ladder.check import compare
from ops_helpers import Float64Attention


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


@functools.lru_cache(maxsize=None)
def built_for_hopper(kernel: str):
    """The kernel as ladder.ops launches it at D = 64, causal, compiled for sm_90 (no GPU needed), once a run."""
    return sass.triton_compile(**problem_module.sass_case(kernel), arch="sm_90")


@pytest.mark.parametrize("kernel", ["dkdv", "dq"])
def test_the_kernels_compile_for_hopper(kernel):
    """What the interpreter lets through and a GPU's compiler does not (a global that is no constexpr, a float of
    the wrong width): each kernel's products on wgmma, its exponentials one MUFU.EX2 each."""
    code = sass.compiled_sass(built_for_hopper(kernel), "sm_90")
    assert code.count("HGMMA") > 0 and code.count("MUFU.EX2") > 0


def test_torchs_launcher_takes_the_arguments_triton_compiled_in():
    """direct_launch.torch_launch on rung 4's Q kernel: of a full argument list it passes on the pointers, sizes
    and scale and the strides the compiler did not specialize, each by its compiled type, and drops the
    constexprs (the head dimension, tiles, the mask, the unit strides, the absent dLSE); it launches with the
    compiled warps and shared memory."""
    from ladder.runtime import direct_launch
    compiled = built_for_hopper("dq")
    warps, shared, types, pick, scratch = direct_launch.torch_launch(compiled)
    names = compiled.src.fn.arg_names
    taken = pick(tuple(names)) + scratch
    assert taken[:8] == ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "lse_ptr", "delta_ptr", "dq_ptr", "o_ptr")
    assert "dlse_ptr" not in taken and "stride_qd" not in taken and "BLOCK_M" not in taken and "stride_qs" in taken
    assert len(types) == len(taken) and types[:8] == "O" * 8 and types[taken.index("S")] == "i"
    assert (warps, shared) == (compiled.metadata.num_warps, compiled.metadata.shared)
    letters = direct_launch.type_letters()   # torch's own table, less the half-precision scalars it widens
    assert (letters["i32"], letters["i64"], letters["fp32"], letters["fp64"]) == ("i", "l", "f", "d")
    assert "fp16" not in letters and "bf16" not in letters
    for refused in ({"num_ctas": 2}, {"global_scratch_size": 256}, {"cluster_dims": (2, 1, 1)}):   # Triton's then
        metadata = SimpleNamespace(**{**compiled.metadata._asdict(), **refused})
        assert direct_launch.torch_launch(SimpleNamespace(metadata=metadata, src=compiled.src)) is None


# ------------------------------------------------------------- rungs 3 (dQ by atomics) and 4 (rung 2, tiles searched)

RUNGS = {"3_atomic_dq": ab.atomic_dq_backward, "4_autotuned": backward_search.autotuned_backward}


def float64_grads(q, k, v, do, causal) -> tuple:
    """dQ, dK, dV by autograd through the math in float64: the reference."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    S, D = q.shape[-2:]
    s = q @ k.mT / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(s, -1) @ v).backward(do.double())
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("rung", list(RUNGS))
@pytest.mark.parametrize("S, D, causal", [(40, 64, False), (40, 128, True)])
def test_rungs_3_and_4_within_twice_pytorchs_error(rung, S, D, causal):
    """fp16 at a ragged S (40: a whole 32-key tile and a ragged one, in 16-query steps) against float64, within
    ERROR_RATIO x PyTorch's own fp16 backward; strided inputs and dO, as the model hands them over."""
    gen = torch.Generator().manual_seed(S + D + causal)
    q, k, v = packed(gen, 1, 2, S, D)
    do = randn(gen, 1, S, 2, D).transpose(1, 2)
    out, lse = torch.ops.ladder.attention(q, k, v, causal)
    ours = RUNGS[rung](q, k, v, out, lse, do, causal)
    theirs = grads(sdpa(causal), q, k, v, do)
    for name, got, pytorch, exact in zip(("dQ", "dK", "dV"), ours, theirs, float64_grads(q, k, v, do, causal)):
        assert got.dtype == torch.float16 and got.shape == exact.shape
        error, limit = compare(got, exact).rel_error, ERROR_RATIO * compare(pytorch, exact).rel_error
        assert error <= limit, f"{rung} {name}: error {error:.2e}, over {ERROR_RATIO}x PyTorch's {limit / ERROR_RATIO:.2e}"


def test_gradcheck_float64_rung_3(monkeypatch):
    """Rung 3's one kernel (float64 atomics into float64 dQ sums) against finite differences, causal, S = 50
    (every pass: diagonal, unmasked, ragged), fast mode as test_gradcheck_float64."""
    monkeypatch.setattr(importlib.import_module("torch.autograd.gradcheck"), "_run_slow_mode_and_get_error",
                        lambda *args: "(the slow mode's full Jacobians: skipped, minutes in the interpreter)",
                        raising=False)
    qkv = torch.randn(1, 50, 3, 2, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: Float64Attention.apply(*x.permute(2, 0, 3, 1, 4), True,
                                                                      ab.atomic_dq_backward),
                                    (qkv.requires_grad_(),), fast_mode=True, atol=1e-10, rtol=1e-7)


@pytest.mark.parametrize("rung", list(RUNGS))
def test_rungs_3_and_4_write_every_element_and_nan_propagates(rung):
    """Poisoned strided buffers are overwritten (rung 3: its dQ too, cast from the atomic sums), with rung 2's
    numbers; a NaN in dO comes out as NaN, which the check then fails (it never passes as a number)."""
    gen = torch.Generator().manual_seed(8)
    q, k, v = packed(gen, 1, 2, 40, 64)
    do = randn(gen, 1, 2, 40, 64)
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    buffers = tuple(torch.full((1, 40, 2, 64), float("nan"), dtype=torch.float16).transpose(1, 2) for _ in range(3))
    assert RUNGS[rung](q, k, v, out, lse, do, True, out=buffers) == buffers
    for got, want in zip(buffers, ab.backward(q, k, v, out, lse, do, True)):
        assert compare(got, want).ok
    do[0, 1, 5, 7] = float("nan")
    got = RUNGS[rung](q, k, v, out, lse, do, True)
    assert all(g[0, 1].isnan().any() for g in got) and not compare(got[1], buffers[1]).ok


@pytest.mark.parametrize("with_dlse", [False, True])
def test_rung_4s_q_kernel_computes_delta_before_the_kv_kernel_reads_it(with_dlse):
    """Rung 4 launches no preprocess: Δ's buffer, poisoned with NaN, is written by the Q kernel (minus dLSE where
    the log-sum-exp has a gradient) before the K/V kernel reads it; the gradients are rung 2's, bit for bit."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = packed(gen, 1, 2, 40, 64)
    do = randn(gen, 1, 2, 40, 64)
    dlse = randn(gen, 1, 2, 40, dtype=torch.float32) if with_dlse else None
    out, lse = torch.ops.ladder.attention(q, k, v, True)
    delta = torch.full((1, 2, 40), float("nan"))
    got = ab.delta_in_dq_backward(q, k, v, out, lse, do, True, dlse=dlse, delta=delta)
    want = ab.backward(q, k, v, out, lse, do, True, dlse=dlse)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert compare(delta, (out.float() * do.float()).sum(-1) - (0 if dlse is None else dlse)).ok   # no NaN left


def test_rung_4_takes_interpreter_tiles_without_a_search():
    """No GPU: nothing searched or cached, rung 4 runs the interpreter's tiles, rung 2's way; its search space's
    prune rule keeps the causal diagonal whole, drops what would spill (rung 3's: its dQ tile counted too) and
    the TMA's reductions where there is no TMA."""
    assert backward_search.tuned_tiles(40, 64, True) == {"delta": ab.INTERPRETER_TILES[64]["delta"],
                                                        "dkdv": ab.INTERPRETER_TILES[64]["dkdv"],
                                                        "dq": ab.INTERPRETER_TILES[64]["dq"], "one_kernel": None}
    dkdv = backward_search.tuner("dkdv", 128)
    reasons = [dkdv.prune(c, None) for c in dkdv.configs()]
    prune_reason = backward_search.prune_reason
    assert prune_reason("dkdv", dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2), None, 64).startswith("32 rows")
    assert any(r and "spill" in r for r in reasons) and any(r is None for r in reasons)
    assert prune_reason("dq", ab.GPU_TILES[64]["dq"], None, 64) is None   # rung 2's tiles are candidates
    tile = dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=2)
    assert prune_reason("dkdv", tile, None, 64) is None and "spill" in prune_reason("dkdv_atomic", tile, None, 64)
    assert "no TMA" in prune_reason("dkdv_atomic", ab.GPU_TILES[64]["dkdv_atomic"], None, 64)


def _report(kernel: str, ms: float, best: dict, S: int = 4096):
    return autotune.Report("attention_backward", f"triton:4_autotuned:{kernel}", (S, 64, 1), "a GPU", best, ms, 1.0)


@pytest.mark.parametrize("one_ms, picked", [(2.9, True), (3.1, False)])
def test_rung_4_runs_rung_3_where_its_search_beat_rung_2s_two_kernels(monkeypatch, one_ms, picked):
    """Rung 4 takes rung 3's searched tiles only where, searched at the same S, rung 3 ran faster than rung 2's two
    kernels together (here 2 + 1 ms); and runs rung 2 anyway where torch.use_deterministic_algorithms asks for
    results that repeat bit for bit, which rung 3's atomic sums do not."""
    one = dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1)
    reports = {"dkdv": _report("dkdv", 2.0, ab.INTERPRETER_TILES[64]["dkdv"]),
               "dq": _report("dq", 1.0, ab.INTERPRETER_TILES[64]["dq"]), "dkdv_atomic": _report("dkdv_atomic", one_ms, one)}
    monkeypatch.setattr(autotune, "_BEST", {})   # the tiles are kept per shape until the searches change (forget)
    for kernel, report in reports.items():
        monkeypatch.setattr(backward_search.TUNERS[kernel, 64], "nearest", lambda shape, report=report: report)
    assert backward_search.tuned_tiles(4000, 64, True)["one_kernel"] == (one if picked else None)
    monkeypatch.setattr(backward_search.TUNERS["dkdv", 64], "nearest", lambda shape: _report("dkdv", 0.5, {}, S=16384))
    autotune.forget()
    assert backward_search.tuned_tiles(4000, 64, True)["one_kernel"] is None   # searched at another S: not compared
    monkeypatch.setattr(backward_search.TUNERS["dkdv", 64], "nearest", lambda shape: reports["dkdv"])
    autotune.forget()
    ran = []
    monkeypatch.setattr(ab, "atomic_dq_backward", lambda *args, config, **kw: ran.append(config))
    gen = torch.Generator().manual_seed(3)
    q, k, v = packed(gen, 1, 1, 40, 64)
    o, lse = torch.ops.ladder.attention(q, k, v, True)
    backward_search.autotuned_backward(q, k, v, o, lse, q, True)
    assert ran == ([one] if picked else [])
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    backward_search.autotuned_backward(q, k, v, o, lse, q, True)
    assert ran == ([one] if picked else [])


def test_rung_3_compiles_for_hopper_with_atomics_and_no_spills():
    """Rung 3's kernel as it launches on a GPU (D = 64, causal): its products on wgmma, nothing in local memory
    with its own tiles (rung 2's spill there), and dQ added by red.global adds (REDG) where the launch is traced
    (no TMA), by the TMA's bulk reductions (UTMAREDG) where it is eager on sm_90."""
    for qdo_tma, adds in ((False, "REDG"), (True, "UTMAREDG")):
        code = str(sass.triton_sass(**problem_module.sass_case("dkdv_atomic", qdo_tma=qdo_tma), arch="sm_90"))
        assert adds in code and "HGMMA" in code and " STL" not in code
    assert "REDG" not in code.replace("UTMAREDG", "")


@pytest.mark.parametrize("causal", [False, True])
def test_the_kv_kernel_reads_q_and_do_through_the_tma_as_through_pointers(causal):
    """The K/V kernel's TMA path (tensor descriptors of Q and dO, what an eager launch on sm_90 takes) writes what
    its pointer loads write, bit for bit: strided views (a model's packed projection) and a ragged S, whose last
    step's rows past S the TMA fills with zeros, as the masked loads do. The interpreter runs the descriptors."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = packed(gen, 1, 2, 40, 64)
    do = randn(gen, 1, 40, 2, 64).transpose(1, 2)
    o, lse = torch.ops.ladder.attention(q, k, v, causal)
    dq, _, _, delta, scale, tiles = ab.prepare(q, k, v, o, lse, do, causal, None, None, None, None)
    got = {}
    for by_tma in (False, True):
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        ab._launch_dkdv(q, k, v, do, lse, delta, dk, dv, None, scale, causal, tiles["dkdv"], by_tma=by_tma)
        got[by_tma] = dk, dv
    assert all(torch.equal(a, b) for a, b in zip(got[False], got[True]))
    assert not any(t.isnan().any() for t in got[True])


def test_the_kv_kernel_on_hopper_loads_q_and_do_with_the_tma():
    """SASS of the K/V kernel as an eager launch on sm_90 compiles it: Q and dO by UTMALDG, nothing spilled."""
    tiles = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)   # rung 4's at D64 on the H100
    code = str(sass.triton_sass(**problem_module.sass_case("dkdv", 64, False, tiles, qdo_tma=True), arch="sm_90a"))
    assert "UTMALDG" in code and "HGMMA" in code and " STL" not in code


# ------------------------------------------------------------- the recorded problem, attention_backward

def test_the_problem_registers_its_cases_and_flops():
    from ladder import problems
    p = problems.get("attention_backward")
    assert [r.label for r in p.rungs] == ["triton:1_materialized", "triton:2_flash", "triton:3_atomic_dq",
                                          "triton:4_autotuned", "torch:sdpa", "torch:sdpa_flash"]
    assert p.bench_shapes == [(4, 32, S, D, c) for S in (4096, 16384) for D in (64, 128) for c in (0, 1)]
    assert p.flops((4, 32, 4096, 64, 0)) == 2.5 * 4 * 4 * 32 * 4096 ** 2 * 64
    assert p.flops((4, 32, 16384, 128, 1)) == 2.5 * 4 * 4 * 32 * 16384 ** 2 * 128 / 2


def test_rung_1_is_not_available_where_it_does_not_fit(monkeypatch):
    """On an 80 GB GPU rung 1 runs at S 4096 (about 32 GiB) and says why not at S 16384; never a crash."""
    from types import SimpleNamespace
    monkeypatch.setattr(problem_module, "detect", lambda: SimpleNamespace(name="H100", memory_bytes=80 * 2**30))
    assert problem_module.materialized_unavailable((4, 32, 4096, 128, 0)) is None
    assert problem_module.materialized_unavailable((4, 32, 16384, 64, 1)) == \
        "N/A: needs 514 GiB (4 x B·H·S² fp32 at its peak), H100 has 80 GiB"


def test_the_problems_rungs_check_in_the_interpreter():
    """The harness's own path (ladder.runner.check_rung: poisoned output, reference) for rungs 1-4 at the
    interpreter's shapes; an anchor's timed calls, after the check filled the output, skip the copy."""
    from ladder import problems, runner
    p = problems.get("attention_backward")
    for rung in p.rungs:
        if runner.unavailable(rung) is None:
            assert all(r.ok for _, r in runner.check_rung(p, rung)), rung.label
    q, k, v, do, causal, forward = p.make_inputs((1, 1, 19, 64, 1), "cpu", torch.Generator().manual_seed(0))
    out = p.new_output((1, 1, 19, 64, 1), "cpu")
    run = p.rung("triton", "1_materialized").run
    run(q, k, v, do, causal, forward, out=out)
    assert compare(out, p.reference(q, k, v, do, causal, forward)).ok
    out.fill_(float("nan"))
    run(q, k, v, do, causal, forward, out=out)
    assert out.isnan().all()   # not copied again: what bench times is the backward alone


def test_record_skips_a_shape_a_rung_cannot_run_and_keeps_the_problems_measurements(monkeypatch):
    """ladder.runner's recording loop (its GPU parts stubbed): a rung's unavailable_at skips that shape with its
    reason (a not_run row naming the shape), the other shapes are timed; Problem.measure's rows go into the record
    and ladder.results.merge keeps them per (rung, shape)."""
    from dataclasses import replace
    from types import SimpleNamespace
    from ladder import problems, results, runner
    p = problems.get("attention_backward")
    rung = replace(p.rung("triton", "2_flash"), unavailable_at=lambda s: "N/A: needs 9 GiB" if s[2] > 20 else None)
    row = {"problem": p.name, "backend": "triton", "rung": "2_flash", "shape": [1, 1, 19, 64, 1], "peak_bytes": 1}
    small = replace(p, rungs=[rung], tune=None, bench_shapes=p.interpret_shapes, measure=lambda labels: {"memory": [row]})
    monkeypatch.setattr(runner, "detect", lambda: SimpleNamespace(name="GPU", emulation_note=None, datasheet=None,
                                                                   as_dict=dict))
    monkeypatch.setattr(runner.ceilings_mod, "measure", lambda gpu, refresh: {})
    monkeypatch.setattr(runner.ceilings_mod, "datasheet_ceilings", lambda sheet: None)
    monkeypatch.setattr(runner.results_mod, "provenance", lambda gpu: {"date": "today"})
    monkeypatch.setattr(runner, "time_rung", lambda problem, r, shape: {"problem": problem.name, "backend": r.backend,
                                                                        "rung": r.name, "shape": list(shape)})
    _, record = runner._measure([small], progress=False, shapes=None, tune=True)
    assert [r["shape"] for r in record["runs"]] == [[1, 1, 19, 64, 1]]
    assert record["not_run"] == [{"problem": p.name, "backend": "triton", "rung": "2_flash", "shape": [1, 2, 40, 64, 0],
                                  "reason": "N/A: needs 9 GiB"}]
    merged = results.merge({**record, "memory": [{**row, "peak_bytes": 0}, {**row, "shape": [2]}]}, record)
    assert sorted(r["peak_bytes"] for r in merged["memory"]) == [1, 1]   # the same (rung, shape) replaced


def test_rung_4s_search_times_checks_and_caches_each_kernel(monkeypatch, tmp_path):
    """tune()'s plumbing in the interpreter, the GPU's parts stood in for (a GPU's name, times, the cache file):
    each kernel's configurations run, are checked against the exact gradients and timed; the winners are cached
    per GPU under (S, D, causal), and rung 4 then takes them for the nearest S (the S-bucket)."""
    import itertools
    from types import SimpleNamespace
    from ladder import autotune
    gpu, times = SimpleNamespace(name="GPU", slug="gpu"), itertools.count()
    for module in (ab, backward_search, autotune):
        monkeypatch.setattr(module, "detect", lambda: gpu)
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "_BEST", {})
    monkeypatch.setattr(autotune, "search_bench", lambda fn, warmup, rep, q: [10.0 - next(times)])  # the last wins
    monkeypatch.setattr(autotune, "compile_ahead", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(backward_search, "SEARCH_KEYS", 40)
    monkeypatch.setattr(ab, "GPU_TILES", ab.INTERPRETER_TILES)
    monkeypatch.setattr(backward_search, "SEARCH_SPACE", {
        "dkdv": dict(BLOCK_M=[16, 32], BLOCK_N=[64], num_warps=[4], num_stages=[1]),
        "dq": dict(BLOCK_M=[64], BLOCK_N=[16, 32], num_warps=[4], num_stages=[1]),
        "dkdv_atomic": dict(BLOCK_M=[16], BLOCK_N=[32, 64], num_warps=[2], num_stages=[1], DQ_BY_TMA=[False])})
    reports = backward_search.tune([(40, 64, 1)], backward_search.exact_grads, device="cpu")
    assert [(r.tuner, r.shape, len(r.timed), len(r.failed)) for r in reports] == [
        ("triton:4_autotuned:dkdv", (40, 64, 1), 2, 0), ("triton:4_autotuned:dq", (40, 64, 1), 2, 0),
        ("triton:4_autotuned:dkdv_atomic", (40, 64, 1), 2, 0)]
    want = {"dkdv": dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=1),
            "dq": dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=1),
            # timed last, so fastest: 5 "ms" against rung 2's 9 + 7
            "one_kernel": dict(BLOCK_M=16, BLOCK_N=64, num_warps=2, num_stages=1, DQ_BY_TMA=False)}
    assert {k: backward_search.tuned_tiles(4000, 64, True)[k] for k in want} == want   # the nearest S searched


def test_a_first_backward_at_a_new_shape_times_a_short_list_once(monkeypatch, tmp_path):
    """On a GPU no search has measured at (S, D, causal), the first backward there big enough to pay for it times
    first_use_tiles (rung 2's kernels only), once a process; not below autotune.SEARCH_MIN_FLOP, not where a search
    ran at that S, not with tuning off. A search that fails is logged, and the backward goes on."""
    from types import SimpleNamespace
    from ladder import first_use
    gpu, searched = SimpleNamespace(name="GPU", slug="gpu"), []
    monkeypatch.setattr(first_use, "_BACKWARD_SETTLED", set())
    monkeypatch.setattr(first_use, "LOG", [])
    monkeypatch.setattr(autotune, "_BEST", {})
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "cached_reports", lambda slug, problem, name: [
        SimpleNamespace(shape=(4096, 64, 1))])
    monkeypatch.setattr(backward_search, "tune", lambda buckets, reference, listed: searched.append((buckets, listed))
                        or [])
    first_use.search_attention_backward((8, 12, 1024, 64, True), gpu)
    first_use.search_attention_backward((8, 12, 1024, 64, True), gpu)     # tried once
    first_use.search_attention_backward((4, 32, 4096, 64, True), gpu)     # searched there
    first_use.search_attention_backward((1, 12, 128, 64, True), gpu)      # 50 MFLOP: not worth a search
    first_use.search_attention_backward((8, 12, 1024, 64, True), None)    # the interpreter
    assert searched == [([(1024, 64, 1)], backward_search.first_use_tiles(64))]
    assert set(searched[0][1]) == {"dkdv", "dq"} and ab.GPU_TILES[64]["dq"] in searched[0][1]["dq"]
    monkeypatch.setenv(first_use.TUNE_ENV, "0")
    first_use.search_attention_backward((8, 12, 2048, 64, True), gpu)
    monkeypatch.delenv(first_use.TUNE_ENV)

    def fails(buckets, reference, listed):
        raise RuntimeError("no configuration ran correctly")
    monkeypatch.setattr(backward_search, "tune", fails)
    first_use.search_attention_backward((8, 12, 2048, 64, True), gpu)
    assert len(searched) == 1 and "search failed: RuntimeError" in first_use.LOG[-1].note


def test_float64_takes_its_own_tiles():
    """float64 operands (gradcheck's) launch FLOAT64_TILES whatever the tiles asked (fp16's: on the H100 some
    outgrew shared memory at 8 bytes an element); fp16 keeps its own."""
    tiles = ab.GPU_TILES[64]["dkdv_atomic"]
    assert ab._fitted(tiles, torch.zeros(1, 64, dtype=torch.float64), "dkdv_atomic") == ab.FLOAT64_TILES[64]["dkdv_atomic"]
    assert ab._fitted(tiles, torch.zeros(1, 64, dtype=torch.float16), "dkdv_atomic") is tiles
