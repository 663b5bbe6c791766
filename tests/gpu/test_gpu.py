"""GPU-only checks: run with `pytest tests/gpu` on a GPU. Without one they fail (never skip)."""
import pytest
import torch

import kernels.vector_add as va
from kernels.cuda import vector_add as cva
from kernels.triton import vector_add as tva
from ladder import ceilings
from ladder.runtime import cuda, hardware
from ladder.runner import check_rung, unavailable

PROBLEM = va.PROBLEM


def test_gpu_is_visible():
    assert torch.cuda.is_available(), "tests/gpu needs a CUDA GPU"


@pytest.mark.parametrize("rung", PROBLEM.rungs, ids=lambda r: r.label)
def test_every_rung_correct_on_ragged_sizes(rung):
    assert unavailable(rung) is None
    for seed in (0, 1):  # fresh random data each time
        for shape, result in check_rung(PROBLEM, rung, seed=100 * seed):
            assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("fn", [cva.scalar, cva.vectorized, tva.blocked])
def test_bad_inputs_on_gpu(fn):
    a = torch.randn(1000, device="cuda").half()
    with pytest.raises(ValueError, match="float16"):
        fn(a.float(), a)
    with pytest.raises(ValueError, match="shape mismatch"):
        fn(a, a[:999])
    with pytest.raises(ValueError, match="not contiguous"):
        fn(torch.randn(2000, device="cuda").half()[::2], a)
    with pytest.raises(ValueError, match="is on cpu"):
        fn(a.cpu(), a.cpu())


def test_vectorized_refuses_misaligned_views_but_scalar_handles_them():
    base = torch.randn(1001, device="cuda").half()
    a, b = base[1:], base[:-1]
    with pytest.raises(ValueError, match="16-byte aligned"):
        cva.vectorized(a.contiguous(), b)
    out = cva.scalar(a, b)
    assert torch.equal(out, a + b)


def test_empty_input():
    a = torch.empty(0, device="cuda", dtype=torch.float16)
    for fn in (cva.scalar, cva.vectorized, tva.blocked):
        assert fn(a, a).numel() == 0


def test_included_header_edit_reaches_the_running_kernel(tmp_path):
    header = tmp_path / "value.cuh"
    main = tmp_path / "k.cu"
    main.write_text('#include "value.cuh"\nextern "C" __global__ void k(float* x) { x[0] = VALUE; }\n')
    out = torch.zeros(1, device="cuda")
    for value in (1, 2):
        header.write_text(f"#define VALUE {value}\n")
        cuda.launch(cuda.load(main), "k", 1, 1, (out,))
        assert out.item() == value


def test_ceilings_are_plausible():
    gpu = hardware.detect()
    c = ceilings.measure(gpu, refresh=True)
    sheet = gpu.datasheet
    assert 0.5 * sheet.hbm_TBps < c["copy_TBps"] < 1.05 * sheet.hbm_TBps
    assert 0.5 * sheet.fp32_TFLOPs < c["fp32_TFLOPs"] < 1.1 * sheet.fp32_TFLOPs
    assert 0.3 * sheet.fp16_tc_TFLOPs < c["fp16_tc_TFLOPs"] < 1.1 * sheet.fp16_tc_TFLOPs


def test_ncu_profile_counts_the_bytes_and_drops_a_counter_it_does_not_know():
    from ladder import profile
    from ladder.runtime.errors import NotAvailable
    n = 1 << 24
    if not profile.available():  # the documented answer where Nsight Compute is not installed
        with pytest.raises(NotAvailable, match="ncu"):
            profile.profile("vector_add", "triton", "1_blocked", (n,))
        return
    found = profile.profile("vector_add", "triton", "1_blocked", (n,))
    assert found["kernels"] == ["vector_add_kernel"]
    assert found["l2_to_sm_bytes"] >= 2 * 2 * n  # A and B, fp16, at least once
    assert found["dram_bytes_read"] >= 0.9 * 2 * 2 * n  # ncu empties L2 before the kernel
    odd = profile.profile("vector_add", "triton", "1_blocked", (n,),
                          {"unknown": "no_such__counter.sum", "dram_bytes_read": "dram__bytes_read.sum"})
    assert odd["unknown"] is None and odd["dram_bytes_read"] >= 0.9 * 2 * 2 * n


def test_power_sampling_reads_watts_and_clock():
    from ladder import power
    a = torch.randn(1 << 26, device="cuda").half()
    found = power.compare({"add": lambda: torch.add(a, a)}, flop=a.numel(), rounds=1, seconds=2.0)["add"]
    assert found["tflops"] > 0 and found["rounds"] == 1
    assert 0 < found["W"] <= 1.2 * found["limit_W"] and 0 < found["MHz"] <= found["max_MHz"]


def test_bench_times_long_kernels_over_a_few_runs():
    import time
    from ladder.timing import bench
    cycles = int(0.15 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # ~150 ms at the max clock
    start = time.time()
    t = bench(lambda: torch.cuda._sleep(cycles))
    assert 100 < t.median_ms < 1000 and t.p20_ms <= t.median_ms <= t.p80_ms
    assert time.time() - start < 12 * t.median_ms / 1e3  # a handful of runs, not do_bench's windows


def test_a_slow_launch_is_not_timed_as_the_kernel():
    """A launch that keeps the host busy 150 us before a 5 us kernel (a CuPy launch from Python costs tens of us):
    do_bench's start event fires when the L2 flush ends (~85 us on an H100), so its time holds the host's wait;
    event_bench's start event waits behind HOST_COVER_US of GPU spin too, so its time is the kernel's."""
    import time
    import triton.testing
    from ladder.timing import HOST_COVER_US, event_bench
    x = torch.randn(1 << 14, device="cuda")

    def slow_launch():
        until = time.perf_counter() + 150e-6
        while time.perf_counter() < until:
            pass
        torch.add(x, x)

    assert HOST_COVER_US > 150
    fast = event_bench(lambda: torch.add(x, x), 20, 60, [0.5])[0]
    covered = event_bench(slow_launch, 20, 60, [0.5])[0]
    uncovered = triton.testing.do_bench(slow_launch, warmup=20, rep=60, return_mode="median")
    assert covered < 0.03 and abs(covered - fast) < 0.01, (covered, fast)
    assert uncovered > 0.03, uncovered


def test_compiling_ahead_fills_the_triton_cache_this_process_then_loads_from(tmp_path, monkeypatch):
    """The workers compile each variant of the Triton attention rungs 3-5; this process then launches every one of
    them at a headline-like shape and finds each in the on-disk cache (no new file is written there)."""
    import kernels.attention as at
    from concurrent.futures import wait
    from ladder import runner
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))   # the workers read it when they start
    problem = at.PROBLEM.only("triton:3_fused", "triton:4_tensor_core", "triton:5_pipelined")
    futures = runner.compile_ahead(problem)
    done, _ = wait(futures)
    variants = {at.PROBLEM.compile_shape(s) for s in [*at.PROBLEM.check_shapes, *at.HEADLINE]}
    assert len(futures) == 3 * len(variants) and all(f.exception() is None for f in done)
    compiled = sorted(p.name for p in tmp_path.iterdir())
    assert compiled
    import triton
    triton.knobs.cache.dir = str(tmp_path)   # this process too (it read TRITON_CACHE_DIR at import)
    for *_, D, causal in at.HEADLINE:
        for rung in problem.rungs:   # H = 32 and S = 256 compile as the headline's H = 32 and S = 4096 do
            assert check_rung(problem, rung, [(1, 32, 256, D, causal)])[0][1].ok
    assert sorted(p.name for p in tmp_path.iterdir()) == compiled
