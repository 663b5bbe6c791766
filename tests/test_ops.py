"""ladder.ops in the CPU world: the operators run rung 6's kernels in Triton's interpreter (tiny shapes). Against
float64 on every layout the kernels take in place, the backward, the log-sum-exp, the checks, torch.library's
opcheck, torch.compile without graph breaks, the choice of kernel and configuration per GPU, and the launch
benchmark's rows in a recording. tests/gpu/test_ops_gpu.py runs the same on a GPU, and times nothing."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import kernels.attention as attention_problem
import kernels.matmul as mm
import ops_helpers
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import autotune, launch, ops, results, sass
from ladder.runtime import hardware
from ladder.check import compare
from ops_helpers import laid_out, reference

GEN = torch.Generator().manual_seed(2024)


def randn(*shape):
    return torch.randn(*shape, generator=GEN).half()


@pytest.mark.parametrize("layout_a, layout_b", [("row", "row"), ("col", "row"), ("row", "col"), ("col", "col"),
                                                ("offset", "row"), ("broadcast", "col")])
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 45, 29)])
def test_matmul_reads_every_layout_in_place(shape, layout_a, layout_b):
    M, N, K = shape
    a, b = laid_out(randn(M, K), layout_a), laid_out(randn(K, N), layout_b)
    assert compare(ops.matmul(a, b), reference(a, b)).ok


@pytest.mark.parametrize("bias, activation", [(True, "relu"), (True, "gelu"), (True, None), (False, "gelu"),
                                              (False, "relu"), ("strided", "relu")])
def test_matmul_epilogues(bias, activation):
    a, w = randn(33, 47), randn(40, 47)  # w as nn.Linear keeps it: out_features x in_features
    b = {True: randn(40), False: None, "strided": randn(80)[::2]}[bias]
    assert compare(ops.matmul(a, w.t(), b, activation), reference(a, w.t(), b, activation)).ok


def test_empty_and_zero_depth_products():
    assert ops.matmul(randn(0, 5), randn(5, 7)).shape == (0, 7)
    assert ops.attention(*(randn(1, 2, 0, 64),) * 3).shape == (1, 2, 0, 64)
    a, b, bias = torch.empty(5, 0).half(), torch.empty(0, 7).half(), randn(7)
    assert compare(ops.matmul(a, b, bias, "relu"), reference(a, b, bias, "relu")).ok   # relu(0 + bias)


class PassThrough(torch.overrides.TorchFunctionMode):
    """A mode that changes nothing, but makes a call go through the operators (ops._plain_eager is False)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("through", ["eager", "operator"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_matmul_backward_against_float64_through_the_op_on_views(activation, through, monkeypatch):
    a, b, bias = (x.requires_grad_() for x in (randn(9, 13), randn(13, 11), randn(11)))
    grad = randn(9, 11)
    storages = []
    run = ops._matmul_run
    monkeypatch.setattr(ops, "_matmul_run", lambda x, y, *rest, **kept: storages.append(
        {x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()}) or run(x, y, *rest, **kept))
    if through == "eager":   # an eager call wanting a gradient takes _EagerMatmul, never the operators
        for name in ("MATMUL_OP", "MATMUL_GELU_AND_INPUT_OP"):
            monkeypatch.setattr(ops, name, None)
    with PassThrough() if through == "operator" else contextlib.nullcontext():
        ops.matmul(a, b, bias, activation).backward(grad)
    wanted = [t.detach().double().requires_grad_() for t in (a, b, bias)]
    reference(*wanted, activation).backward(grad.double())
    for got, want in zip((a, b, bias), wanted):
        assert compare(got.grad, want.grad).ok
    operands = {a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()}
    assert len(storages) == 3  # forward, grad_a, grad_b: GELU's input kept from the forward, not recomputed
    assert all(len(s & operands) >= 1 for s in storages[1:])  # a and b read where they are: a.mT, b.mT


def test_the_gradients_come_laid_out_as_their_operands(monkeypatch):
    """nn.Linear's weight read as weight.t(), the input column-major too: each gradient reaches autograd in its
    operand's layout (torch.mm's backward's rule), so nothing is copied into the leaf's; and right."""
    for chooser in ("_eager_pick", "_training_pick"):
        monkeypatch.setattr(ops, chooser, lambda case, M, N, K: "triton:6_autotuned")
    x, w, bias = (t.requires_grad_() for t in (randn(13, 9), randn(11, 13), randn(11)))   # a = x.t(): column-major
    layouts = []
    for leaf in (x, w):
        leaf.register_hook(lambda g: layouts.append(g.is_contiguous()))
    grad = randn(9, 11)
    ops.matmul(x.t(), w.t(), bias, "gelu").backward(grad)
    assert layouts == [True, True]
    wanted = [t.detach().double().requires_grad_() for t in (x, w, bias)]
    reference(wanted[0].t(), wanted[1].t(), wanted[2], "gelu").backward(grad.double())
    for got, want in zip((x, w, bias), wanted):
        assert compare(got.grad, want.grad).ok


def test_an_eager_call_wanting_gradients_where_cublas_is_picked_runs_torchs_own_ops(monkeypatch):
    """Their autograd nodes are C++ (GeluBackward0, AddmmBackward0), not a Python node around the same cuBLAS call."""
    monkeypatch.setattr(ops, "_training_pick", lambda case, M, N, K: ops.CUBLAS)
    a, w, bias = (x.requires_grad_() for x in (randn(9, 13), randn(11, 13), randn(11)))
    out = ops.matmul(a, w.t(), bias, "gelu")
    assert type(out.grad_fn).__name__ == "GeluBackward0"
    assert type(out.grad_fn.next_functions[0][0]).__name__ == "AddmmBackward0"
    grad = randn(9, 11)
    out.backward(grad)
    wanted = [t.detach().double().requires_grad_() for t in (a, w, bias)]
    reference(wanted[0], wanted[1].t(), wanted[2], "gelu").backward(grad.double())
    for got, want in zip((a, w, bias), wanted):
        assert compare(got.grad, want.grad).ok


def test_the_gelu_kernel_also_writes_its_input_for_the_backward(monkeypatch):
    a, w, bias = randn(37, 29), randn(45, 29), randn(45)
    poisoned = torch.full((37, 45), float("nan"), dtype=torch.float16)
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda t, *size, **kw: poisoned.clone())
    out, pre = ops.MATMUL_GELU_AND_INPUT_OP(a, w.t(), bias)
    assert compare(out, reference(a, w.t(), bias, "gelu")).ok and compare(pre, reference(a, w.t(), bias)).ok


@pytest.mark.parametrize("shape", [(1, 2, 1, 64, 0), (1, 1, 19, 64, 1), (2, 3, 17, 128, 0)])
def test_attention_and_its_log_sum_exp_against_float64(shape):
    B, H, S, D, causal = shape
    q, k, v = randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4)   # views of one packed projection
    out, lse = torch.ops.ladder.attention(q, k, v, bool(causal))
    contiguous = [t.contiguous() for t in (q, k, v)]
    assert compare(out, attention_problem.reference(*contiguous, bool(causal))).ok
    scores = q.double() @ k.double().transpose(-1, -2) / D ** 0.5
    if causal:
        scores.masked_fill_(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    assert compare(lse, torch.logsumexp(scores, -1)).ok and lse.dtype == torch.float32
    assert out.transpose(1, 2).is_contiguous()  # laid out as q: (B, S, H, D) in memory, the reshape is free
    assert torch.equal(ops.attention(*contiguous, causal=bool(causal)), out)
    assert ops.attention(*contiguous).is_contiguous()


def test_attention_with_its_longest_query_blocks_first_is_the_same_attention(monkeypatch):
    """flash_kernel's HEAVIEST_FIRST (ladder.ops, where it measured it faster): the grid's axes swapped and the
    query blocks numbered from the last, ragged last block included; the same O and log-sum-exp, into outputs
    poisoned with NaN (a block left unwritten fails)."""
    empty_strided, new_empty = torch.empty_strided, torch.Tensor.new_empty
    monkeypatch.setattr(torch, "empty_strided", lambda *a, **kw: empty_strided(*a, **kw).fill_(float("nan")))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda t, *a, **kw: new_empty(t, *a, **kw).fill_(float("nan")))
    B, H, S, D = 2, 3, 37, 64
    q, k, v = randn(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
    for causal in (True, False):
        out, lse = ops._attention_run(q, k, v, causal, B, H, S, D, D ** -0.5, heaviest_first=True)
        want, want_lse = ops._attention_run(q, k, v, causal, B, H, S, D, D ** -0.5, heaviest_first=False)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        assert compare(out, attention_problem.reference(*[t.contiguous() for t in (q, k, v)], causal)).ok


def test_attention_scale():
    q, k, v = (randn(1, 2, 21, 64) for _ in range(3))
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3)
    assert compare(ops.attention(q, k, v, scale=0.3), want).ok


@pytest.mark.parametrize("call, message", [
    (lambda: ops.matmul(randn(4, 5).float(), randn(5, 6)), "a must be torch.float16"),
    (lambda: ops.matmul(randn(2, 4, 5), randn(5, 6)), "a must have 2 dimensions"),
    (lambda: ops.matmul(randn(4, 5), randn(6, 6)), "inner dimensions differ: a is 4x5, b is 6x6"),
    (lambda: ops.matmul(randn(4, 5), randn(5, 6), randn(5)), "bias has 5 elements"),
    (lambda: ops.matmul(randn(4, 5), randn(5, 6), None, "tanh"), "activation 'tanh'"),
    (lambda: ops.matmul(randn(4, 5), randn(5, 6).to("meta")), "b is on meta"),
    (lambda: ops.matmul([[1.0]], randn(5, 6)), "a must be a torch.Tensor"),
    (lambda: ops.attention(*(randn(1, 2, 8, 80),) * 3), "head dimension D=80"),
    (lambda: ops.attention(randn(1, 2, 8, 64), randn(1, 2, 9, 64), randn(1, 2, 8, 64)), "shape mismatch"),
    (lambda: ops.attention(*(randn(2, 8, 64),) * 3), "q must have 4 dimensions"),
    (lambda: ops.attention(*(randn(1, 2, 8, 64),) * 3, causal=1), "causal must be True or False"),
    (lambda: ops.attention(*(randn(1, 2, 8, 64).float(),) * 3), "q must be torch.float16 or torch.bfloat16"),
    (lambda: ops.attention(randn(1, 2, 8, 64), randn(1, 2, 8, 64).bfloat16(), randn(1, 2, 8, 64)),
     "must share one dtype, got torch.float16, torch.bfloat16"),
    (lambda: ops.attention(*(randn(1, 2, 8, 64).bfloat16(),) * 3), "bfloat16 runs on a GPU only"),
    (lambda: ops.matmul(randn(4, 5).bfloat16(), randn(5, 6).bfloat16()), "bfloat16 runs on a GPU only"),
    (lambda: ops.matmul(randn(4, 5), randn(5, 6), randn(6).bfloat16()),
     "a, b, bias must share one dtype, got torch.float16, torch.float16, torch.bfloat16"),
])
def test_bad_input_is_one_value_error_that_names_it(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_ops_launches_compile_for_hopper():
    """What the interpreter lets through and a GPU's compiler does not (a global that is no constexpr, a float
    of the wrong width, say): the flash kernel writing the log-sum-exp with its scale passed as Inductor passes a
    Python float (fp64), and rung 6 on a transposed A with its GELU epilogue, built for sm_90, also storing GELU's
    input for the backward."""
    flash = attention_problem.flash_sass_case("5_pipelined")
    without_lse = sass.triton_sass(**flash, arch="sm_90")
    flash["constexprs"] = {**{k: v for k, v in flash["constexprs"].items() if k != "lse_ptr"}, "STORE_LSE": True}
    flash["signature"] = {**flash["signature"], "qk_scale": "fp64"}
    assert sass.triton_sass(**flash, arch="sm_90").count("STG") > without_lse.count("STG")  # the LSE's store
    matmul = mm.persistent_sass_case(dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3))
    matmul["constexprs"] = {**{k: v for k, v in matmul["constexprs"].items() if k != "stride_ak"}, "stride_am": 1,
                            "BIAS_GELU": True}  # A read down its columns: a.t() of a row-major matrix
    matmul["divisible_by_16"] = tuple(a for a in matmul["divisible_by_16"] if a != "stride_am") + ("stride_ak",)
    without_input = sass.triton_sass(**matmul, arch="sm_90")
    assert without_input.count("HGMMA") > 0
    matmul["constexprs"] = {k: v for k, v in matmul["constexprs"].items() if k != "pre_ptr"}
    matmul["signature"] = {**matmul["signature"], "pre_ptr": "*fp16"}
    assert sass.triton_sass(**matmul, arch="sm_90").count("STG") > without_input.count("STG")   # GELU's input


def test_opcheck_in_the_interpreter():
    a, b, bias = randn(5, 7), randn(7, 6), randn(6)
    for args in [(a, b), (a.t().contiguous().t(), b, bias, "gelu"), (a, b, bias), (a, b, None, "relu"),
                 (a.requires_grad_(), b.requires_grad_(), bias.requires_grad_(), "relu")]:
        assert set(torch.library.opcheck(ops.MATMUL_OP, args).values()) == {"SUCCESS"}, args
    assert set(torch.library.opcheck(ops.MATMUL_GELU_AND_INPUT_OP, (a, b.t().contiguous().t(), bias)).values()) == {
        "SUCCESS"}
    q, k, v = randn(1, 5, 3, 2, 64).permute(2, 0, 3, 1, 4)
    for args in [(q, k, v, True, None), (q.contiguous(), k, v.contiguous(), False, 0.2)]:
        assert set(torch.library.opcheck(ops.ATTENTION_OP, args).values()) == {"SUCCESS"}


def test_a_call_skips_the_dispatcher_only_where_it_would_call_our_kernel_anyway():
    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))
    a, b = randn(8, 8), randn(8, 8)
    with Seen() as seen:
        ops.matmul(a, b)
    assert "ladder.matmul.default" in seen.ops      # a mode sees the operator, not the kernel
    with torch.profiler.profile() as profile:
        ops.attention(*(randn(1, 1, 4, 64),) * 3)
    assert "ladder::attention" in {e.key for e in profile.key_averages()}
    assert not ops._direct(a.requires_grad_(), b, None) and ops._direct(a.detach(), b, None)


def test_a_model_on_the_ops_compiles_without_graph_breaks():
    block, reference_block = ops_helpers.make("cpu")
    x = torch.randn(2, 16, 128, generator=GEN)
    with torch.no_grad():  # the forward graph (a compiled training step: tests/gpu/test_attention_backward_gpu.py)
        want = reference_block(x.double())
        assert compare(block(x.half()), want).ok
        compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
        assert compare(compiled(x.half()), want).ok


def gpu(name: str, capability: tuple) -> hardware.GPU:
    sheet = hardware.datasheet_for(name)
    return hardware.GPU(name, capability, sheet.sm_count, 50 << 20, sheet.smem_per_block_bytes, 80 << 30, sheet)


H100, T4 = gpu("NVIDIA H100 80GB HBM3", (9, 0)), gpu("Tesla T4", (7, 5))


def test_which_kernel_backs_each_op():
    assert "interpreter" in ops.choose("matmul", None).note and str(ops.backend("matmul")) == str(ops.choose("matmul", None))
    assert ops.choose("matmul", H100).kernel == ops.choose("attention", H100).kernel == "triton:6_autotuned"
    assert ops.choose("matmul", T4).kernel == "torch:cublas" and "CUDA cores" in ops.choose("attention", T4).note
    emulated = ops.choose("matmul", hardware.emulate(H100, "sm_75"))
    assert emulated.kernel == "torch:cublas" and "compiles for the NVIDIA H100" in emulated.note
    with pytest.raises(ValueError, match="no op 'conv'"):
        ops.choose("conv", H100)


def test_configuration_recorded_winner_above_the_search_threshold_smallest_tiles_below():
    configs, prune = autotune.triton_configs(triton_search.SEARCH_SPACE), triton_search._prune
    recorded = {r.shape: r.best for r in autotune.recorded_reports(H100.slug)
                if (r.problem, r.tuner) == ("matmul", "triton:6_autotuned")}
    searched = [s for s in recorded if 2 * s[0] * s[1] * s[2] >= autotune.SEARCH_MIN_FLOP]
    assert searched
    for shape in searched:
        assert ops.choose_config(configs, shape, 2 * shape[0] * shape[1] * shape[2], "matmul", prune, [],
                                 H100) == recorded[shape]
    small = ops.choose_config(configs, (256, 256, 256), 2 * 256 ** 3, "matmul", prune, [], H100)
    assert (small["BLOCK_M"], small["BLOCK_N"], small["BLOCK_K"]) == (64, 64, 64)
    assert ops.choose_config(configs, (4096,) * 3, 2 * 4096 ** 3, "matmul", prune, [], T4)["BLOCK_M"] == 64


def test_plan_carries_the_kernels_own_heuristics():
    plan = ops.matmul_plan(37, 45, 29, "row", "bias_gelu")
    constexprs = dict(zip(ops._MATMUL_PARAMS[ops._MATMUL_HEAD:], plan.constexprs))
    assert constexprs["EVEN_K"] is False and constexprs["BIAS_GELU"] and not constexprs["BIAS_RELU"]
    assert constexprs["GROUP_M"] == tm.group_rows(37, 45, plan.config["BLOCK_M"], plan.config["BLOCK_N"])


def test_launch_rows_merge_into_a_recording_by_op_and_call():
    row = dict(op="matmul", shape=[256] * 3, call="ladder.ops.matmul", us=12.0, anchor="torch.matmul", anchor_us=17.0)
    old = {"provenance": {"date": "then"}, "ceilings": {"copy_TBps": 3.0}, "runs": [{"problem": "matmul",
           "backend": "torch", "rung": "cublas", "recorded": "then"}], "sessions": [{"date": "then"}],
           "launch": [row, dict(row, call="torch.ops.ladder.matmul")]}
    merged = results.merge(old, {"provenance": {"date": "now"}, "launch": [dict(row, us=11.0)]})
    assert [(r["call"], r["us"], r["recorded"]) for r in merged["launch"]] == [
        ("ladder.ops.matmul", 11.0, "now"), ("torch.ops.ladder.matmul", 12.0, "then")]
    assert merged["runs"] == old["runs"] and merged["ceilings"] == old["ceilings"]


def test_launch_benchmark_says_it_needs_a_gpu(capsys):
    assert launch.main([]) == 2 and "needs a CUDA GPU" in capsys.readouterr().err



@pytest.mark.triton_api
def test_an_empty_chain_of_launch_hooks_is_not_handed_to_triton():
    """Triton keeps an empty HookChain where it once kept None; handed on, the launcher would build launch metadata
    and call it around every launch. A chain that holds a hook, or a plain hook, is handed on."""
    from triton import knobs
    from ladder.runtime.direct_launch import hook
    chain = type(knobs.runtime.launch_enter_hook)()
    assert hook(None) is None
    if hasattr(chain, "calls"):   # Triton >= 3.5's HookChain
        assert hook(chain) is None
        chain.add(print)
        assert hook(chain) is chain
    assert hook(print) is print


def test_a_launch_is_traced_only_with_fake_tensors_among_its_arguments():
    """validate.traced, what decides whether a kernel launch goes through wrap_triton: fake tensors (a fake run,
    Inductor's tracing) yes; plain tensors, parameters and non-tensor arguments no."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from ladder.runtime import validate
    plain = torch.ones(2)
    assert not validate.traced(plain, torch.nn.Parameter(plain), None, 3, 0.5)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(plain)
    assert validate.traced(plain, 3, fake)


def test_launch_times_a_backward_again_on_one_graph():
    q, k, v = torch.randn(1, 16, 3, 2, 64).half().permute(2, 0, 3, 1, 4)
    for attention in (lambda *t: torch.nn.functional.scaled_dot_product_attention(*t, is_causal=True),
                      lambda *t: ops.attention(*t, causal=True)):
        call = launch._backward(attention, q, k, v)
        first, again = call(), call()
        assert len(first) == 3 and all(torch.equal(a, b) and a.shape == q.shape for a, b in zip(first, again))


def test_a_replay_puts_each_new_tensor_where_the_recorded_call_had_its_own(monkeypatch):
    """direct_launch.Replay: a recorded launch's pointers named by their place among the call's tensors (a tensor
    descriptor by its base's place, its other fields kept, no tensor of the recorded call held), None kept, the
    other arguments as recorded; a tensor not among the call's, or one tensor in two places, cannot be replayed."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from ladder.runtime import direct_launch
    launched = []
    monkeypatch.setattr(direct_launch, "run_compiled", lambda *launch: launched.append(launch[:4]))
    monkeypatch.setattr(direct_launch, "launch_context", lambda device: (0, None, None))
    monkeypatch.setattr(direct_launch, "_TORCH_LAUNCHER", None)   # no launch laid out: each through run_compiled
    old = [torch.zeros(2, 64, dtype=torch.float16) for _ in range(3)]
    log = [("kernel a", (4, 1, 1), (old[0], None, TensorDescriptor.from_tensor(old[2], [1, 64])), (7, 0.5, 64)),
           ("kernel b", (2, 3, 1), (old[1],), (1,))]
    replay = direct_launch.Replay(log, tuple(old))
    new = [torch.ones(2, 64, dtype=torch.float16) for _ in range(3)]
    replay(tuple(new), 0)
    (a, grid_a, args_a, _), (b, grid_b, args_b, _) = launched
    assert (a, grid_a, b, grid_b) == ("kernel a", (4, 1, 1), "kernel b", (2, 3, 1))
    assert args_a[:2] == (new[0].data_ptr(), None) and args_a[3:] == (7, 0.5, 64) and args_b == (new[1].data_ptr(), 1)
    descriptor = args_a[2]
    assert descriptor.base is new[2] and (list(descriptor.shape), descriptor.block_shape) == ([2, 64], [1, 64])
    assert all(t is not old[2] for t in vars(descriptor).values())
    with pytest.raises(KeyError):
        direct_launch.Replay(log, (old[0], old[1], torch.zeros(1)))   # the descriptor's base is not among them
    with pytest.raises(KeyError):
        direct_launch.Replay(log, (old[0], old[1], old[2], old[0]))


def test_a_replay_through_torchs_launcher_passes_what_run_compiled_would(monkeypatch):
    """direct_launch.laid_out picks, once, what torch's launcher reads of a launch (the pointers' places, the other
    arguments it keeps, the scratch pointers); a replay through it hands torch's launcher the arguments run_compiled
    would for the same tensors. A launch with a tensor descriptor, or with a launch hook set, goes to run_compiled."""
    import operator
    from triton.tools.tensor_descriptor import TensorDescriptor
    from ladder.runtime import direct_launch
    # a kernel (x, unused=None, y, n, scale, BLOCK: constexpr) as torch_launch reads it: x, y, n and scale kept
    how = ("function", 4, 1024, "OOif" + "O", operator.itemgetter(0, 2, 3, 4), (None,))
    monkeypatch.setattr(direct_launch, "_BY_TORCH", {"kernel": how, "tma kernel": how})
    calls = []
    monkeypatch.setattr(direct_launch, "_TORCH_LAUNCHER", lambda *launch: calls.append(launch))
    monkeypatch.setattr(direct_launch, "launch_context", lambda device: (0, None, None))
    old = [torch.zeros(8, 16) for _ in range(3)]
    log = [("kernel", (5, 2, 1), (old[2], None, old[0]), (77, 0.5, 64)),
           ("tma kernel", (1, 1, 1), (TensorDescriptor.from_tensor(old[1], [8, 16]),), (3,))]
    replay = direct_launch.Replay(log, tuple(old))
    new = [torch.ones(8, 16) for _ in range(3)]
    through_run_compiled = []
    monkeypatch.setattr(direct_launch, "run_compiled", lambda *launch: through_run_compiled.append(launch[:3]))
    replay(tuple(new), 0)
    assert calls == [("function", 5, 2, 1, 4, 1024, "OOifO", (new[2].data_ptr(), new[0].data_ptr(), 77, 0.5, None), 0)]
    assert [(compiled, grid) for compiled, grid, _ in through_run_compiled] == [("tma kernel", (1, 1, 1))]
    monkeypatch.undo()
    monkeypatch.setattr(direct_launch, "_BY_TORCH", {"kernel": how})
    by_run_compiled = []
    monkeypatch.setattr(direct_launch, "_TORCH_LAUNCHER", lambda *launch: by_run_compiled.append(launch))
    direct_launch.run_compiled("kernel", (5, 2, 1), (new[2].data_ptr(), None, new[0].data_ptr(), 77, 0.5, 64), 0,
                               (0, None, None))
    assert by_run_compiled == calls
    laid = direct_launch.laid_out("kernel", (5, 2, 1), (2, None, 0), (77, 0.5, 64))
    assert not direct_launch.run_laid_out(laid, tuple(new), (0, print, None)) and by_run_compiled == calls


def test_a_recording_holds_only_its_own_threads_launches(monkeypatch):
    """DirectLaunches.recording(): a launch made by another thread while one records is not in its log (else a
    replay would make it, or miss one of its own)."""
    import threading
    from ladder.runtime import direct_launch
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(direct_launch, "run_compiled", lambda *launch: None)

    class Kernel:   # what DirectLaunches reads of a Triton kernel: kernel[grid](...) returns the compiled one
        params = []

        def __getitem__(self, grid):
            return lambda *args, **keywords: f"compiled {args[1]}"
    launches, kernel = direct_launch.DirectLaunches(), Kernel()
    a = torch.zeros(4)
    with launches.recording() as log:
        launches(kernel, (1,), (a, 1), {})
        other = threading.Thread(target=lambda: launches(kernel, (1,), (a, 2), {}))
        other.start()
        other.join()
        launches(kernel, (1,), (a, 1), {})   # the second launch of a specialization: its compiled launcher
    assert [(compiled, rest) for compiled, _, _, rest in log] == [("compiled 1", (1,)), ("compiled 1", (1,))]
