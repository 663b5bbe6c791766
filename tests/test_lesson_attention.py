"""Lessons 04a-04f: within LESSONS.md's budgets, and the helpers of ladder.lessons they call."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from kernels.triton import attention as ta
from ladder import autotune, ptx
from ladder.lessons import l04_attention as l04
from ladder.lessons import l04d_attention_backward as l04d
from ladder.lessons import l04e_attention_hopper as l04e
from ladder.lessons import l04f_attention_softmax_instructions as l04f
from ladder.lessons import source

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ATTENTION = ["04a_attention_cuda.ipynb", "04b_attention_cuda_tensor_cores.ipynb", "04c_attention_triton.ipynb",
             "04d_attention_backward.ipynb", "04e_attention_hopper.ipynb", "04f_attention_softmax_instructions.ipynb"]


def test_traffic_counts_the_score_passes():
    shape = (4, 32, 4096, 64, 0)
    matrix = 4 * 4 * 32 * 4096 * 4096
    assert l04.attention_traffic_bytes("3_fused", shape) == at.min_bytes(shape)
    assert l04.attention_traffic_bytes("1_naive", shape) == at.min_bytes(shape) + 6 * matrix
    assert l04.attention_traffic_bytes("2_coalesced", shape) == at.min_bytes(shape) + 5 * matrix


def test_count_names_every_family_and_shape():
    text = l04.attention_count(at.HEADLINE, {"copy_TBps": 3.0, "fp32_TFLOPs": 60.0, "fp16_tc_TFLOPs": 600.0}, "model")
    assert "ridge points 20 and 200 FLOP/B" in text
    assert all(family in text for family in l04.ATTENTION_FAMILIES.values())
    assert "2048 F/B" in text and len(text.splitlines()) <= 10


def test_search_summary_is_one_line_per_search():
    reports = [r for r in autotune.recorded_reports(None) if r.problem == "attention"]
    if not reports:
        pytest.skip("no recorded attention searches")
    text = l04.search_summary(reports)
    assert [line.split()[0] for line in text.splitlines() if not line.startswith("  pruned")] == [
        r.tuner for r in reports]


def test_backward_ratios_judge_the_issue_goals():
    """Lesson 04d's ratio table: a line per recorded shape, then the two goals computed (a synthetic run)."""
    rows = []
    for s, (ours, cudnn, fa2) in {(4, 32, 4096, 64, 0): (4.0, 3.2, 5.0), (4, 32, 4096, 128, 0): (8.0, 5.0, 9.0)}.items():
        rows += [{"backend": b, "rung": r, "shape": list(s), "ms": ms, "tflops": 1.0 / ms}
                 for b, r, ms in (("triton", "4_autotuned", ours), ("torch", "sdpa", cudnn), ("torch", "sdpa_flash", fa2))]
    text = l04d.backward_ratios(rows).splitlines()
    assert len(text) == 1 + 2 + 2
    assert text[-2].endswith("1.125x at worst -> HIT")
    assert "0.800-0.800x, met at 0 of 1 shapes -> MISS" in text[-1]


def test_backward_tiles_show_the_search_gain_over_rung_2s_tiles():
    """Lesson 04d's search table: the winner's speed-up over rung 2's tiles where the search timed them, "-"
    where it pruned them (a synthetic search)."""
    from kernels.triton import attention_backward as tab
    from ladder.autotune import Report
    fixed, other = tab.GPU_TILES[64]["dq"], dict(tab.GPU_TILES[64]["dq"], num_stages=4)
    timed = Report("attention_backward", "triton:4_autotuned:dq", (4096, 64, 0), "gpu", other, 1.0, 1.0,
                   timed=[{"config": other, "ms": 1.0}, {"config": fixed, "ms": 1.25}])
    pruned = Report("attention_backward", "triton:4_autotuned:dkdv", (4096, 64, 0), "gpu", other, 1.0, 1.0,
                    timed=[{"config": other, "ms": 1.0}], pruned=[{"config": fixed, "reason": "spills"}])
    lines = l04d.backward_tiles([timed, pruned]).splitlines()
    assert "gain" in lines[0]
    assert lines[1].startswith("dkdv") and lines[1].split()[-3] == "-"
    assert lines[2].startswith("dq") and lines[2].split()[-3] == "1.25x"
    assert len(lines) == 4   # no rung 3 search at that shape: no line saying which way rung 4 runs
    one = dict(tab.GPU_TILES[64]["dkdv_atomic"], num_stages=2)
    atomic = Report("attention_backward", "triton:4_autotuned:dkdv_atomic", (4096, 64, 0), "gpu", one, 1.9, 1.0,
                    timed=[{"config": one, "ms": 1.9}])
    lines = l04d.backward_tiles([timed, pruned, atomic]).splitlines()
    assert lines[2].startswith("dkdv_atomic") and lines[2].split()[-3] == "-" and " tma" in lines[2]
    assert lines[-1].split() == ["S4096", "D64", "causal", "0:", "rung", "3", "(1.900", "ms", "against", "1.000", "+",
                                 "1.000", "=", "2.000)"]


def test_backward_problem_times_live_at_s4096_only(monkeypatch):
    import dataclasses

    import kernels.attention_backward as ab
    from ladder.runtime import world
    monkeypatch.setattr(world, "WORLD", dataclasses.replace(world.WORLD, gpu=False))
    assert l04d.backward_problem().bench_shapes == ab.HEADLINE   # no GPU: every shape, from the recording
    monkeypatch.setattr(world, "WORLD", dataclasses.replace(world.WORLD, gpu=True))
    assert {s[2] for s in l04d.backward_problem().bench_shapes} == {4096}


# ------------------------------------------------------------- lesson 04e: the Hopper rungs 7-10

HOPPER = at.PROBLEM.only("cuda", "torch", "triton:7_tma").span("cuda", "6_autotuned", "10_intra_overlap")


def test_hopper_count_gives_the_least_time_under_the_tensor_core_roof():
    roofs = {"copy_TBps": 3.0, "fp16_tc_TFLOPs": 1000.0, "mma_sync_TFLOPs": 600.0, "wgmma_TFLOPs": 1000.0}
    text = l04e.hopper_attention_count(at.PROBLEM, at.HEADLINE[:1], roofs, "model")
    assert "mma.sync 600 TFLOP/s, wgmma 1000 TFLOP/s; the tensor-core roof: 1000" in text
    assert text.splitlines()[-1].split()[-1] == "0.550"   # 549.8 GFLOP at 1000 TFLOP/s
    no_wgmma = {k: v for k, v in roofs.items() if k != "wgmma_TFLOPs"}
    assert "wgmma not measured" in l04e.hopper_attention_count(at.PROBLEM, at.HEADLINE[:1], no_wgmma, "model")


def test_hopper_rungs_compile_with_the_launchers_tiles():
    """The SASS tables build rungs 7-9 as kernels/cuda/attention.py launches them (rung 8 at D128: 128-key tiles,
    8 HGMMA for Q·Kᵀ and 8 for P·V; rung 7 there: 64-key tiles, 8 and 4), Triton's rung 7 with its recorded search's
    winner; the turns (BAR.ARV) and setmaxnreg are CUDA's alone."""
    assert l04.cuda_attention_tiles("8_warp_specialized", 128) == cuda_attention.WARP_SPECIALIZED[128]
    assert l04.cuda_attention_tiles("10_intra_overlap", 128) == cuda_attention.INTRA_OVERLAP[128]
    assert l04.cuda_attention_tiles("6_autotuned", 64) == {}
    hgmma = {name: l04.attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", 128).count("HGMMA")
             for name in ("7_wgmma_tma", "8_warp_specialized")}
    assert hgmma == {"7_wgmma_tma": 12, "8_warp_specialized": 16}
    both = at.PROBLEM.only("cuda:9_pingpong", "triton:7_tma")
    table = l04.attention_signatures(both, archs=("sm_90a",), families=("HGMMA", "USETMAXREG", "BAR.ARV"),
                                     recorded_winners=True)
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:]}
    assert rows == {"cuda:9_pingpong": ["x", "x", "x"], "triton:7_tma": ["x", "-", "-"]}
    # without recorded winners a searched Triton rung has no fixed build: left out (lesson 04c's table)
    plain = l04.attention_signatures(both, archs=("sm_90a",), families=("HGMMA",))
    assert [line.split()[0] for line in plain.splitlines()[2:]] == ["cuda:9_pingpong"]


def _blocks(line: str) -> tuple[int, int]:
    """(blocks an SM, consumer warps an SM) of a line of hopper_attention_blocks."""
    found = re.search(r"(\d+)\s+(?:registers|shared memory|warps|blocks)[a-z =]*\s+(\d+)\s+\d+$", line)
    return int(found.group(1)), int(found.group(2))


def test_refill_barriers_counts_rungs_7_and_8_at_the_recorded_d128_tile():
    """04e's table: the same products and copies in both; rung 8 (through ladder/ptx.py) has fewer CTA barriers, 4 of
    them arrivals, and the pass says what it changed."""
    head, rung7, rung8, said = l04e.refill_barriers(128).splitlines()
    assert head.startswith("D128, 128x128, 8 warps") and head.split()[-4:] == ["BAR.SYNC", "BAR.ARV", "HGMMA",
                                                                                "UTMALDG"]
    (sync, arv, hgmma, utmaldg), after = (list(map(int, row.split()[-4:])) for row in (rung7, rung8))
    assert arv == 0 and hgmma > 0 and utmaldg > 0 and after[2:] == [hgmma, utmaldg]
    assert after[1] == 4 and after[0] < sync and re.fullmatch(r"ladder/ptx.py: \d+ CTA barriers dropped from the PTX, "
                                                              r"[1-9]\d* split into sync and arrive", said)


def test_blocks_table_holds_what_ncu_recorded():
    """At D64 ncu recorded rung 7's theoretical occupancy as 15 of 64 warps (3 blocks of 5) and rung 8's as 12 (one
    block): the table, computed from the compile, agrees; rung 7 fits 2 blocks at D128. A smaller SM holds fewer."""
    table = l04e.hopper_attention_blocks().splitlines()[1:-1]
    rows = {(line.split()[0], int(line.split()[1])): line for line in table}
    assert _blocks(rows["cuda:7_wgmma_tma", 64]) == (3, 12)
    assert _blocks(rows["cuda:7_wgmma_tma", 128]) == (2, 8)
    assert _blocks(rows["cuda:8_warp_specialized", 64]) == (1, 8)
    assert "(24/240)" in rows["cuda:9_pingpong", 128] and "(24/240)" not in rows["cuda:7_wgmma_tma", 64]
    # rung 10: a ring of 3 at both D (at D128 all but 2 KiB of the SM's shared memory), still one block an SM
    for d in (64, 128):
        assert _blocks(rows["cuda:10_intra_overlap", d]) == (1, 8)
        assert rows["cuda:10_intra_overlap", d].split()[3] == str(cuda_attention.INTRA_OVERLAP[d]["STAGES"]) == "3"
    # rung 12: three consumer warpgroups at D64 (12 consumer warps, 192 queries a tile), rung 11's line at D128
    assert _blocks(rows["cuda:12_three_consumers", 64]) == (1, 12) and "(24/160)" in rows["cuda:12_three_consumers", 64]
    assert rows["cuda:12_three_consumers", 64].split()[-1] == "192"
    assert rows["cuda:12_three_consumers", 128].split()[1:] == rows["cuda:11_fast_exp2", 128].split()[1:]
    small = l04e.hopper_attention_blocks((64,), dict(l04e.SM90, shared_bytes=100 * 1024)).splitlines()[1]
    assert _blocks(small) == (1, 4) and "shared memory" in small


def test_occupancy_table_reads_each_case_beside_rung_6_and_merges_as_its_own_rows():
    """04e's occupancy experiment: per shape, rung 6 then rung 7 at each blocks an SM asked for (ncu's count where
    it has one), × rung 6 from the same rows; a recording without the experiment says how to make it; merged rows
    are keyed by their blocks an SM (a re-run replaces its own case only)."""
    from ladder import results
    def row(rung, blocks, ms, shape=l04e.OCCUPANCY_SHAPES[0]):
        backend, name = rung.split(":")
        return {"problem": "attention", "backend": backend, "rung": name, "shape": list(shape), "blocks_per_sm": blocks,
                "ms": ms, "rounds": 5, "occupancy_pct": 12.0, "issue_active_pct": 46.0, "instructions": 7.5e8,
                "limit_shared_mem": blocks or 2}
    rows = [row(l04e.RUNG6, None, 1.8), row(l04e.RUNG7, 3, 1.2), row(l04e.RUNG7, 2, 1.5)]
    text = l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": rows}))
    lines = text.splitlines()
    assert [line.split()[1:4] for line in lines[1:4]] == [["cuda:6_autotuned", "2", "1.800"],
                                                          ["cuda:7_wgmma_tma", "3", "1.200"],
                                                          ["cuda:7_wgmma_tma", "2", "1.500"]]
    assert "1.50x" in lines[2] and "1.20x" in lines[3] and "0.750" in lines[1] and "recorded on G" in lines[-2]
    only_7 = l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": rows}),
                                  rungs=(l04e.RUNG7,)).splitlines()
    assert [line.split()[1:3] for line in only_7[1:3]] == [["cuda:7_wgmma_tma", "3"], ["cuda:7_wgmma_tma", "2"]]
    assert "1.50x" in only_7[1]   # still over rung 6, though its row is not shown
    as_launched = l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": rows}),
                                       rungs=(l04e.RUNG7,), fewer_blocks=False).splitlines()
    assert [line.split()[1:3] for line in as_launched[1:-2]] == [["cuda:7_wgmma_tma", "3"]]
    narrow = {**row(l04e.RUNG8, None, 2.4, l04e.OCCUPANCY_SHAPES[1]), "key_tile": l04e.NARROW_KEY_TILE[128]}
    wide = row(l04e.RUNG8, None, 2.1, l04e.OCCUPANCY_SHAPES[1])
    recording = results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": [wide, narrow]})
    assert [line.split(None, 1)[1].split("  ")[0] for line in l04e.occupancy_table(recording, rungs=(
        l04e.RUNG8, l04e.RUNG8_64_KEYS)).splitlines()[1:3]] == [l04e.RUNG8, l04e.RUNG8_64_KEYS]
    assert len(l04e.occupancy_table(recording, rungs=(l04e.RUNG8,)).splitlines()) == 4   # header, one row, footer
    fewer = {**rows[0], "limit_shared_mem": 2, "limit_registers": 1}
    assert l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": [fewer]}
                                                  )).splitlines()[1].split()[2] == "1"   # ncu's tighter limit
    assert "--record" in l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}}))
    no_ncu = {**rows[0], "occupancy_pct": None, "issue_active_pct": None, "instructions": None}
    line = l04e.occupancy_table(results.Recording(None, {"provenance": {"gpu": "G"}, "occupancy": [no_ncu]}))
    assert line.splitlines()[1].split()[-3:] == ["-", "-", "-"]
    merged = results.merge({"occupancy": rows, "ceilings": {}}, {"provenance": {}, "occupancy": [row(l04e.RUNG7, 2, 1.4)]})
    assert sorted(r["ms"] for r in merged["occupancy"]) == [1.2, 1.4, 1.8]


def test_ncus_child_runs_this_module_by_its_importable_name(monkeypatch):
    """Each case's ncu run starts `python -m <module> --once ...`: the module's own name, not "__main__" (what
    __name__ is when the experiment runs as a program)."""
    import importlib.util
    from ladder import check, profile, timing
    programs = []
    monkeypatch.setattr(l04e, "OCCUPANCY_SHAPES", [(1, 2, 8, 64, 0)])
    monkeypatch.setattr(l04e, "_occupancy_call", lambda *args: lambda: None)
    monkeypatch.setattr(check, "compare", lambda *args: type("Compared", (), {"ok": True}))
    monkeypatch.setattr(l04e.at, "reference", lambda *args: None)
    monkeypatch.setattr(l04e, "_occupancy_inputs", lambda shape: ((torch.zeros(1),) * 3, False))
    monkeypatch.setattr(timing, "event_bench", lambda *args: [1.0])
    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(profile, "program_profile", lambda program, metrics: programs.append(program) or {})
    rows = l04e.measure_occupancy(rounds=1)
    assert programs and all(p[1:3] == ["-m", l04e.MODULE] and p[3] == "--once" for p in programs)
    assert len(rows) == len(l04e.occupancy_cases(64))
    assert l04e.MODULE == "ladder.lessons.l04e_attention_hopper" and importlib.util.find_spec(l04e.MODULE)


def test_a_failing_or_wrong_case_is_left_out_and_said_so(monkeypatch, capsys):
    """The experiment goes on past a case that raises or is wrong (it is named on stderr), and past an ncu failure
    (that case's counts None)."""
    from ladder import check, profile, timing
    cases = l04e.occupancy_cases(64)
    def call(label, blocks, key_tile, *rest):
        def run():
            if (label, blocks) == cases[1][:2]:
                raise RuntimeError("launch failed")
        return run
    monkeypatch.setattr(l04e, "OCCUPANCY_SHAPES", [(1, 2, 8, 64, 0)])
    monkeypatch.setattr(l04e, "_occupancy_call", call)
    outcomes = iter([True] * 2 + [False] + [True] * len(cases))   # the third case to be checked is wrong
    monkeypatch.setattr(check, "compare", lambda *args: type("Compared", (), {"ok": next(outcomes)}))
    monkeypatch.setattr(l04e.at, "reference", lambda *args: None)
    monkeypatch.setattr(l04e, "_occupancy_inputs", lambda shape: ((torch.zeros(1),) * 3, False))
    monkeypatch.setattr(timing, "event_bench", lambda *args: [1.0])
    monkeypatch.setattr(profile, "available", lambda: True)
    def counts(program, metrics):
        if program[4] == "cuda:8_warp_specialized":
            raise RuntimeError("ncu failed")
        return {"instructions": 1.0}
    monkeypatch.setattr(profile, "program_profile", counts)
    rows = l04e.measure_occupancy(rounds=1)
    err = capsys.readouterr().err
    assert len(rows) == len(cases) - 2 and "launch failed" in err and "wrong against the fp32 reference" in err
    assert "no ncu counts for cuda:8_warp_specialized" in err
    assert [r["instructions"] for r in rows if r["rung"] == "8_warp_specialized"] == [None]


def test_rung_7_asked_for_n_blocks_an_sm_fits_exactly_n(monkeypatch):
    """wgmma_tma(blocks_per_sm=N) asks for shared memory such that, with rung 7's static share as compiled here and
    the 1 KiB kept per block, N blocks fit an sm_90 SM and N + 1 do not (1: within the most a block may ask for)."""
    from types import SimpleNamespace
    from ladder import sass
    from ladder.runtime import cuda
    sm = l04e.SM90["shared_bytes"]
    asked = []
    monkeypatch.setattr(cuda_attention, "detect", lambda: SimpleNamespace(smem_per_block_bytes=sm - 1024))
    monkeypatch.setattr(cuda_attention, "_hopper_attention", lambda *args, least_shared: asked.append(least_shared))
    for d in (64, 128):
        tiles, rows, _ = cuda_attention.hopper_launch("7_wgmma_tma", d)
        static = sass.resource_usage(cuda.compile_cubin("attention/7_wgmma_tma.cu", "sm_90a",
                                                        tuple(sorted(dict(HEAD_DIM=d, **tiles).items()))))["shared_bytes"]
        assert static <= cuda_attention.RUNG7_STATIC_SHARED
        for n in l04e.OCCUPANCY_BLOCKS[d]:
            cuda_attention.wgmma_tma(None, None, None, False, blocks_per_sm=n)
            block = max(asked[-1], cuda_attention.wgmma_tma_shared_bytes(d, tiles, rows)) + static + 1024
            assert n * block <= sm < (n + 1) * block and block - 1024 <= sm - 1024
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="blocks_per_sm"):
            cuda_attention.wgmma_tma(None, None, None, False, blocks_per_sm=bad)


def test_rung_8_asked_for_narrower_key_tiles_changes_them_alone(monkeypatch):
    """warp_specialized(key_tile=64) launches rung 8 with HOPPER's stages, queries and threads at the shape's D and 64
    keys a tile; anything but 64 or 128 is answered with a clear error."""
    launched = []
    monkeypatch.setattr(cuda_attention, "_hopper_attention", lambda name, *args: launched.append((name, args[-1])))
    cuda_attention.warp_specialized(None, None, None, False, key_tile=64)
    name, launch_for = launched[-1]
    tiles, rows, threads = cuda_attention.hopper_launch("8_warp_specialized", 128)
    assert name == "8_warp_specialized" and tiles["BLOCK_N"] == 128
    assert launch_for((4, 32, 4096, 128, 0)) == (dict(tiles, BLOCK_N=64), rows, threads)
    cuda_attention.warp_specialized(None, None, None, False)
    assert launched[-1][1] is None
    for bad in (32, 96, 64.0):
        with pytest.raises(ValueError, match="key_tile"):
            cuda_attention.warp_specialized(None, None, None, False, key_tile=bad)


def test_each_occupancy_case_launches_its_rung_on_the_cases_tensors(monkeypatch):
    """_occupancy_call: rung 6 as searched, rung 7 with the blocks an SM asked for, rung 8 with the keys a tile asked
    for (D128), the later rungs and Triton's rung 7, on the same q, k, v and out."""
    launched = []
    monkeypatch.setattr(at, "cuda_autotuned", lambda *args: launched.append(("6", args, None)))
    monkeypatch.setattr(l04e.cuda_attention, "wgmma_tma", lambda *args, blocks_per_sm: launched.append(
        ("7", args, blocks_per_sm)))
    monkeypatch.setattr(l04e.cuda_attention, "RUNGS", {r: lambda *args, r=r: launched.append((r, args, None))
                                                       for r in ("8_warp_specialized", "9_pingpong", "10_intra_overlap")})
    monkeypatch.setattr(l04e.cuda_attention, "warp_specialized", lambda *args, key_tile: launched.append(
        ("8 narrow", args, key_tile)))
    monkeypatch.setattr(at, "triton_tma", lambda *args: launched.append(("triton 7", args, None)))
    inputs, causal = l04e._occupancy_inputs((1, 2, 8, 64, 1), "cpu")
    out = torch.empty_like(inputs[0])
    assert len(inputs) == 3 and causal is True
    for case in l04e.occupancy_cases(64) + l04e.occupancy_cases(128):
        l04e._occupancy_call(*case, inputs, causal, out)()
    assert [(r, b) for r, _, b in launched] == [("6", None), ("7", 3), ("7", 2), ("7", 1),
                                                ("8_warp_specialized", None), ("9_pingpong", None),
                                                ("10_intra_overlap", None), ("triton 7", None),
                                                ("6", None), ("7", 2), ("7", 1), ("8_warp_specialized", None),
                                                ("8 narrow", 64), ("9_pingpong", None), ("10_intra_overlap", None),
                                                ("triton 7", None)]
    assert all(args == (*inputs, causal, out) for _, args, _ in launched)


def test_show_cuda_rung_shows_each_hopper_rung_as_a_diff_of_whole_kernels(capsys, monkeypatch):
    """Rungs 7-15's files are generated whole (ladder/flatten.py): rung 7 is shown as its file, none of the later
    rungs' code in it; each later rung as the diff from the rung before, which is its idea's code alone."""
    monkeypatch.setattr(source, "_SHOWN_INCLUDES", set())   # as in a fresh notebook
    source.show_cuda_rung(HOPPER, 9)
    out = capsys.readouterr().out
    assert "+    if (group == LAST_GROUP) pass_turn(group);" in out and "+        wait_turn(group);" in out
    assert "setmaxnreg" not in out                 # rung 8's lines: not what rung 9 changes
    assert "wgmma_wait<1>" not in out and "INTRA_OVERLAP" not in out and "#if" not in out
    source.show_cuda_rung(HOPPER, 10)   # at most 40 lines of the diff, and the call that shows the rest
    cut = capsys.readouterr().out
    assert "+    for (int t = 1; t < tiles; ++t) {" in cut and "lines=None); the whole file: " in cut
    assert len(cut.split("\n// ...")[0].splitlines()) == 42   # the two file names and 40 lines
    source.show_cuda_rung(HOPPER, 10, lines=None)
    out = capsys.readouterr().out
    assert "+        wgmma_wait<1>();" in out
    assert "+        issue_pv(warp.acc, p, Vs + (t0 + t - 1) % STAGES * KV_TILE);" in out
    assert "-        warp.softmax(scores, scale_log2);  // scores become P; acc rescaled" in out   # rungs 7-9's loop
    assert "SHORT_PATH" not in out and "#if" not in out   # rung 14's switch: resolved, off
    monkeypatch.setattr(source, "_SHOWN_INCLUDES", set())   # rung 9 named the headers it includes: the lesson's first
    source.show_cuda_rung(HOPPER, 7)
    out = capsys.readouterr().out
    assert out.startswith("// kernels/cuda/attention/7_wgmma_tma.cu rewrites more of kernels/cuda/attention/6_autotuned.cu "
                          "than it keeps: its whole file, not a diff\n// kernels/cuda/attention/7_wgmma_tma.cu  (its ")
    assert "warp.softmax(scores, scale_log2);" in out and "wgmma_wait<1>" not in out
    assert "wait_turn" not in out and "item_keys" not in out and "setmaxnreg.inc" not in out   # later rungs' code
    assert "#if PINGPONG" not in out and "#ifndef SHORT_PATH" not in out and "// ..." not in out   # nothing folded
    # flash_mma.cuh: rung 4's header, shown in that lesson (04b), named here; tma.cuh: 02b's building blocks
    assert "includes kernels/cuda/attention/flash_mma.cuh (its declarations are shown with rung 4_tensor_core" in out
    assert "struct FlashWarp" not in out and "tma.cuh (lesson 02b's building blocks)" in out
    monkeypatch.setattr(source, "_SHOWN_INCLUDES", set())
    source.show_cuda_rung(at.PROBLEM.only("cuda").span("cuda", "3_fused", "6_autotuned"), 4)   # lesson 04b
    assert "struct FlashWarp { ... }" in capsys.readouterr().out
    source.show_cuda_rung(HOPPER, 8)
    out = capsys.readouterr().out
    assert "+        asm volatile(\"setmaxnreg.dec" in out and "+    asm volatile(\"setmaxnreg.inc" in out
    assert "-#define CONSUMERS 1 " in out and "+#define CONSUMERS 2" in out
    assert " #define BLOCK_M (64 * CONSUMERS)" in out   # context: rung 7's line, unchanged
    assert "wait_turn" not in out                  # rung 9's turns
    source.show_cuda_rung(HOPPER, 6)               # includes rung 5's file but defines nothing
    assert "the lines of" not in capsys.readouterr().out


def test_switched_on_keeps_whole_blocks_and_leaves_out_the_defaults():
    """On the overlays the Hopper rungs are generated from (kernels/cuda/attention/hopper_overlays/); in the
    generated files only the shared softmax's switch is left (flash_mma.cuh's FAST_EXP2, off before rung 11)."""
    family = "kernels/cuda/attention/hopper_overlays"
    rung7, rung9 = f"{family}/7_wgmma_tma.cu", f"{family}/9_pingpong.cu"
    later = {"PERSISTENT", "SHORT_PATH", "OP_LAYOUT"}   # rungs 13 and 14 (SHORT_PATH defined 0 first: off too), the op
    assert source.switched_off(rung9) == {"INTRA_OVERLAP", "FAST_EXP2"} | later   # FAST_EXP2: in flash_mma.cuh
    assert source.switched_off(rung7) == {"INTRA_OVERLAP", "PINGPONG", "FAST_EXP2"} | later
    assert source.switched_off(f"{family}/10_intra_overlap.cu") == {"FAST_EXP2"} | later
    assert source.switched_off(f"{family}/11_fast_exp2.cu") == later
    assert source.switched_off(f"{family}/13_persistent.cu") == {"SHORT_PATH", "OP_LAYOUT"}
    assert source.switched_off(f"{family}/14_critical_path.cu") == {"OP_LAYOUT"}
    assert source.switched_off("kernels/cuda/attention/9_pingpong.cu") == {"FAST_EXP2"}
    assert source.switched_off("kernels/cuda/attention/11_fast_exp2.cu") == set()
    lines = source.switched_on(rung7, {"PINGPONG"}, context=0, off={"INTRA_OVERLAP"})
    assert lines[0] == "#if PINGPONG" and lines.count("#if PINGPONG") == 3 and lines.count("#endif") == 4
    # without `off`, rung 10's #if INTRA_OVERLAP version reads PINGPONG too: six more blocks
    assert source.switched_on(rung7, {"PINGPONG"}, context=0).count("#if PINGPONG") == 9
    assert source.switched_on(rung7, set()) == []


def test_later_directives_are_a_later_rungs_negations_and_defaults_only():
    lines = ["#ifndef L", "#define L 0", "#endif", "a", "#if !L", "b", "#endif", "#if !M", "c", "#endif",
             "#if !L", "d", "#else", "e", "#endif"]
    assert source._later_directives(lines, {"L"}) == {0, 1, 2, 4, 6}   # not M's (on here), not an #if ! with #else


def test_compiled_lines_leave_out_the_versions_a_rung_does_not_compile():
    lines = ["a", "#if X", "x1", "x2", "#else", "y", "#endif", "#if Z", "z", "#endif", "#if N == 1", "n", "#endif"]
    assert source.compiled_lines(lines, {"X", "Z"}) == ["a", "y", "#if N == 1", "n", "#endif"]
    assert source.compiled_lines(lines, set()) == ["a", "#if X", "x1", "x2", "#endif", "#if Z", "z", "#endif",
                                                   "#if N == 1", "n", "#endif"]
    folded = source._folded(lines, {"X"}, "kernels/cuda/attention/7_wgmma_tma.cu")
    assert folded[:4] == ["a", "#if X", "// ... 2 lines of a later rung (X)", "#else"]
    assert source._folded(lines, {"Z"}, "kernels/cuda/attention/7_wgmma_tma.cu")[7:9] == [
        "// ... 1 line of a later rung (Z)", "#if N == 1"]   # no #else: the block folds whole


def test_lines_vs_speed_counts_code_and_reads_the_rows():
    own7, shared7, what7 = l04e.attention_kernel_lines("cuda:7_wgmma_tma")
    own9, shared9, what9 = l04e.attention_kernel_lines("cuda:9_pingpong")
    own10, shared10, what10 = l04e.attention_kernel_lines("cuda:10_intra_overlap")
    assert shared9 == shared7 == shared10 and own7 < own9 < own10
    assert what9 == "9_pingpong.cu; flash_mma.cuh + tensor_core.cuh + tma.cuh"
    assert what10.startswith("10_intra_overlap.cu;")
    # each counts the kernel it compiles, its generated file (rung 10's loop in rung 10's alone)
    for name, own in (("7_wgmma_tma", own7), ("10_intra_overlap", own10)):
        assert own == source.lines_of_code((source.ROOT / f"kernels/cuda/attention/{name}.cu").read_text(), "//")
    own, shared, what = l04e.attention_kernel_lines("triton:7_tma")
    assert 0 < own < source.lines_of_code(source.code(ta.flash_tma_kernel))   # its docstring left out
    assert what == "flash_tma_kernel; attend + key_passes"
    own8, shared8, what8 = l04e.attention_kernel_lines("triton:8_barrier_pass")   # rung 7's kernel and the pass
    assert (own8, shared8) == (own + source.python_file_code_lines(ptx.__file__), shared)
    assert what8 == "flash_tma_kernel + ladder/ptx.py; attend + key_passes"
    shape = at.HEADLINE[0]
    rows = [{"backend": "cuda", "rung": "7_wgmma_tma", "shape": list(shape), "ms": 2.0, "tflops": 100.0},
            {"backend": "torch", "rung": "sdpa", "shape": list(shape), "ms": 1.0, "tflops": 200.0}]
    text = l04e.attention_lines_vs_speed(rows, at.HEADLINE[:2], ["cuda:7_wgmma_tma", "triton:7_tma"])
    line7 = next(line for line in text.splitlines() if line.startswith("cuda:7_wgmma_tma "))
    assert "100.0 (0.50x)" in line7 and line7.split()[-1] == "-"
    assert next(line for line in text.splitlines() if line.startswith("torch:sdpa")).split()[1] == "200.0"


# ------------------------------------------------------------- lesson 04f: rung 11, the softmax's instructions

def test_softmax_instruction_table_counts_the_fix_up_rung_11_drops():
    """Per score a consumer thread owns: one MUFU.EX2 in both rungs; exp2f's FSETP and two FMULs in rung 10 only."""
    for D in (64, 128):
        mix = l04f.softmax_instruction_mix(head_dim=D)
        r10, r11 = mix["10_intra_overlap"], mix["11_fast_exp2"]
        assert 1 <= r10["MUFU.EX2"] == r11["MUFU.EX2"] < 1.1
        assert r10["FSETP"] >= 1 and r11["FSETP"] < 0.05
        assert r10["FMUL"] - r11["FMUL"] >= 2 and r10["kernel"] - r11["kernel"] >= 3 * 128
    text = l04f.softmax_instructions()
    assert len(text.splitlines()) == 6 and text.splitlines()[4].split()[:2] == ["11_fast_exp2", "128"]


def test_rung_11_shows_the_switch_it_flips_in_the_shared_softmax(capsys):
    source._SHOWN_INCLUDES.clear()
    source.show_cuda_rung(at.PROBLEM.only("cuda", "torch").span("cuda", "10_intra_overlap", "11_fast_exp2"), 11)
    out = capsys.readouterr().out
    assert "#define FAST_EXP2 1" in out and "flash_mma.cuh that read FAST_EXP2" in out
    assert 'asm("ex2.approx.ftz.f32 %0, %1;"' in out and "float exp2_softmax(float x)" in out
    assert "INTRA_OVERLAP" not in out            # rung 10's switch: shown with rung 10


def test_persistent_gain_reads_both_rungs_of_each_shape_and_skips_the_rest():
    runs = [{"backend": "cuda", "rung": "12_three_consumers", "shape": [4, 32, 1024, 64, 0], "ms": 0.11},
            {"backend": "cuda", "rung": "13_persistent", "shape": [4, 32, 1024, 64, 0], "ms": 0.10},
            {"backend": "cuda", "rung": "13_persistent", "shape": [4, 32, 2048, 64, 0], "ms": 0.30},
            {"backend": "torch", "rung": "sdpa", "shape": [4, 32, 1024, 64, 0], "ms": 0.09}]
    lines = l04f.persistent_gain(runs, [(4, 32, 1024, 64, 0), (4, 32, 2048, 64, 0)]).splitlines()
    assert len(lines) == 2   # the header, and S 1024 (S 2048 has no rung 12 time)
    assert lines[1].split()[-4:] == ["8", "0.1100", "0.1000", "1.100x"]   # 1024 keys in 128-key tiles


def test_show_diff_shows_at_most_40_lines_of_the_hunks_chosen_and_the_calls_for_the_rest(capsys):
    """Never the whole file under a diff's name: hunks=[2] shows hunk 2 alone, cut at 40 lines, then a line naming
    what was left out and the two calls that show it; lines=None shows every hunk chosen."""
    before, after = "kernels/cuda/matmul/4_tensor_core.cu", "kernels/cuda/matmul/5_pipelined.cu"
    source.show_diff(before, after)   # rung 5 rewrites more of rung 4 than it keeps: the file, and it says so
    assert capsys.readouterr().out.startswith(f"// {after} rewrites more of {before} than it keeps: its whole file")
    source.show_diff(before, after, hunks=2, lines=None)
    whole = capsys.readouterr().out.splitlines()
    starts = [i for i, line in enumerate(whole) if line.startswith("@@")]
    assert len(starts) == 2 and len(whole) - starts[1] > 40 and not whole[-1].startswith("// ...")
    source.show_diff(before, after, hunks=[2])
    shown = capsys.readouterr().out.splitlines()
    assert shown[:2] == whole[:2] and shown[2:42] == whole[starts[1]:starts[1] + 40] and len(shown) == 43
    assert shown[-1].startswith(f"// ... {len(whole) - 42} more lines of 2 hunks (hunk 2 after its first 40 lines; hunk 1)")
    assert f"show_diff({before!r}, {after!r}, lines=None)" in shown[-1] and f"show_source({after!r})" in shown[-1]




def test_instructions_and_bank_conflicts_are_counted_per_warp_wide_fma_of_the_products():
    import kernels.attention as at
    from ladder.lessons import l04_attention
    shape = (4, 32, 4096, 64, 0)
    warp_fmas = at.PROBLEM.flops(shape) / 2 / 32
    profiles = [{"backend": "triton", "rung": "1_naive", "shape": list(shape),
                 "metrics": {"instructions": 315 * warp_fmas, "shared_bank_conflicts": 0.5 * warp_fmas}},
                {"backend": "cuda", "rung": "1_naive", "shape": list(shape), "metrics": {}}]
    text = l04_attention.instructions_per_fma(profiles, ["triton:1_naive", "cuda:1_naive"], at.PROBLEM)
    assert text.endswith("315 per warp-wide FMA: at one instruction a cycle, 0.32% of the fp32 peak")
    assert "cuda:1_naive" not in text   # a profile without the counter prints no line
    assert l04_attention.bank_conflicts_per_fma(profiles, ["triton:1_naive"], at.PROBLEM).endswith(
        "0.500 per warp-wide FMA")
