"""ladder.ops on a GPU (the operators are triton_ops here): every layout and epilogue against float64 on ragged
shapes with fresh data, the cached launches (a second call at a key, a misaligned view at a cached shape), the
backward, attention and its log-sum-exp on a model's views, opcheck, torch.compile(fullgraph) with Inductor
launching our kernels, CUDA graphs, the fallback under KERNEL_LADDER_EMULATE=sm_75, and the checks. Run with
`pytest tests/gpu/test_ops_gpu.py -o addopts=""`; `python -m ladder.launch` measures the host cost."""
import pytest
import torch
from torch._inductor.utils import run_and_get_code

import kernels.attention as attention_problem
import ops_helpers
from ladder import autotune, dispatch, first_use, ops
from ladder.runtime import hardware
from ladder.check import compare
from ops_helpers import laid_out, reference

GEN = torch.Generator("cuda").manual_seed(7)


@pytest.fixture(autouse=True)
def rung_6_by_its_rule():
    """Rung 6 at every case, in the op's own rule's configuration (what these tests check), not what first-use
    tuning would pick; the tests of first use (below) and of a table's pick install their own."""
    with dispatch.suspended():
        yield


def randn(*shape):
    return torch.randn(*shape, generator=GEN, device="cuda").half()


def test_the_ops_run_rung_6_on_this_gpu():
    assert ops.backend("matmul").kernel == ops.backend("attention").kernel == "triton:6_autotuned", ops.describe()


@pytest.mark.parametrize("layout_a, layout_b", [("row", "row"), ("col", "row"), ("row", "col"), ("col", "col"),
                                                ("offset", "row"), ("broadcast", "col")])
@pytest.mark.parametrize("shape", [(1, 1, 1), (257, 131, 67)])
def test_matmul_reads_every_layout_in_place(shape, layout_a, layout_b):
    M, N, K = shape
    for _ in range(2):  # the second call at the same key goes through the cached launch; fresh data each time
        a, b = laid_out(randn(M, K), layout_a), laid_out(randn(K, N), layout_b)
        out = ops.matmul(a, b)
        torch.cuda.synchronize()
        assert compare(out, reference(a, b)).ok


def test_a_misaligned_view_at_a_cached_shape_gets_its_own_specialization():
    a, b = randn(96, 64), randn(64, 80)
    assert compare(ops.matmul(a, b), reference(a, b)).ok
    shifted = laid_out(a, "offset")   # same shape and strides, 2 bytes off: Triton's 16-byte assumption fails
    assert compare(ops.matmul(shifted, b), reference(shifted, b)).ok


@pytest.mark.parametrize("bias, activation", [(True, "relu"), (True, "gelu"), (True, None), (False, "gelu")])
def test_matmul_epilogues(bias, activation):
    a, w = randn(257, 67), randn(131, 67)
    b = randn(131) if bias else None
    for _ in range(2):
        assert compare(ops.matmul(a, w.t(), b, activation), reference(a, w.t(), b, activation)).ok


def test_a_shape_worth_a_search_runs_the_recorded_winner():
    shape = (2304, 2048, 2048)
    a, b = randn(shape[0], shape[2]), randn(shape[2], shape[1])
    assert compare(ops.matmul(a, b), reference(a, b)).ok
    recorded = [r.best for r in autotune.cached_reports(hardware.detect().slug, "matmul", "triton:6_autotuned")]
    config = ops.matmul_plan(*shape).config
    assert config in recorded if recorded else (config["BLOCK_M"], config["BLOCK_N"]) == (64, 64)


def test_matmul_backward_against_float64():
    a, b, bias = (x.requires_grad_() for x in (randn(257, 67), randn(67, 131), randn(131)))
    grad = randn(257, 131)
    ops.matmul(a, b, bias, "gelu").backward(grad)
    wanted = [t.detach().double().requires_grad_() for t in (a, b, bias)]
    reference(*wanted, "gelu").backward(grad.double())
    for got, want in zip((a, b, bias), wanted):
        assert compare(got.grad, want.grad).ok


@pytest.mark.parametrize("pick", [ops.CUBLAS, ops.RUNG6])
def test_an_eager_call_wanting_gradients_skips_the_dispatcher(pick, monkeypatch):
    """Where the case's pick is cuBLAS, torch's own ops (autograd's C++ nodes); where it is rung 6, _EagerMatmul:
    the gradients right either way."""
    for chooser in ("_eager_pick", "_training_pick"):
        monkeypatch.setattr(ops, chooser, lambda case, M, N, K: pick)
    a, w, bias = (x.requires_grad_() for x in (randn(257, 67), randn(131, 67), randn(131)))
    grad = randn(257, 131)
    out = ops.matmul(a, w.t(), bias, "gelu")
    assert type(out.grad_fn).__name__ == ("GeluBackward0" if pick == ops.CUBLAS else "_EagerMatmulBackward")
    out.backward(grad)
    wanted = [t.detach().double().requires_grad_() for t in (a, w, bias)]
    reference(wanted[0], wanted[1].t(), wanted[2], "gelu").backward(grad.double())
    for got, want in zip((a, w, bias), wanted):
        assert compare(got.grad, want.grad).ok


def test_a_gelu_layer_keeps_its_input_from_the_forward_eager_and_compiled():
    """Where a gradient is wanted, the GELU kernel also writes its input a @ b + bias, which the backward reads
    (its three matmuls are the forward and the two gradients), eager and in a fullgraph compile of the step."""
    a, w, bias = randn(257, 67), randn(131, 67), randn(131)
    grad = randn(257, 131)
    assert set(torch.library.opcheck(ops.MATMUL_GELU_AND_INPUT_OP, (a, w.t(), bias)).values()) == {"SUCCESS"}
    wanted = [t.double().requires_grad_() for t in (a, w, bias)]
    reference(wanted[0], wanted[1].t(), wanted[2], "gelu").backward(grad.double())
    torch._dynamo.reset()
    step = lambda x, y, z: ops.matmul(x, y.t(), z, "gelu")
    for run in (step, torch.compile(step, fullgraph=True)):
        leaves = [t.clone().requires_grad_() for t in (a, w, bias)]
        out = run(*leaves)
        assert compare(out, reference(a, w.t(), bias, "gelu")).ok
        out.backward(grad)
        for got, want in zip(leaves, wanted):
            assert compare(got.grad, want.grad).ok


@pytest.mark.parametrize("shape", [(1, 2, 1, 64, 0), (1, 2, 100, 64, 1), (2, 3, 129, 128, 0), (1, 1, 257, 128, 1)])
@pytest.mark.parametrize("packed", [True, False])
def test_attention_and_its_log_sum_exp_against_float64(shape, packed):
    B, H, S, D, causal = shape
    q, k, v = (randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4) if packed else (randn(B, H, S, D) for _ in range(3)))
    out, lse = torch.ops.ladder.attention(q, k, v, bool(causal))
    assert compare(out, attention_problem.reference(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal))).ok
    scores = q.double() @ k.double().transpose(-1, -2) / D ** 0.5
    if causal:
        scores.masked_fill_(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    assert compare(lse, torch.logsumexp(scores, -1)).ok
    assert torch.equal(ops.attention(q, k, v, causal=bool(causal)), out)  # the direct path, same kernel


def test_a_second_scale_at_a_launched_shape_is_the_one_applied():
    """A cached attention launch is laid out with its arguments (ops.Launches): a call at the same shape with
    another scale launches with that scale, not the first call's."""
    q, k, v = (randn(1, 2, 100, 64) for _ in range(3))
    for scale in (0.125, 0.05, 0.125):
        want = attention_problem.reference(q.float() * (scale * 8), k, v, True)   # D ** -0.5 = 1/8
        assert compare(ops.attention(q, k, v, causal=True, scale=scale), want).ok


@pytest.mark.parametrize("shape", [(1, 2, 100, 64, 1), (2, 3, 257, 128, 1), (1, 2, 129, 64, 0)])
def test_attention_with_its_longest_query_blocks_first_against_float64(shape):
    """flash_kernel's HEAVIEST_FIRST, the grid (B·H, blocks) with the blocks from the last: the same O and LSE as
    rung 6's own order, both right, on ragged shapes (the ops pick it per shape where it measured faster)."""
    B, H, S, D, causal = shape
    q, k, v = randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
    out, lse = ops._attention_run(q, k, v, bool(causal), B, H, S, D, D ** -0.5, heaviest_first=True)
    want, want_lse = ops._attention_run(q, k, v, bool(causal), B, H, S, D, D ** -0.5, heaviest_first=False)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert compare(out, attention_problem.reference(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal))).ok


def test_opcheck_on_the_gpu():
    a, b, bias = randn(37, 45), randn(45, 29), randn(29)
    for args in [(a, b), (a.t().contiguous().t(), b, bias, "gelu"), (a, b.t().contiguous().t(), bias),
                 (a.clone().requires_grad_(), b.clone().requires_grad_(), bias.clone().requires_grad_(), "relu")]:
        assert set(torch.library.opcheck(ops.MATMUL_OP, args).values()) == {"SUCCESS"}, args
    q, k, v = randn(2, 33, 3, 2, 64).permute(2, 0, 3, 1, 4)
    for args in [(q, k, v, True, None), (q.contiguous(), k.contiguous(), v.contiguous(), False, 0.2)]:
        assert set(torch.library.opcheck(ops.ATTENTION_OP, args).values()) == {"SUCCESS"}


def test_compiled_with_fullgraph_inductor_launches_our_kernels_in_a_cuda_graph():
    block, reference_block = ops_helpers.make("cuda")
    x = torch.randn(2, 64, 128, generator=GEN, device="cuda")
    with torch.no_grad():
        want = reference_block(x.double())
        compiled = torch.compile(block, fullgraph=True, mode="reduce-overhead")
        _, code = run_and_get_code(compiled, x.half())
        assert "persistent_kernel" in "".join(code) and "flash_kernel" in "".join(code)  # Inductor's own launches
        for _ in range(3):  # cudagraph trees record on the first calls, then replay
            got = compiled(x.half()).clone()
        assert compare(got, want).ok
        assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0


def test_eager_calls_capture_into_a_cuda_graph():
    block, reference_block = ops_helpers.make("cuda")
    static_x = torch.randn(2, 64, 128, generator=GEN, device="cuda").half()
    with torch.no_grad():
        block(static_x)  # compile and cache the launches before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(static_x)
        fresh = torch.randn(2, 64, 128, generator=GEN, device="cuda")
        static_x.copy_(fresh.half())
        graph.replay()
        torch.cuda.synchronize()
        assert compare(static_out, reference_block(fresh.half().double())).ok


def test_under_emulated_sm_75_matmul_falls_back_to_cublas(monkeypatch):
    monkeypatch.setenv(hardware.EMULATE_ENV, "sm_75")
    for cache in (hardware.detect, ops.backend):
        cache.cache_clear()
    try:
        assert ops.backend("matmul").kernel == "torch:cublas" and "sm_75" in ops.backend("matmul").note
        a, w, bias = randn(57, 40), randn(33, 40), randn(33)
        assert compare(ops.matmul(a, w.t(), bias, "gelu"), reference(a, w.t(), bias, "gelu")).ok
        q, k, v = (randn(1, 2, 50, 64) for _ in range(3))
        assert compare(ops.attention(q, k, v, causal=True), attention_problem.reference(q, k, v, True)).ok
    finally:
        monkeypatch.delenv(hardware.EMULATE_ENV)
        for cache in (hardware.detect, ops.backend):
            cache.cache_clear()


def test_a_tensor_off_the_gpu_is_named():
    with pytest.raises(ValueError, match="a is on cpu; here the kernels run on cuda"):
        ops.matmul(randn(4, 5).cpu(), randn(5, 6))
    with pytest.raises(ValueError, match="v is on meta"):
        ops.attention(randn(1, 1, 8, 64), randn(1, 1, 8, 64), randn(1, 1, 8, 64).to("meta"))


@pytest.fixture
def rung7_table(monkeypatch):
    """A dispatch table whose pick at (300, 1449, 777) and (512, 50257, 768) is rung 7 (as the sweep found at
    the vocabulary projection and the odd shapes), in effect for the test; the op's choices forgotten around it."""
    shapes = [(300, 1449, 777), (512, 50257, 768)]
    entries = [dispatch.Entry(dispatch.Case(*s, layout, epilogue), {dispatch.CUBLAS: dispatch.Timed(None, 2.0),
                                                                   dispatch.RUNG7: dispatch.Timed(None, 1.0)})
               for s in shapes for layout in ("row", "weight_t") for epilogue in (None, "bias")]
    table = dispatch.DispatchTable.of(dispatch.process_key(hardware.detect().slug), entries)
    monkeypatch.setattr(dispatch, "suspending", False)
    monkeypatch.setattr(dispatch, "_loaded", dispatch.Loaded(table, "installed by the test"))
    ops.forget_choices()
    yield shapes
    ops.forget_choices()


def test_an_eager_call_runs_rung_7_where_the_table_picks_it(rung7_table, monkeypatch):
    from kernels.triton import matmul as tm
    ran = []
    tma = tm.tma_persistent
    monkeypatch.setattr(tm, "tma_persistent", lambda a, b: ran.append(b.stride()) or tma(a, b))
    for M, N, K in rung7_table:
        assert ops.matmul_choice(M, N, K, "weight_t", "bias").eager == "triton:7_tma_persistent"
        a, w, bias = randn(M, K), randn(N, K), randn(N)
        for b in (w.t(), w.t().contiguous()):   # a weight as nn.Linear keeps it, and row-major B
            out = ops.matmul(a, b, bias)
            torch.cuda.synchronize()
            assert compare(out, reference(a, b, bias)).ok
        poisoned = a.clone()
        poisoned[3, 5] = float("nan")
        got = ops.matmul(poisoned, w.t())
        assert got[3].isnan().all() and not got[4].isnan().any()   # NaN reaches its row, and only its row
    assert len(ran) == 6


def test_rung_7_captures_into_a_cuda_graph_and_compile_runs_the_pick_without_it(rung7_table):
    M, N, K = rung7_table[0]
    a, w = randn(M, K), randn(N, K)
    ops.matmul(a, w.t())   # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.matmul(a, w.t())
    a.copy_(randn(M, K))
    graph.replay()
    torch.cuda.synchronize()
    assert compare(out, reference(a, w.t())).ok
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: ops.matmul(x, y.t()), fullgraph=True)
    assert compare(compiled(a, w), reference(a, w.t())).ok


def test_first_use_tunes_a_case_from_a_cold_cache_eager_and_under_compile(tmp_path, monkeypatch):
    """No table on disk: the first eager call in a case measures it (once: the second call reads the choice), and a
    compiled function's trace measures its own case on real tensors of the traced shape before Inductor bakes in
    the pick; both picks are correct, and the table on disk holds both cases."""
    monkeypatch.setattr(dispatch, "suspending", False)
    monkeypatch.setattr(dispatch, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(dispatch, "_loaded", None)
    monkeypatch.setattr(first_use, "LOG", [])
    ops.forget_choices()
    a, w, bias = randn(1024, 768), randn(3072, 768), randn(3072)
    for _ in range(2):
        assert compare(ops.matmul(a, w.t(), bias, "gelu"), reference(a, w.t(), bias, "gelu")).ok
    assert [t.case for t in first_use.LOG] == [dispatch.Case(1024, 3072, 768, "weight_t", "bias_gelu")]
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: ops.matmul(x, y), fullgraph=True)
    b = randn(768, 1536)
    assert compare(compiled(a, b), reference(a, b)).ok
    assert [t.case for t in first_use.LOG][1:] == [dispatch.Case(1024, 1536, 768)]
    assert all(t.entry is not None and t.seconds < 30 for t in first_use.LOG), first_use.report()
    assert set(dispatch.load(hardware.detect()).table.entries) == {t.case for t in first_use.LOG}
    ops.forget_choices()


@pytest.mark.parametrize("bias, activation", [(False, None), (True, "gelu"), (True, None)])
def test_matmul_in_bf16_past_fp16s_range_forward_backward_and_compiled(bias, activation):
    """bf16 through rung 6 (this file's rule): outputs past fp16's 65504 stay finite (C is stored as bf16, not
    through fp16), B as a weight's transpose and row-major, the backward, and a fullgraph compile."""
    def bf16(*shape, scale=1.0):
        return (torch.randn(*shape, generator=GEN, device="cuda") * scale).bfloat16()
    a, w = bf16(257, 67, scale=60.0), bf16(131, 67, scale=60.0)   # sums near 60·60·√67 ≈ 3e4, some past 65504
    b = bf16(131) if bias else None
    for weight in (w.t(), w.t().contiguous()):
        out = ops.matmul(a, weight, b, activation)
        assert out.dtype is torch.bfloat16 and out.float().abs().max() > 65504
        assert compare(out, reference(a, weight, b, activation)).ok
    leaves = [t.detach().clone().requires_grad_() for t in (a / 60, w / 60, *([b] if bias else []))]
    ops.matmul(leaves[0], leaves[1].t(), *leaves[2:], activation).sum().backward()
    wanted = [t.detach().double().requires_grad_() for t in leaves]
    reference(wanted[0], wanted[1].t(), *wanted[2:], activation).sum().backward()
    for got, want in zip(leaves, wanted):
        assert compare(got.grad, want.grad).ok
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y, z: ops.matmul(x, y.t(), z, activation), fullgraph=True)
    assert compare(compiled(a, w, b), reference(a, w.t(), b, activation)).ok
    torch.library.opcheck(torch.ops.ladder.matmul.default, (a[:64], w[:32].t(), None if b is None else b[:32],
                                                            activation))


@pytest.mark.skipif(not (hardware.detect() and hardware.detect().has("tma")), reason="rung 7 needs the TMA")
def test_rung_7_in_bf16():
    from kernels.triton import matmul as tm
    a = torch.randn(300, 777, generator=GEN, device="cuda").bfloat16()
    w = torch.randn(1449, 777, generator=GEN, device="cuda").bfloat16()
    for b in (w.t(), w.t().contiguous()):
        out = tm.tma_persistent(a, b)
        assert out.dtype is torch.bfloat16 and compare(out, reference(a, b)).ok


def test_first_use_measures_bf16_apart_from_fp16(tmp_path, monkeypatch):
    monkeypatch.setattr(dispatch, "suspending", False)
    monkeypatch.setattr(dispatch, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(dispatch, "_loaded", None)
    monkeypatch.setattr(first_use, "LOG", [])
    ops.forget_choices()
    a, w = randn(1024, 768), randn(3072, 768)
    for x, y in ((a, w), (a.bfloat16(), w.bfloat16())):
        for _ in range(2):
            assert compare(ops.matmul(x, y.t()), reference(x, y.t())).ok
    assert [t.case for t in first_use.LOG] == [dispatch.Case(1024, 3072, 768, "weight_t"),
                                               dispatch.Case(1024, 3072, 768, "weight_t", None, "bfloat16")]
    assert all(t.entry is not None for t in first_use.LOG), first_use.report()
    ops.forget_choices()


hopper = pytest.mark.skipif(not (hardware.detect() and hardware.detect().has("wgmma")), reason="CUDA rung 15 needs sm_90a")


@hopper
@pytest.mark.parametrize("shape", [(1, 2, 1, 64, 0), (1, 2, 100, 64, 1), (2, 3, 1000, 64, 1), (2, 3, 129, 128, 0),
                                   (1, 1, 257, 128, 1), (8, 12, 1024, 64, 1)])
@pytest.mark.parametrize("packed", [True, False])
def test_attention_hopper_and_its_log_sum_exp_against_float64(shape, packed):
    B, H, S, D, causal = shape
    q, k, v = (randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4) if packed else (randn(B, H, S, D) for _ in range(3)))
    out, lse = torch.ops.ladder.attention_hopper(q, k, v, bool(causal))
    assert out.stride() == torch.ops.ladder.attention(q, k, v, bool(causal))[0].stride()
    assert compare(out, attention_problem.reference(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal))).ok
    scores = q.double() @ k.double().transpose(-1, -2) / D ** 0.5
    if causal:
        scores.masked_fill_(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    assert compare(lse, torch.logsumexp(scores, -1)).ok


@hopper
def test_attention_hopper_opcheck_backward_and_a_cuda_graph():
    q, k, v = (t.clone().requires_grad_() for t in randn(2, 65, 3, 2, 64).permute(2, 0, 3, 1, 4))
    for args in [(q, k, v, True, None), (q.detach().contiguous(), k.detach().contiguous(), v.detach().contiguous(),
                                         False, 0.2)]:
        assert set(torch.library.opcheck(torch.ops.ladder.attention_hopper, args).values()) == {"SUCCESS"}
    out = torch.ops.ladder.attention_hopper(q, k, v, True)[0]
    out.float().square().sum().backward()
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True).square().sum().backward()
    for got, want in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        assert compare(got, want).ok
    static = randn(2, 3, 300, 64)
    torch.ops.ladder.attention_hopper(static, static, static, True)   # compiled before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = torch.ops.ladder.attention_hopper(static, static, static, True)[0]
    static.copy_(randn(2, 3, 300, 64))
    graph.replay()
    torch.cuda.synchronize()
    assert compare(captured, attention_problem.reference(static, static, static, True)).ok


def test_a_whole_model_replayed_from_a_cuda_graph_computes_what_eager_computes():
    """record models' graph variants: the replay reads the captured step's own input (kept alive with the graph), and
    in training the scaled loss leaves fp16 gradients to compare, not zeros."""
    from ladder.capstone import model, whole_model
    cfg = model.Config("tiny", d_model=128, heads=2, layers=1, seq=128, batch=2, vocab=96)
    for step in whole_model.STEPS:
        rows = whole_model.measure("gpt2-small", step, cfg, calls=1, rounds=1, progress=lambda _: None,
                                   variants=("eager", "CUDA graph", "CUDA graph + ops"))
        assert all(r["rel_error"] < 1e-2 for r in rows), rows


def test_torchs_launcher_and_tritons_launch_the_same_kernels_to_the_same_bits(monkeypatch):
    """direct_launch.run_compiled launches a compiled kernel through torch's C++ launcher where torch_launch takes it:
    rung 6's matmul (its epilogues, a ragged shape), rung 6's attention and the backward's kernels, replayed, give
    the same bits as through Triton's own launcher, and torch's did launch some of them."""
    from ladder.runtime import direct_launch
    a, w, bias = randn(257, 131), randn(67, 131), randn(67)
    q, k, v = randn(2, 77, 3, 3, 64).permute(2, 0, 3, 1, 4)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = ops.attention(*leaves, causal=True)
    grad = torch.randn_like(out)

    def results():
        return (ops.matmul(a, w.t()), ops.matmul(a, w.t(), bias, "gelu"), ops.matmul(a, w.t(), bias, "relu"),
                ops.attention(q, k, v, causal=True), *torch.autograd.grad(out, leaves, grad, retain_graph=True))
    results()   # compiled, and the backward's launches recorded
    by_torch = results()
    assert any(how is not None for how in direct_launch._BY_TORCH.values())
    monkeypatch.setattr(direct_launch, "_BY_TORCH", {})
    monkeypatch.setattr(direct_launch, "_TORCH_LAUNCHER", None)
    by_triton = results()
    assert not any(direct_launch._BY_TORCH.values())
    assert all(torch.equal(x, y) for x, y in zip(by_torch, by_triton))
