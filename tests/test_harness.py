"""Harness pieces: datasheets, CUDA source handling, roofline model and plot, recordings, CLI."""
import subprocess
import sys

import pytest

from ladder import results, roofline
from ladder.runtime import cuda, hardware
from ladder.problems import get


@pytest.mark.parametrize("name, sheet", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("Tesla T4", "T4"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"),
    ("NVIDIA H200", "H200 SXM")])
def test_datasheet_lookup(name, sheet):
    assert hardware.datasheet_for(name).name == sheet


def test_slug():
    assert hardware.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_included_file_edit_changes_the_source_text(tmp_path):
    (tmp_path / "common.cuh").write_text("#define SCALE 2\n")
    main = tmp_path / "k.cu"
    main.write_text('#include "common.cuh"\n#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) { x[0] = SCALE; }\n')
    before = cuda.source(main)
    (tmp_path / "common.cuh").write_text("#define SCALE 3\n")
    after = cuda.source(main)
    assert before != after and "#define SCALE 3" in after and "<cuda_fp16.h>" in after


def test_missing_include_is_named(tmp_path):
    main = tmp_path / "k.cu"
    main.write_text('#include "nowhere.cuh"\n')
    with pytest.raises(cuda.CompileError, match="nowhere.cuh"):
        cuda.source(main)


def test_mma_header_compiles_without_gpu(tmp_path):
    src = tmp_path / "wmma.cu"
    src.write_text("#include <mma.h>\nusing namespace nvcuda;\n"
                   'extern "C" __global__ void k(const half* a, float* c) {\n'
                   "  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
                   "  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
                   "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n"
                   "  wmma::fill_fragment(fc, 0.f); wmma::load_matrix_sync(fa, a, 16);\n"
                   "  wmma::load_matrix_sync(fb, a, 16); wmma::mma_sync(fc, fa, fb, fc);\n"
                   "  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major); }\n")
    from ladder import sass
    assert sass.cuda_sass(src, "sm_80").count("HMMA") > 0


def test_compile_error_shows_the_log(tmp_path):
    src = tmp_path / "bad.cu"
    src.write_text('extern "C" __global__ void k() { undefined_thing(); }\n')
    with pytest.raises(cuda.CompileError, match="undefined_thing"):
        cuda.compile_cubin(src, "sm_90")


def test_roofline_model():
    assert roofline.ridge(3.0, 60.0) == 20.0
    assert roofline.attainable(1 / 6, 3.0, 60.0) == pytest.approx(0.5)
    assert roofline.attainable(100, 3.0, 60.0) == 60.0
    assert roofline.bound(1 / 6, 3.0, 60.0) == "memory" and roofline.bound(50, 3.0, 60.0) == "compute"


def test_recording_has_provenance_ceilings_and_correct_runs():
    rec = results.load()
    prov = rec.data["provenance"]
    for key in ("gpu", "driver", "cuda", "torch", "triton", "cupy", "date"):
        assert prov.get(key), key
    assert {"copy_TBps", "fp32_TFLOPs", "cublas_TFLOPs"} <= set(rec.ceilings) <= {
        "copy_TBps", "l2_TBps", "fp32_TFLOPs", "cublas_TFLOPs", "fp16_tc_TFLOPs", "mma_sync_TFLOPs", "wgmma_TFLOPs"}
    instructions = [rec.ceilings[k] for k in ("mma_sync_TFLOPs", "wgmma_TFLOPs") if k in rec.ceilings]
    assert rec.ceilings.get("fp16_tc_TFLOPs") == (max(instructions) if instructions else None)   # a ceiling, not cuBLAS
    runs = rec.runs("vector_add")
    assert runs and all(r["correct"] for r in runs)
    for r in runs:
        assert {"problem", "backend", "rung", "shape", "ms", "tflops", "tbps", "correct"} <= set(r)
    assert rec.label.startswith("recorded on ")


def test_roofline_plot_from_recording():
    rec = results.load()
    problem = get("vector_add")
    pts = roofline.points(rec.runs("vector_add"), problem)
    assert {p.label for p in pts} >= {"cuda:1_scalar", "cuda:2_vectorized", "triton:1_blocked"}
    ax = roofline.plot(pts, rec.ceilings, rec.data["datasheet"], source=rec.label)
    assert ax.get_xscale() == "log"
    from ladder import figcheck
    marks = [c for a in ax.figure.axes for c in a.collections if not (c.get_gid() or "").startswith(figcheck.PLACE)]
    assert len(marks) == 2 * len(pts)  # a disc and its number, main panel or zoom
    assert rec.label in ax.get_title()


def test_merge_replaces_only_the_rungs_recorded_again():
    def run(problem, rung, x):
        return {"problem": problem, "backend": "cuda", "rung": rung, "x": x}
    old = {"runs": [run("a", "1", 1), run("a", "2", 1), run("b", "1", 1)], "profiles": [run("a", "1", 1)],
           "autotune": [{"problem": "a", "tuner": "cuda:6", "x": 1}]}
    new = {"runs": [run("a", "1", 2)], "profiles": [], "autotune": [{"problem": "a", "tuner": "triton:6", "x": 2}]}
    merged = results.merge(dict(old, provenance={"date": "then"}), dict(new, provenance={"date": "now"}))
    assert [(r["problem"], r["rung"], r["x"], r["recorded"]) for r in merged["runs"]] == [
        ("a", "1", 2, "now"), ("a", "2", 1, "then"), ("b", "1", 1, "then")]  # in the old order
    assert [r["x"] for r in merged["profiles"]] == [1]  # none new for it: the old one stays
    assert [r["tuner"] for r in merged["autotune"]] == ["cuda:6", "triton:6"]


def test_merge_pins_each_runs_ceilings_and_anchors():
    def run(backend, rung, tflops):
        return {"problem": "matmul", "backend": backend, "rung": rung, "shape": [8], "tflops": tflops}
    first = results.merge(None, {"provenance": {"date": "then"}, "ceilings": {"copy_TBps": 3.0},
                                 "runs": [run("cuda", "1", 1.0), run("torch", "cublas", 700.0)]})
    second = results.merge(first, {"provenance": {"date": "now"}, "ceilings": {"copy_TBps": 3.1},
                                   "runs": [run("triton", "1", 2.0), run("torch", "cublas", 650.0)]})
    rec = results.Recording(None, second)
    old_row, new_row = rec.runs(backend="cuda")[0], rec.runs(backend="triton")[0]
    assert rec.session(old_row)["ceilings"] == {"copy_TBps": 3.0} and second["ceilings"] == {"copy_TBps": 3.1}
    assert results.run_anchor(old_row, "torch:cublas", rec)["tflops"] == 700.0   # not the later run's 650
    assert results.run_anchor(new_row, "torch:cublas", rec)["tflops"] == 650.0
    ncu_only = results.merge(second, {"provenance": {"date": "later"}, "ceilings": {"copy_TBps": 3.1}, "profiles": []})
    assert [s["date"] for s in ncu_only["sessions"]] == ["then", "now"]   # no timing, no session
    same_minute = results.merge(second, {"provenance": {"date": "now"}, "profiles": []})  # ncu right after timing
    assert [s["date"] for s in same_minute["sessions"]] == ["then", "now"]  # the timing run's session stays


def test_recording_says_which_runs_kept_no_anchor_or_ceilings():
    rec = results.load()
    for row in rec.runs():
        session = rec.session(row)
        assert session is not None, row
        assert session["ceilings"] or "ceilings not kept" in session["note"]
        assert session["anchors"] or "no anchor kept" in session["note"]


def test_cli_info_on_cpu():
    out = subprocess.run([sys.executable, "-m", "ladder", "info"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "CPU only" in out.stdout and "recorded on" in out.stdout


def test_cli_gpu_only_command_says_so_without_traceback():
    out = subprocess.run([sys.executable, "-m", "ladder", "run-once", "vector_add", "cuda", "1_scalar", "10"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "not available here" in out.stderr and "Traceback" not in out.stderr


def test_fallback_note_names_the_missing_feature():
    from ladder.runtime.hardware import GPU
    from ladder.problems import Rung
    rung = Rung("cuda", "5_pipelined", print, fallback=("cp.async", "a register-staged double buffer"))
    t4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)
    h100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)
    assert rung.fallback_note(t4) == "sm_75 has no cp.async: runs a register-staged double buffer"
    assert rung.fallback_note(h100) is None


def test_power_samples_are_parsed_and_throttle_reasons_named(tmp_path):
    from ladder import power
    log = tmp_path / "smi.csv"
    log.write_text("2026/11/21 20:40:00.100, 700.12 W, 700.00 W, 1315 MHz, 1980 MHz, 0x0000000000000004\n"
                   "2026/11/21 20:40:00.2")  # cut short when sampling stopped
    [row] = power._samples(str(log))
    assert (row["W"], row["MHz"], row["max_MHz"]) == (700.12, 1315.0, 1980.0)
    assert [why for bit, why in power.THROTTLE.items() if row["throttle"] & bit] == ["SW power cap"]


def test_power_compare_rotates_the_order_and_derives_energy_and_work_per_clock(monkeypatch):
    from ladder import power
    order = []

    def fake_sample(kernels, seconds):
        [name] = kernels
        order.append(name)
        watts = {"a": 700.0, "b": 690.0}[name]
        return {name: {"calls_per_s": 500.0, "W": watts, "limit_W": 700.0, "MHz": 1250.0, "max_MHz": 1980.0,
                       "throttle": ["SW power cap"]}}

    monkeypatch.setattr(power, "sample", fake_sample)
    found = power.compare({"a": None, "b": None}, flop=2e12, rounds=3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert found["a"]["tflops"] == 1000.0 and found["a"]["pj_per_flop"] == 0.7
    assert found["b"]["kflop_per_clock"] == 800.0 and found["b"]["rounds"] == 3
    assert found["b"]["throttle"] == ["SW power cap"]


def test_rows_added_to_a_recording_start_from_its_gpu_facts_and_todays_provenance(monkeypatch):
    from ladder import results
    monkeypatch.setattr(results, "provenance", lambda gpu: {"date": "now"})
    old = {"provenance": {"date": "then"}, "ceilings": {"copy_TBps": 3.0}, "runs": [{"x": 1}], "power": [{"x": 2}]}
    assert results.fresh_record(old, None) == {"provenance": {"date": "now"}, "ceilings": {"copy_TBps": 3.0}}


def test_a_new_recording_keeps_the_power_rows_it_does_not_replace():
    from ladder import results
    row = {"problem": "matmul", "backend": "torch", "rung": "cublas", "shape": [8192] * 3, "W": 698.0}
    old = {"provenance": {"date": "2026-11-22 03:00 UTC"}, "runs": [], "power": [row]}
    new = {"provenance": {"date": "2026-11-23 03:00 UTC"}, "runs": [dict(row, tflops=650.0)]}
    merged = results.merge(old, new)
    assert merged["power"] == [dict(row, recorded="2026-11-22 03:00 UTC")]
    assert merged["runs"][0]["recorded"] == "2026-11-23 03:00 UTC"


class _RecordingKernel:
    def __init__(self):
        self.warmed = []

    def warmup(self, *args, grid, **kwargs):
        self.warmed.append((args, kwargs))


def test_compile_ahead_warms_each_kept_configuration(monkeypatch):
    import triton
    import triton.runtime._async_compile as async_compile
    from ladder import autotune
    entered = []

    class Mode:  # records that the warm-ups ran inside Triton's asynchronous compile mode
        def __init__(self, executor, *, ignore_errors=False):
            self.ignore_errors = ignore_errors

        def __enter__(self):
            entered.append(self.ignore_errors)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(async_compile, "AsyncCompileMode", Mode)
    kernel = _RecordingKernel()
    configs = [triton.Config({"BLOCK": 16}, num_warps=4, num_stages=2), triton.Config({"BLOCK": 32}, num_warps=8)]
    autotune.compile_ahead(kernel, configs, {"x_ptr": "x", "n": 7}, {"grid": (1,), "warmup": False, "FLAG": True})
    assert entered == [True]
    assert [args for args, _ in kernel.warmed] == [("x", 7), ("x", 7)]
    assert [kw["BLOCK"] for _, kw in kernel.warmed] == [16, 32] and all(kw["FLAG"] for _, kw in kernel.warmed)
    assert [kw["num_warps"] for _, kw in kernel.warmed] == [4, 8] and not any("warmup" in kw for _, kw in kernel.warmed)


def test_compile_ahead_leaves_an_older_triton_to_the_autotuner(monkeypatch):
    import triton
    import triton.runtime._async_compile as async_compile
    from ladder import autotune

    class FirstMode:  # Triton's first AsyncCompileMode: no ignore_errors, a failed compilation raises
        def __init__(self, executor):
            raise AssertionError("used")

    monkeypatch.setattr(async_compile, "AsyncCompileMode", FirstMode)
    kernel = _RecordingKernel()
    autotune.compile_ahead(kernel, [triton.Config({"BLOCK": 16})], {"n": 7}, {"grid": (1,), "warmup": False})
    assert kernel.warmed == []


def test_profile_drops_a_counter_that_ncu_does_not_know_and_keeps_the_others(monkeypatch):
    import subprocess
    from ladder import profile
    calls = []

    def fake_run(cmd, **kw):
        asked = cmd[cmd.index("--metrics") + 1].split(",")
        calls.append(asked)
        if "l1tex__m_xbar2l1tex_read_bytes.sum" in asked:
            return subprocess.CompletedProcess(cmd, 1, "", "==ERROR== Failed to find metric regex:"
                                               "^l1tex__m_xbar2l1tex_read_bytes.sum$\n")
        header = ",".join(f'"{h}"' for h in ["Kernel Name", *asked])
        units = ",".join('""' for _ in range(len(asked) + 1))
        row = ",".join(f'"{v}"' for v in ["k", *("1,000" for _ in asked)])
        return subprocess.CompletedProcess(cmd, 0, "\n".join([header, units, row]), "")

    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(subprocess, "run", fake_run)
    found = profile.profile("matmul", "torch", "cublas", (64, 64, 64))
    assert len(calls) == 2 and "l1tex__m_xbar2l1tex_read_bytes.sum" not in calls[1]
    assert found["l2_to_sm_bytes"] is None and found["dram_bytes_read"] == 1000.0 and found["kernels"] == ["k"]


def test_profile_sums_counts_over_kernels_and_weighs_a_percentage_by_their_time(monkeypatch):
    import subprocess
    from ladder import profile
    metrics = {"tensor_instructions": profile.METRICS["tensor_instructions"],
               "tensor_pipe_pct": profile.METRICS["tensor_pipe_pct"], "duration_ns": profile.METRICS["duration_ns"]}
    kernels = [("preprocess", 0, 0, 100), ("dkdv", 300, 60, 600), ("dq", 100, 30, 300)]

    def fake_run(cmd, **kw):
        asked = cmd[cmd.index("--metrics") + 1].split(",")
        lines = [",".join(f'"{h}"' for h in ["Kernel Name", *asked]), ",".join('""' for _ in range(len(asked) + 1))]
        for name, *values in kernels:
            lines.append(",".join(f'"{v}"' for v in [name, *values]))
        return subprocess.CompletedProcess(cmd, 0, "\n".join(lines), "")

    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(subprocess, "run", fake_run)
    found = profile.profile("attention_backward", "triton", "4_autotuned", (1, 1, 64, 64, 0), metrics)
    assert found["tensor_instructions"] == 400 and found["duration_ns"] == 1000
    assert found["kernels"] == ["preprocess", "dkdv", "dq"] and found["kernel_ns"] == [100, 600, 300]
    assert found["tensor_pipe_pct"] == pytest.approx((60 * 600 + 30 * 300) / 1000)   # 45%, not 90%


@pytest.mark.parametrize("triton_v, numpy_v, refused", [
    ("3.6.0", "2.4.6", True), ("3.6.0", "2.3.5", False), ("3.7.1", "2.4.6", False), ("3.9.0", "2.4.0", False)])
def test_an_interpreter_numpy_cannot_run_is_named_at_import(monkeypatch, triton_v, numpy_v, refused):
    import importlib.metadata
    from ladder.runtime import world
    monkeypatch.setattr(importlib.metadata, "version", {"triton": triton_v, "numpy": numpy_v}.get)
    if refused:
        with pytest.raises(world.NotAvailable, match=rf"Triton {triton_v}'s interpreter .* NumPy {numpy_v}: .*numpy<2.4"):
            world.check_interpreter()
    else:
        world.check_interpreter()


def test_long_kernels_are_timed_over_a_few_runs_not_do_bench_windows():
    from ladder import timing
    assert timing.long_run_repeats(0.01) == 0 and timing.long_run_repeats(99.0) == 0   # do_bench, L2 flushed
    assert timing.long_run_repeats(276.0) == 3      # CUDA rung 1 at 4096^3
    assert timing.long_run_repeats(12_000.0) == 1   # Triton rung 1 at 8192^3: 2 calls with the check, not 7


def test_compiling_ahead_uses_small_shapes_that_compile_the_same_and_skips_searching_rungs():
    from kernels import attention, matmul
    from ladder import problems, runner
    assert [problems.same_specialization(n) for n in (1, 31, 1000, 4095, 4096, 4097, 8192)] == [1, 31, 24, 31, 16, 17, 16]
    for n in (1, 17, 100, 1000, 4096, 4097):   # Triton's two integer specializations: == 1 and % 16 == 0
        small = problems.same_specialization(n)
        assert (small == 1) == (n == 1) and (small % 16 == 0) == (n % 16 == 0)
    assert matmul.PROBLEM.compile_shape((4095, 4097, 31)) == (31, 17, 31)
    assert attention.PROBLEM.compile_shape((4, 32, 4096, 128, 1)) == (1, 16, 16, 128, 1)  # D and causal kept
    assert attention.PROBLEM.compile_shape((2, 3, 100, 64, 0)) == (1, 3, 20, 64, 0)     # H = 3: not specialized
    searching = {r.label for r in [*matmul.PROBLEM.rungs, *attention.PROBLEM.rungs] if r.searches}
    assert searching == {"cuda:6_autotuned", "cuda:12_autotuned", "cuda:15_autotuned", "triton:6_autotuned",
                         "triton:7_tma", "triton:8_barrier_pass"}
    assert runner.compile_ahead(attention.PROBLEM) == []   # no GPU here: nothing to compile for


def test_rung_7_rows_recorded_while_it_went_through_the_pass_are_marked_so():
    """From 2026-11-29 until rung 8 existed, Triton attention's rung 7 compiled through ladder/ptx.py by default and its
    rows did not say so: read back, such a row says a pass ran (its version unknown); one recorded before, or one that
    says which pass ran, is read as it is. The H100's recorded rung 7 rows (2026-11-27) say null."""
    from ladder import results
    row = {"problem": "attention", "backend": "triton", "rung": "7_tma", "shape": [4, 32, 4096, 128, 0]}
    data = {"runs": [dict(row, recorded="2026-11-30 10:00 UTC"), dict(row, recorded="2026-11-27 16:28 UTC"),
                     dict(row, recorded="2026-12-02 10:00 UTC", ptx_pass=None)]}
    marked = [r.get("ptx_pass", "missing") for r in results._mark_rung7_through_pass(data)["runs"]]
    assert marked == [{"name": "split_refill_barriers", "sha256": None}, "missing", None]
    h100 = [r for r in results.load("nvidia-h100-80gb-hbm3").runs("attention", backend="triton", rung="7_tma")]
    assert h100 and all(r["ptx_pass"] is None for r in h100)


def test_each_triton_row_says_which_ptx_pass_compiled_it():
    """Triton attention's rung 8 goes through ladder/ptx.py's pass, named with its content hash in its rows; rung 7
    (and any other Triton rung) runs what Triton compiles: "ptx_pass": null; a CUDA or PyTorch row has no field."""
    from kernels import attention
    from ladder import ptx, runner
    rung = {r.label: r for r in attention.PROBLEM.rungs}
    assert runner.pass_field(rung["triton:7_tma"]) == runner.pass_field(rung["triton:6_autotuned"]) == {"ptx_pass": None}
    field = runner.pass_field(rung["triton:8_barrier_pass"])["ptx_pass"]
    assert {k: field[k] for k in ("name", "sha256")} == {"name": "split_refill_barriers", "sha256": ptx.version()}
    assert runner.pass_field(rung["cuda:7_wgmma_tma"]) == runner.pass_field(rung["torch:sdpa"]) == {}


def test_a_library_rung_that_refuses_a_check_shape_is_reported_and_ours_still_raise():
    """SDPA's cuDNN backward has no kernel at some ragged check shapes ("No available kernel"): the check says so
    for that yardstick and goes on; a rung of ours that raises stops the check."""
    import dataclasses

    from ladder import problems, runner

    def refuses(*args, out=None):
        raise RuntimeError("No available kernel. Aborting execution.")
    vector_add = problems.get("vector_add")
    library = problems.Rung("torch", "refuses", refuses)
    report = runner.format_checks(dataclasses.replace(vector_add, rungs=[library]))
    assert report == "torch:refuses          not run: PyTorch refused a check shape (No available kernel. Aborting execution.)"
    with pytest.raises(RuntimeError, match="No available kernel"):
        runner.format_checks(dataclasses.replace(vector_add, rungs=[problems.Rung("triton", "refuses", refuses)]))
