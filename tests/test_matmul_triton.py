"""The Triton matmul ladder without a GPU: every rung (and the fused matmul + bias + ReLU) checked in
the interpreter on ragged shapes; bad inputs named; each rung's signature in the SASS Triton compiles
for sm_80 and sm_90; the autotuner's pruning and report."""
import pytest
import torch

import kernels.matmul as mm
import kernels.matmul_bias_relu as mbr
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import sass
from ladder.check import compare
from ladder.runtime.hardware import GPU
from ladder.runner import check_rung, unavailable

RUNGS = [r for r in mm.PROBLEM.rungs if r.backend == "triton"]
H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)
A100 = GPU("NVIDIA A100-SXM4-80GB", (8, 0), 108, 40 << 20, 163 << 10, 80 << 30, None)
T4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)


def test_rungs_pair_with_the_cuda_ladder():
    assert [r.name for r in RUNGS] == ["1_naive", "2_coalesced", "3_tiled", "4_tensor_core", "5_pipelined",
                                       "6_autotuned", "7_tma_persistent"]
    assert [r.name for r in RUNGS if r.slow] == ["1_naive", "2_coalesced", "3_tiled"]
    assert {r.backend for r in RUNGS} == {"triton"} and {r.source for r in RUNGS} == {tm.SOURCE}
    assert set(mm.TRITON_SASS_CASES) == {r.name for r in RUNGS}
    assert RUNGS[-1].needs == "tma" and T4.has("tma") is False and H100.has("tma")


@pytest.mark.parametrize("rung", RUNGS, ids=lambda r: r.label)
def test_rung_correct_on_ragged_shapes_in_the_interpreter(rung):
    assert unavailable(rung) is None
    report = check_rung(mm.PROBLEM, rung, seed=11)
    assert [s for s, _ in report] == mm.PROBLEM.interpret_shapes
    for shape, result in report:
        assert result.ok, (shape, str(result))


@pytest.mark.parametrize("rung", RUNGS, ids=lambda r: r.label)
def test_rung_writes_its_output_and_nothing_past_it(rung):
    M, N, K = 9, 19, 20
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    guard = torch.full((M * N + 64,), 7.0, dtype=torch.float16)
    out = guard[:M * N].view(M, N)
    rung.run(a, b, out=out)
    assert compare(out, a.double() @ b.double()).ok
    assert torch.all(guard[M * N:] == 7.0)


@pytest.mark.parametrize("rung", RUNGS, ids=lambda r: r.label)
def test_empty_k_gives_zeros_and_empty_outputs_launch_nothing(rung):
    assert torch.equal(rung.run(torch.empty(3, 0).half(), torch.empty(0, 5).half()), torch.zeros(3, 5).half())
    assert rung.run(torch.empty(0, 4).half(), torch.randn(4, 5).half()).shape == (0, 5)


@pytest.mark.parametrize("rung", RUNGS + [r for r in mbr.PROBLEM.rungs if r.backend == "triton"],
                         ids=lambda r: r.label)
def test_bad_inputs_are_named(rung):
    a, b = torch.randn(8, 4).half(), torch.randn(4, 6).half()
    extra = (torch.randn(6).half(),) if rung.name == "fused" else ()
    with pytest.raises(ValueError, match="a must be torch.float16"):
        rung.run(a.float(), b, *extra)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        rung.run(a, b[:3], *extra)
    with pytest.raises(ValueError, match="b is not contiguous"):   # every other column: no layout takes it
        rung.run(a, torch.randn(4, 12).half()[:, ::2], *extra)
    with pytest.raises(ValueError, match="out has shape"):
        rung.run(a, b, *extra, out=torch.empty(8, 5).half())


@pytest.mark.parametrize("rung", mbr.PROBLEM.rungs, ids=lambda r: r.label)
def test_bias_relu_rungs_correct_or_say_why_not(rung):
    reason = unavailable(rung)
    if rung.needs == "gpu":
        assert "needs a GPU" in reason
        return
    assert reason is None
    for shape, result in check_rung(mbr.PROBLEM, rung, seed=5):
        assert result.ok, (shape, str(result))
    bias = torch.randn(5).half()
    empty_k = rung.run(torch.empty(3, 0).half(), torch.empty(0, 5).half(), bias)
    assert torch.equal(empty_k, torch.relu(bias).expand(3, 5))
    with pytest.raises(ValueError, match="bias has 4 elements"):
        rung.run(torch.randn(3, 2).half(), torch.randn(2, 5).half(), bias[:4])
    with pytest.raises(ValueError, match="bias must be torch.float16"):
        rung.run(torch.randn(3, 2).half(), torch.randn(2, 5).half(), bias.float())


def test_fusion_saves_two_round_trips_of_the_intermediate():
    M, N, K = shape = (4096, 2048, 1024)
    moved = mbr.bytes_moved(shape)
    assert moved["triton:fused"] == mbr.PROBLEM.min_bytes(shape) == 2 * (M * K + K * N + N + M * N)
    assert moved["torch:three_ops"] - moved["triton:fused"] == 4 * 2 * M * N  # written twice, read twice


# ------------------------------------------------------------- the autotuner

def test_persistent_grids_give_every_program_the_same_number_of_tiles():
    assert tm.programs(512, sms=132) == 128 and tm.programs(2048, sms=132) == 128   # 4 and 16 rounds
    assert tm.programs(100, sms=132) == 100 and tm.programs(133, sms=132) == 67    # 1 round; 2 rounds
    assert tm.programs(1) == 1 and tm.programs(5) == 2                             # interpreter: 2 programs


def test_groups_make_the_tiles_in_flight_a_square_of_c():
    # 128 programs of 128x256 tiles: 16 tile rows x 8 tile columns = 2048 rows of A, 2048 columns of B
    assert tm.group_rows(8192, 8192, 128, 256, sms=132) == tm.group_rows(4096, 4096, 128, 256, sms=132) == 16
    assert tm.group_rows(4096, 4096, 256, 128, sms=132) == 8              # 8 x 16 tiles: 2048 x 2048 again
    assert tm.group_rows(300, 8192, 128, 256, sms=132) == 3               # no more groups rows than C has
    assert tm.group_rows(70, 90, 16, 16) == 2                             # interpreter: 2 programs, 5 tile rows


def test_the_schedules_lesson_03_compares_all_compute_the_product():
    a, b = torch.randn(70, 50).half(), torch.randn(50, 90).half()
    out = torch.empty(70, 90).half()
    config = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
    variants = tm.schedules(a, b, out, config)
    assert list(variants) == ["a program per tile", "persistent, loop not flattened", "persistent, flattened (rung 6)"]
    for name, run in variants.items():
        out.fill_(float("nan"))
        run()
        assert compare(out, a.double() @ b.double()).ok, name


def test_rung_6_runs_at_a_given_configuration_with_each_epilogue():
    """kernels/triton/matmul.py's own launch of rung 6 (no search): the fixed-configuration path of its self-check,
    and the one the search's autotuned kernel goes through."""
    a, b, bias = torch.randn(37, 29).half(), torch.randn(29, 45).half(), torch.randn(45).half()
    product = a.double() @ b.double()
    assert compare(tm.persistent(a, b), product).ok
    assert compare(tm.persistent(a, b, config=dict(tm.INTERPRETER_TILE, BLOCK_M=32)), product).ok
    out = torch.empty(37, 45).half()
    relu = tm.launch_persistent(tm.persistent_kernel, a, b, out, bias, config=tm.INTERPRETER_TILE)
    assert relu is out and compare(out, torch.relu(product + bias.double())).ok
    with pytest.raises(ValueError, match="the epilogue knows relu, gelu"):
        tm.launch_persistent(tm.persistent_kernel, a, b, out, bias, "tanh", config=tm.INTERPRETER_TILE)


def test_prune_reasons():
    smallest = dict(M=64, N=64, K=32)
    big = dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4)

    def prune(c, shape, gpu):
        return triton_search.prune_reason(c, shape, gpu, smallest)
    assert prune(big, (4096, 4096, 4096), H100) is None
    assert prune(big, (4096, 4096, 4096), A100) is None  # 3 buffers before Hopper: 144 KiB
    assert "shared memory > 64 KiB on sm_75" in prune(big, (4096, 4096, 4096), T4)
    assert "accumulators per thread" in prune(dict(big, num_warps=4), (4096, 4096, 4096), H100)
    assert "BLOCK_K wider than the matrix" in prune(big, (4096, 4096, 31), H100)
    deep = dict(big, num_stages=5)
    assert prune(deep, (4096, 4096, 4096), H100) == "240 KiB of shared memory > 227 KiB on sm_90"
    assert prune(deep, (4096, 4096, 4096), A100) == "192 KiB of shared memory > 163 KiB on sm_80"


def test_autotune_report_says_what_the_search_did():
    triton_search.autotuned(torch.randn(3, 7).half(), torch.randn(7, 5).half())   # a shape no other test uses
    triton_search.autotuned(torch.randn(40, 7).half(), torch.randn(7, 5).half())
    report = triton_search.autotune_report()
    assert report.startswith("CPU only")
    small = report[report.index("triton:6_autotuned at 3x5x7"):].splitlines()
    # a lone survivor is timed by Triton <= 3.8 and taken as is by 3.9: the report counts it either way
    assert "2 configurations, 1 pruned" in small[0] and "BLOCK_M wider than the matrix" in small[1]
    assert "triton:6_autotuned at 40x5x7 on CPU (Triton interpreter): 2 configurations, 0 pruned, 2 run" in report
    [again] = triton_search.tune([(40, 5, 7)])   # already searched in this process: its report, no new search
    assert again.shape == (40, 5, 7) and len(again.timed) == 2


def test_report_of_a_lone_untimed_survivor():
    from ladder import autotune
    only = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
    report = autotune.Report("matmul", "triton:6_autotuned", (3, 5, 7), "CPU", only, float("nan"), 0.0,
                             pruned=[{"config": {**only, "BLOCK_M": 32}, "reason": "too wide"}], untimed=[{"config": only}])
    assert "2 configurations, 1 pruned, 0 run" in report.summary()
    assert report.summary().endswith("not timed: the only configuration left")
    assert autotune.Report.from_dict(report.as_dict()) == report


def test_pinned_searches_time_only_the_recorded_winner(monkeypatch):
    # what `ladder run-once` (under ncu) does: the configuration `record` timed, not a new search's winner
    import triton
    from ladder import autotune
    configs = [triton.Config(dict(BLOCK_M=m, BLOCK_N=16, BLOCK_K=16), num_warps=4, num_stages=1) for m in (16, 32)]
    winner = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)
    recorded = autotune.Report("matmul", "triton:6_autotuned", (64, 64, 64), "H100", winner, 0.1, 1.0)
    monkeypatch.setattr(autotune, "detect", lambda: H100)
    monkeypatch.setattr(autotune, "compile_ahead", lambda *args: None)
    monkeypatch.setattr(autotune, "cached_reports", lambda slug, problem, tuner: [recorded])
    log = autotune.TritonSearchLog(shape_of=lambda a: (a["M"], a["N"], a["K"]),
                                   label_of=lambda a: ("matmul", "triton:6_autotuned"),
                                   flops=lambda problem, s: 1e12,  # worth a search
                                   reason=lambda c, shape, gpu, dicts: None)
    assert len(log.prune(configs, dict(M=64, N=64, K=64))) == 2          # not pinned: a search
    monkeypatch.setattr(autotune, "PIN_RECORDED", True)
    assert log.prune(configs, dict(M=64, N=64, K=64)) == [configs[1]]    # pinned: the recorded winner only
    assert len(log.prune(configs, dict(M=96, N=64, K=64))) == 2          # nothing recorded at this shape



def _search_log(monkeypatch, flops: float):
    from ladder import autotune
    monkeypatch.setattr(autotune, "detect", lambda: H100)
    monkeypatch.setattr(autotune, "compile_ahead", lambda *args: None)
    return autotune.TritonSearchLog(shape_of=lambda a: (a["M"], a["N"], a["K"]),
                                    label_of=lambda a: ("matmul", "triton:6_autotuned"), flops=lambda p, s: flops,
                                    reason=lambda c, shape, gpu, dicts: None)


def test_a_search_times_the_likeliest_winner_first():
    """So that screening has a near-best time to compare with early: an earlier search's ranking at that shape
    on this GPU, the configurations it never timed after it; without one, the biggest tiles first."""
    import triton
    from ladder import autotune
    configs = [triton.Config(dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=32), num_warps=4, num_stages=3)
               for m, n in ((64, 64), (128, 128), (128, 64), (64, 128))]
    assert autotune.likeliest_first(configs, None)[0] is configs[1]
    assert autotune.likeliest_first(configs, None)[-1] is configs[0]
    timed = [{"config": autotune.triton_config_dict(configs[i]), "ms": ms} for i, ms in ((2, 1.5), (0, 1.0))]
    earlier = autotune.Report("matmul", "triton:6_autotuned", (4096,) * 3, "H100", timed[1]["config"], 1.0, 1.0, timed)
    assert autotune.likeliest_first(configs, earlier) == [configs[0], configs[2], configs[1], configs[3]]


def test_a_problem_too_small_to_search_keeps_the_smallest_tiles(monkeypatch):
    import triton
    configs = [triton.Config(dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=32), num_warps=4, num_stages=3)
               for m, n in ((128, 128), (64, 64), (128, 64))]
    log = _search_log(monkeypatch, flops=2e9)
    assert log.prune(configs, dict(M=1000, N=1000, K=1000)) == [configs[1]]
    assert all("microseconds" in p["reason"] for p in log.current["pruned"]) and len(log.current["pruned"]) == 2
    assert len(_search_log(monkeypatch, flops=1e11).prune(configs, dict(M=4096, N=4096, K=4096))) == 3


def test_the_search_times_clear_losers_only_in_short_windows(monkeypatch):
    import dataclasses

    import triton
    from ladder import autotune
    from ladder.runtime import world
    configs = [triton.Config(dict(BLOCK_M=m, BLOCK_N=64, BLOCK_K=32), num_warps=4, num_stages=3) for m in (64, 128, 256)]
    log = _search_log(monkeypatch, flops=1e12)
    log.prune(configs, dict(M=4096, N=4096, K=4096))
    monkeypatch.setattr(world, "WORLD", dataclasses.replace(world.WORLD, gpu=True))
    true_ms = iter([1.0, 2.0, 1.1])   # the second is 2x the first: screened out; the third is close: timed again
    windows = []

    def fake_bench(call, warmup_ms, rep_ms, quantiles):
        windows.append(rep_ms)
        return [call()]
    monkeypatch.setattr(autotune, "search_bench", fake_bench)
    for ms in true_ms:
        log.bench(lambda ms=ms: ms, [0.5])
    short, full = autotune.SCREEN_REP_MS, autotune.SEARCH_REP_MS
    assert windows == [short, full, short, short, full]
    log.finish(configs[0])
    report = log.reports[-1]
    assert [t.get("screened", False) for t in sorted(report.timed, key=lambda t: t["config"]["BLOCK_M"])] == [False, True, False]
    assert "1 of the 3 timed in short windows only" in report.summary()


# ------------------------------------------------------------- SASS, compiled ahead of time

def compiled(rung: str, arch: str) -> sass.Sass:
    return sass.triton_sass(**mm.TRITON_SASS_CASES[rung], arch=arch)


ARCHS = ("sm_80", "sm_90")


@pytest.mark.parametrize("arch", ARCHS)
def test_naive_and_coalesced_use_only_global_memory(arch):
    naive, coalesced = compiled("1_naive", arch), compiled("2_coalesced", arch)
    for s in (naive, coalesced):
        assert s.count("LDS") == s.count("STS") == s.count("HMMA") == s.count("HGMMA") == 0
    assert naive.global_load_bits() == {16}                 # one fp16 at a time
    assert max(coalesced.global_load_bits()) > 16           # B's strip: several columns per load


@pytest.mark.parametrize("arch", ARCHS)
def test_tiled_rung_runs_on_cuda_cores_through_shared_memory(arch):
    s = compiled("3_tiled", arch)
    assert s.count("HMMA") == s.count("HGMMA") == 0
    assert s.count("LDS") > 0 and s.count("STS") > 0 and s.count("BAR") > 0
    assert s.count("FFMA") / s.count("LDS") >= 8   # register-blocked: many FMAs per shared-memory load


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_rung_uses_the_tensor_cores_of_each_generation_without_async_copies(arch):
    s = compiled("4_tensor_core", arch)
    if arch == "sm_80":
        assert s.count("HMMA") > 0 and s.count("HGMMA") == 0    # mma.sync
    else:
        assert s.count("HGMMA") > 0 and s.count("HMMA") == 0    # wgmma
    assert s.count("LDGSTS") == s.count("UTMALDG") == 0 and s.count("LDG") > 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("rung", ["5_pipelined", "6_autotuned"])
def test_pipelined_rungs_copy_asynchronously(rung, arch):
    s = compiled(rung, arch)
    assert s.count("HMMA" if arch == "sm_80" else "HGMMA") > 0
    assert s.count("LDGSTS") + s.count("UTMALDG") > 0 and s.count("LDG") == 0  # cp.async (or TMA) only


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_memory_estimate_matches_the_compiler(arch):
    capability = (int(arch[3]), 0)
    for c in (dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4),
              dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)):
        compiled_bytes = sass.triton_sass(**mm.tile_sass_case(c), arch=arch).shared_bytes
        assert compiled_bytes == triton_search.shared_bytes(c, capability), c
    # rung 6: the buffers, plus the epilogue's scratch (at most the fp16 tile)
    for c in (dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),
              dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3)):
        scratch = (sass.triton_sass(**mm.persistent_sass_case(c), arch=arch).shared_bytes
                   - triton_search.shared_bytes(c, capability))
        assert 0 < scratch <= 2 * c["BLOCK_M"] * c["BLOCK_N"], c


def test_tma_persistent_rung_loads_by_tma_on_hopper():
    s = compiled("7_tma_persistent", "sm_90")
    assert s.count("UTMALDG") > 0 and s.count("HGMMA") > 0
    assert s.count("LDGSTS") == s.count("LDG") == 0             # no thread computes a load address


def test_on_a_t4_the_tensor_core_rungs_say_tl_dot_runs_on_cuda_cores():
    s = compiled("4_tensor_core", "sm_75")
    assert s.count("HMMA") == 0 and s.count("FFMA") > 0
    for rung in RUNGS[3:6]:
        assert "CUDA cores" in rung.fallback_note(T4) and rung.fallback_note(A100) is None
    assert RUNGS[-1].unavailable_reason(T4).startswith("N/A on this GPU")
