"""Why warps waited, recorded: ncu's warp states (stall reasons, occupancy, launch) read from its CSV, kept in the
recording for every profiled rung, shown beside each step and as a picture per ladder, each counter in the
glossary the lessons link to."""
import re
import subprocess
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from ladder import autotune, diagrams, figcheck, figures, problems, profile, results, verdicts

ROOT = Path(__file__).resolve().parent.parent
NCU_CSV = ROOT / "tests" / "data" / "ncu_warp_states_matmul_cuda_5_pipelined.csv"  # a real ncu run, trimmed


def test_warp_states_are_read_from_ncus_csv(monkeypatch):
    """ncu 2025.3's raw page for CUDA matmul rung 5 at 4096³ on an H100, as profile.warp_states reads it."""
    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(profile, "_ncu", lambda *a: subprocess.CompletedProcess([], 0, NCU_CSV.read_text(), ""))
    m = profile.warp_states("matmul", "cuda", "5_pipelined", (4096,) * 3)
    assert m["kernel"] == "matmul" and m["kernels"] == 1 and m["time_share"] == 1.0
    assert (m["registers_per_thread"], m["block_size"], m["grid_size"]) == (128, 256, 1024)
    assert m["shared_bytes_per_block"] == 76800 and m["limit_registers"] == m["limit_shared_mem"] == 2
    assert (m["stall_wait"], m["stall_short_scoreboard"], m["stall_barrier"]) == (1.81, 1.60, 1.47)
    assert m["issue_active_pct"] == 36.68 and m["occupancy_theoretical_pct"] == 25
    # the reasons and the issuing warp add up to the warp cycles per issued instruction
    assert sum(m[f"stall_{r}"] for r in profile.STALL_REASONS) + 1 == pytest.approx(m["cycles_per_issue"], abs=0.05)
    assert profile.top_stalls(m) == [("wait", 1.81), ("short_scoreboard", 1.6), ("barrier", 1.47)]
    assert verdicts.limiter(m) == "registers = shared memory"


RECORDING = results.load("nvidia-h100-80gb-hbm3")


@pytest.mark.parametrize("problem", ["vector_add", "matmul", "attention"])
def test_every_profiled_rung_has_its_warp_states(problem):
    profiled = {(p["backend"], p["rung"]) for p in RECORDING.profiles(problem)}
    states = {(w["backend"], w["rung"]): w for w in RECORDING.warp_states(problem)
              if tuple(w["shape"]) == problems.get(problem).bench_shapes[0]}
    assert profiled and profiled <= set(states)
    for w in states.values():
        m = w["metrics"]
        assert 0 < m["issue_active_pct"] <= 100 and 0 < m["occupancy_pct"] <= m["occupancy_theoretical_pct"] + 5
        assert profile.top_stalls(m) and m["registers_per_thread"] > 0


def test_the_table_and_the_line_beside_a_step():
    table = verdicts.warp_state_table("matmul", ["cuda:1_naive", "cuda:5_pipelined", "torch:cublas"], RECORDING)
    lines = table.splitlines()
    assert len(lines) == 5 and "LG throttle" in lines[1] and lines[-1].startswith("(ncu's warp states at 4096³")
    line = verdicts.warp_state_line("matmul", "cuda:5_pipelined", RECORDING)
    assert line.startswith("warp states (ncu, 4096³, recorded on NVIDIA H100 80GB HBM3") and "limited by" in line
    assert "not profiled" in verdicts.warp_state_line("matmul", "cuda:99_nothing", RECORDING)
    assert "kernels" not in line   # one kernel: nothing to say which


def test_a_rung_of_several_kernels_names_the_one_profiled():
    m = {"kernels": 3, "kernel": "coalesced_pv_kernel", "time_share": 0.644}
    assert verdicts._longest_kernel(m) == "; the longest of 3 kernel launches, coalesced_pv_kernel, 64% of the time"
    assert "_f3…, " in verdicts._longest_kernel({**m, "kernel": "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128"})


@pytest.mark.parametrize("problem, backend", [("matmul", "cuda"), ("matmul", "triton"), ("attention", "cuda"),
                                              ("attention", "triton")])
def test_the_stall_picture_is_readable(problem, backend):
    labels = [r.label for r in problems.get(problem).rungs if r.backend in (backend, "torch")]
    profiled = list(problems.get(problem).bench_shapes[0])
    states = [w for w in RECORDING.warp_states(problem) if w["shape"] == profiled]
    fig = figures.stall_mix(states, labels, RECORDING.label)
    assert figcheck.collisions(fig) == []
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == \
        [label for label in labels if any(f"{w['backend']}:{w['rung']}" == label for w in states)]


def test_the_glossary_names_every_counter_and_its_metric():
    text = (ROOT / "notebooks" / "glossary.md").read_text()
    for name, metric in {**profile.METRICS, **profile.WARP_STATE}.items():
        if name.startswith("stall_"):
            metric = metric.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio")
        assert f"`{name}`" in text and f"`{metric}`" in text, name
    for name in verdicts.STALL_NAMES:
        assert f"`stall_{name}`" in text


def test_prune_reasons_keep_their_numbers():
    """Printouts and search pictures fold the prune reasons by kind, with the ranges their numbers span: every
    number a number, never a placeholder."""
    assert autotune.fold_reasons(["needs 136 registers (> 128)", "needs 256 registers (> 128)",
                                  "238 KiB of shared memory > 227 KiB"]) == \
        Counter({"needs 136-256 registers (> 128)": 2, "238 KiB of shared memory > 227 KiB": 1})
    for fig in (diagrams.attention.attention_search("cuda"), diagrams.attention.attention_search("triton"),
                diagrams.matmul_hopper.matmul_hopper_search()):
        keys = [t.get_text() for t in fig.texts if "pruned" in t.get_text()]
        assert keys and not any(re.search(r"\bN\b", k) for k in keys), keys
        plt.close(fig)


def test_the_tensor_pipes_working_time_beside_the_kernels():
    """Lesson 06's table at the MLP down projection: each kernel's time, its tensor pipe's busy share and their
    product; a rung profiled without the share (or not at all) says so."""
    table = verdicts.tensor_pipe_table("matmul", ["torch:cublas", "cuda:12_autotuned", "cuda:99_nothing"], RECORDING,
                                       shape=(8192, 768, 3072))
    lines = table.splitlines()
    assert len(lines) == 5 and lines[1].startswith("torch:cublas") and "nvjet" in lines[1]
    assert lines[3] == f"{'cuda:99_nothing':26s} tensor pipe not profiled"
    assert lines[-1].startswith("(ncu at 8192x768x3072, recorded on NVIDIA H100 80GB HBM3")
    m = {w["rung"]: w["metrics"] for w in RECORDING.warp_states("matmul")
         if w["shape"] == [8192, 768, 3072]}["12_autotuned"]
    assert lines[2].split()[-1] == f"{m['duration_ns'] / 1e3 * m['tensor_pipe_pct'] / 100:.1f}us"
