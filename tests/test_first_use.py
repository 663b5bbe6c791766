"""ladder.first_use on the CPU, its GPU faked (an H100's facts, kernels in Triton's interpreter, the timer a stub):
rung 6's proposals, each candidate checked before it is timed, a case tuned once and kept on disk (and read, not
measured again, by a second process), the switch that turns it off, and a CUDA graph's capture refused a case
nothing measured. tests/gpu/test_ops_gpu.py tunes on a GPU, eager and under torch.compile, from a cold cache."""
import multiprocessing
import sys

import pytest
import torch

from kernels import matmul as km
from ladder import dispatch, first_use, ops
from ladder.dispatch import CUBLAS, RUNG6, RUNG7, Case
from ladder.timing import Timing
from test_ops import H100

SMALLEST = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)   # the interpreter's rule


@pytest.fixture(autouse=True)
def scratch_cache(tmp_path, monkeypatch):
    """The table in a temporary folder, this process's H100 the GPU, medians from `medians` (by label)."""
    monkeypatch.setattr(dispatch, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(dispatch, "_loaded", None)
    monkeypatch.setattr(first_use, "free_bytes", lambda: 80 << 30)
    monkeypatch.setattr(first_use, "LOG", [])
    ops.forget_choices()
    yield
    ops.forget_choices()


def fake_bench(ms_by_call):
    def bench(fn, warmup_ms, rep_ms, warmed):
        assert warmed and (warmup_ms, rep_ms) == (first_use.WARMUP_MS, first_use.REP_MS)
        fn()
        ms = ms_by_call.pop(0)
        return Timing(ms, ms, ms)
    return bench


def test_the_model_proposes_tiles_that_fill_the_waves():
    by_tile = {(bm, bn): first_use.modeled_cost(dict(BLOCK_M=bm, BLOCK_N=bn), km.MLP_DOWN, H100.sm_count)
               for bm, bn in ((64, 64), (128, 128), (128, 256), (256, 128))}
    # MLP down: 384 tiles of 128x128 fill 3 waves of 132 SMs; 64x64 tiles load twice the bytes per FLOP
    assert min(by_tile, key=by_tile.get) == (128, 128) and max(by_tile, key=by_tile.get) == (64, 64)
    proposed = first_use.proposals((37, 45, 29), H100, SMALLEST)   # here: the interpreter's space
    assert proposed[0] == SMALLEST and len(proposed) == len({tuple(c.items()) for c in proposed}) <= first_use.PROPOSALS


def test_epilogue_names_round_trip():
    for bias in (False, True):
        for activation in (None, "relu", "gelu"):
            assert first_use.split_epilogue(first_use.epilogue_name(bias, activation)) == (bias, activation)
    assert first_use.epilogue_name(True, "gelu") == "bias_gelu" and first_use.epilogue_name(False, None) is None


def test_each_candidate_is_checked_before_it_is_timed(monkeypatch):
    timed = []
    monkeypatch.setattr(first_use, "bench", fake_bench([2.0, 1.0]))

    def wrong(a, b, bias):
        return torch.zeros(a.shape[0], b.shape[1]).half()

    def broken(a, b, bias):
        raise RuntimeError("out of resources")

    def right(a, b, bias):
        timed.append(b.stride())
        return torch.addmm(bias.float(), a.float(), b.float()).half()
    found = [(CUBLAS, None, right), (RUNG6, SMALLEST, wrong), (RUNG6, {"BLOCK_M": 32}, broken), (RUNG7, {}, right)]
    timings, failed = first_use._measure(Case(37, 45, 29, "weight_t", "bias"), found)
    assert timings == {CUBLAS: dispatch.Timed(None, 2.0), RUNG7: dispatch.Timed({}, 1.0)}
    assert failed == [f"{RUNG6} {SMALLEST} WRONG", f"{RUNG6} {{'BLOCK_M': 32}} failed (RuntimeError)"]
    assert timed[0] == (1, 29)   # B as nn.Linear's weight.t() is


def test_a_transposed_a_is_timed_transposed_and_without_rung_7(monkeypatch):
    seen = []
    monkeypatch.setattr(first_use, "bench", fake_bench([1.0]))

    def right(a, b, bias):
        seen.append(a.stride())
        return (a.float() @ b.float()).half()
    case = Case(37, 45, 29, "row", None, "float16", "transposed")
    assert first_use._measure(case, [(CUBLAS, None, right)]) == ({CUBLAS: dispatch.Timed(None, 1.0)}, [])
    assert seen[0] == (1, 37)   # A as a.mT of a row-major K x M is
    assert RUNG7 not in [label for label, _, _ in first_use.candidates(case, H100, SMALLEST)]   # its TMA: row-major A
    assert RUNG7 in [label for label, _, _ in first_use.candidates(case._replace(a_layout="row"), H100, SMALLEST)]


def test_a_bf16_case_times_its_candidates_on_bf16_operands(monkeypatch):
    seen = []
    monkeypatch.setattr(first_use, "bench", fake_bench([1.0]))

    def right(a, b, bias):
        seen.append((a.dtype, b.dtype, bias.dtype))
        return torch.addmm(bias.float(), a.float(), b.float()).bfloat16()
    timings, failed = first_use._measure(Case(37, 45, 29, "weight_t", "bias", "bfloat16"), [(CUBLAS, None, right)])
    assert timings == {CUBLAS: dispatch.Timed(None, 1.0)} and failed == []
    assert set(seen) == {(torch.bfloat16,) * 3}


def test_a_case_is_tuned_once_kept_on_disk_and_read_by_the_next_process(monkeypatch):
    monkeypatch.setattr(first_use, "bench", fake_bench([1.0, 3.0, 2.5, 0.5]))   # cuBLAS, rung 6 x2, rung 7
    case = Case(37, 45, 29, "row", "bias_gelu")
    entry = first_use.tune(case, H100, SMALLEST)
    assert entry.pick(dispatch.EAGER_CANDIDATES) == RUNG7 and entry.pick(dispatch.OP_CANDIDATES) == CUBLAS
    assert entry.timings[RUNG6].ms == 2.5   # the faster of its two proposals
    assert dispatch.load(H100).table.lookup(case) == entry
    assert first_use.LOG[-1].case == case and "torch:cublas 1.000 ms" in first_use.LOG[-1].note
    # another process finds it on disk (it waited on the lock while this one measured): nothing is timed again
    monkeypatch.setattr(dispatch, "_loaded", None)
    monkeypatch.setattr(first_use, "bench", fake_bench([]))
    assert first_use.tune(case, H100, SMALLEST) == entry and first_use.LOG[-1].note == "measured by another process"
    assert "37x45x29 + bias_gelu" in first_use.report()


def test_too_little_free_memory_leaves_the_case_unmeasured(monkeypatch):
    monkeypatch.setattr(first_use, "free_bytes", lambda: 1 << 30)
    assert first_use.tune(Case(*dispatch.VOCABULARY), H100, SMALLEST) is None
    assert first_use.LOG[-1].note.startswith("not tuned: 1.0 GiB free") and dispatch.load(H100).table is None


def _add_entries(cache_dir: str, first: int) -> None:
    """In a process of its own: 20 entries added to the H100's table, one update at a time."""
    dispatch.CACHE_DIR = __import__("pathlib").Path(cache_dir)
    for m in range(first, first + 20):
        dispatch.update(H100, [dispatch.Entry(Case(m, 1, 1), {CUBLAS: dispatch.Timed(None, 1.0)})])


def test_processes_adding_at_once_lose_no_entry(tmp_path):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_entries, args=(str(tmp_path), first)) for first in (1, 101)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    assert {c.M for c in dispatch.load(H100).table.entries} == set(range(1, 21)) | set(range(101, 121))


@pytest.fixture
def on_an_h100(monkeypatch):
    monkeypatch.setattr(ops, "detect", lambda: H100)
    monkeypatch.setattr(ops, "_has_rung7", lambda: True)


def test_the_op_tunes_a_case_at_its_first_call_only(on_an_h100, monkeypatch):
    tuned = []

    def tune(case, gpu, rule):
        tuned.append(case)
        return dispatch.Entry(case, {CUBLAS: dispatch.Timed(None, 2.0), RUNG6: dispatch.Timed(SMALLEST, 1.0)})
    monkeypatch.setattr(first_use, "tune", tune)
    for _ in range(3):
        choice = ops.matmul_choice(8192, 768, 3072, "weight_t", "bias_gelu")
    assert tuned == [Case(8192, 768, 3072, "weight_t", "bias_gelu")]
    assert (choice.kernel, choice.eager, choice.config) == (RUNG6, RUNG6, SMALLEST)
    assert choice.why == "measured in this case on this GPU: torch:cublas 2.000 ms, triton:6_autotuned 1.000 ms"


def test_switched_off_a_case_nothing_measured_runs_torch_matmul(on_an_h100, monkeypatch):
    monkeypatch.setenv(first_use.TUNE_ENV, "0")
    monkeypatch.setattr(first_use, "tune", lambda *a: pytest.fail("tuned while switched off"))
    choice = ops.matmul_choice(8192, 768, 3072)
    assert (choice.kernel, choice.eager) == (CUBLAS, CUBLAS)
    assert choice.why == f"torch.matmul, not measured ({first_use.TUNE_ENV}=0: no tuning on first use)"


def test_a_cuda_graph_capture_is_refused_a_case_nothing_measured(on_an_h100, monkeypatch):
    monkeypatch.setattr(ops, "_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="run the model once before capturing it"):
        ops.matmul_choice(8192, 768, 3072)


def test_attention_searches_a_shape_no_search_measured_once(on_an_h100, monkeypatch):
    searched = []
    monkeypatch.setattr(first_use, "search_attention", lambda shape, gpu: searched.append(shape))
    monkeypatch.setattr(ops.autotune, "cached_reports", lambda *a: [])
    monkeypatch.setattr(ops, "choose_config", lambda *a: dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1))
    for _ in range(2):
        ops.attention_plan(8, 12, 1024, 64, True)
    ops.attention_plan(1, 1, 64, 64, False)   # microseconds of work: a search would cost more than it saves
    assert searched == [(8, 12, 1024, 64, 1)]
    monkeypatch.setenv(first_use.TUNE_ENV, "0")
    ops.attention_plan(8, 12, 2048, 64, True)
    assert searched == [(8, 12, 1024, 64, 1)]


def test_the_fresh_gpu_switch_hides_this_gpus_recording_and_cache(monkeypatch):
    from ladder import results
    from ladder.runtime import cache
    from ladder.runtime.errors import NotAvailable
    monkeypatch.setattr(cache, "FRESH_GPU", True)
    monkeypatch.setattr(results, "_live_slug", lambda: results.PREFERRED)   # on the GPU recorded first
    with pytest.raises(NotAvailable, match="makes this GPU a fresh one"):
        results.load(results.PREFERRED)
    assert results.load().path.stem != results.PREFERRED   # another GPU's recording, labelled as such
    with pytest.raises(NotAvailable, match="nothing is recorded under KERNEL_LADDER_FRESH_GPU=1"):
        results.save({"provenance": {"slug": results.PREFERRED}})
    # a process started with the switch caches in a new folder, and hands it to its children
    code = ("import os, subprocess, sys; from ladder.runtime import cache; "
            "child = subprocess.run([sys.executable, '-c', 'from ladder.runtime import cache; print(cache.CACHE_DIR)'], "
            "capture_output=True, text=True).stdout.strip(); print(cache.CACHE_DIR, child)")
    env = {**__import__("os").environ, cache.FRESH_GPU_ENV: "1"}
    env.pop("KERNEL_LADDER_CACHE", None)
    mine, child = __import__("subprocess").run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                               check=True).stdout.split()
    assert mine == child and "kernel-ladder-fresh-" in mine and not any(__import__("pathlib").Path(mine).iterdir())


def test_attention_kernel_is_checked_then_timed_once_and_kept(monkeypatch, tmp_path):
    """The faster correct kernel wins, by the median of interleaved rounds (one round's outlier does not decide); a
    wrong one is never timed; rung 15's search runs first where it has none at the shape; the second call reads the
    kept report instead of measuring."""
    from kernels import attention as attention_problem
    from ladder import autotune
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    searched = []
    monkeypatch.setattr(attention_problem, "tune_cuda", lambda shapes, tuners: searched.append(shapes) or [])
    # rounds of (rung 6, rung 15), (rung 15, rung 6), (rung 6, rung 15): rung 6 is faster in the second alone
    monkeypatch.setattr(first_use, "bench", fake_bench([2.0, 1.5, 1.5, 1.2, 2.0, 1.5]))
    right = lambda q, k, v, causal: attention_problem.reference(q, k, v, causal)   # noqa: E731
    candidates = {RUNG6: right, "wrong": lambda q, k, v, causal: torch.zeros_like(right(q, k, v, causal)),
                  first_use.RUNG15: right}
    shape = (1, 3, 40, 64, 1)
    assert first_use.attention_kernel(shape, H100, candidates) == first_use.RUNG15
    assert searched == [[shape]]
    (report,) = autotune.cached_reports(H100.slug, "attention", first_use.ATTENTION_CHOICE)
    assert [t["ms"] for t in report.timed] == [1.5, 2.0] and "wrong result" in report.failed[0]["reason"]
    monkeypatch.setattr(first_use, "bench", fake_bench([]))   # measured once: read back
    assert first_use.attention_kernel(shape, H100, candidates) == first_use.RUNG15


def test_attention_kernel_with_no_correct_candidate_measures_nothing_and_keeps_nothing(monkeypatch, tmp_path):
    from kernels import attention as attention_problem
    from ladder import autotune
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(first_use, "bench", fake_bench([]))   # nothing may be timed
    wrong = lambda q, k, v, causal: torch.zeros_like(attention_problem.reference(q, k, v, causal))   # noqa: E731
    assert first_use.attention_kernel((1, 3, 40, 64, 0), H100, {RUNG6: wrong}) is None
    assert not autotune.cached_reports(H100.slug, "attention", first_use.ATTENTION_CHOICE)
    assert "no kernel ran correctly" in first_use.LOG[-1].note


def test_a_training_choice_checks_gradients_then_times_forward_and_backward(monkeypatch, tmp_path):
    """With training, each candidate runs forward and backward: one whose output is right but whose gradient is not
    is never timed; the faster of the rest is kept under its own tuner name, beside the forward's choice."""
    import torch.nn.functional as F
    from ladder import autotune
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(first_use, "bench", fake_bench([2.0, 1.0, 2.0, 1.0, 2.0, 1.0]))
    sdpa = lambda q, k, v, causal: F.scaled_dot_product_attention(  # noqa: E731
        q.float(), k.float(), v.float(), is_causal=causal).half()
    candidates = {RUNG6: sdpa, "no dK": lambda q, k, v, causal: sdpa(q, k.detach(), v, causal), first_use.SDPA: sdpa}
    shape = (1, 3, 40, 64, 1)
    assert first_use.attention_kernel(shape, H100, candidates, training=True) == first_use.SDPA
    (report,) = autotune.cached_reports(H100.slug, "attention", first_use.TRAINING_CHOICE)
    assert [t["config"]["kernel"] for t in report.timed] == [first_use.SDPA, RUNG6]
    assert report.failed[0]["config"]["kernel"] == "no dK" and "wrong result" in report.failed[0]["reason"]
    assert not autotune.cached_reports(H100.slug, "attention", first_use.ATTENTION_CHOICE)


def test_an_eager_call_that_wants_a_gradient_runs_the_training_choice(on_an_h100, monkeypatch):
    """Where SDPA's forward and backward were measured faster at the shape, the op returns SDPA's output (its
    backward torch's); elsewhere, and without a gradient, ours; the choice is measured once per shape."""
    import torch.nn.functional as F
    asked = []
    def choose(shape, gpu, candidates, training=False):
        asked.append((shape, training, set(candidates)))
        return first_use.SDPA if training and shape[2] == 64 else RUNG6
    monkeypatch.setattr(first_use, "attention_kernel", choose)
    monkeypatch.setattr(ops, "_attention_run", lambda q, k, v, causal, *shape: (q * 2, q.new_zeros(q.shape[:3]).float()))
    q = torch.randn(1, 2, 64, 64).half().requires_grad_()
    for _ in range(2):
        out = ops.attention(q, q, q, causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q, is_causal=True))
    assert out.grad_fn.name() != "_EagerAttentionBackward"
    assert asked == [((1, 2, 64, 64, 1), True, {RUNG6, first_use.SDPA})]   # too small for a forward's search
    longer = torch.randn(1, 2, 128, 64).half().requires_grad_()
    assert ops.attention(longer, longer, longer).grad_fn.name() == "_EagerAttentionBackward"
    with torch.no_grad():
        torch.testing.assert_close(ops.attention(q, q, q, causal=True), q * 2)


def test_a_causal_shape_also_times_rung_6_with_its_longest_query_blocks_first(on_an_h100, monkeypatch):
    offered = []
    monkeypatch.setattr(first_use, "attention_kernel",
                        lambda shape, gpu, candidates: offered.append(set(candidates)) or first_use.RUNG6_HEAVIEST_FIRST)
    assert ops.attention_kernel(8, 12, 1024, 64, True) == first_use.RUNG6_HEAVIEST_FIRST
    ops.attention_kernel(8, 12, 1024, 64, False)
    assert offered == [{RUNG6, first_use.RUNG6_HEAVIEST_FIRST, first_use.RUNG15}, {RUNG6, first_use.RUNG15}]


def test_ops_attention_runs_rung_15_where_it_was_measured_faster(on_an_h100, monkeypatch):
    ran = []
    monkeypatch.setattr(ops, "_hopper_run", lambda q, k, v, causal, *shape: ran.append("15") or (q, None))
    monkeypatch.setattr(first_use, "attention_kernel", lambda shape, gpu, candidates: first_use.RUNG15)
    q = torch.randn(8, 12, 1024, 64).half()
    assert ops.attention(q, q, q, causal=True) is q and ran == ["15"]
    monkeypatch.setattr(first_use, "attention_kernel", lambda shape, gpu, candidates: None)
    ops.forget_choices()
    monkeypatch.setattr(ops, "_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="run the model once before capturing it"):
        ops.attention_kernel(8, 12, 1024, 64, True)
