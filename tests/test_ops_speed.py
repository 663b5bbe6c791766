"""ladder.ops_speed: on a CPU it says it needs a GPU in one line; its table shows a wrong result as wrong, untimed;
its rows merge into a recording by op, case and install."""
from ladder import ops_speed, results, results_page

ROW = {"op": "matmul", "case": "4096³", "shape": [4096] * 3, "kernel": "torch:cublas", "anchor": "torch.matmul",
       "correct": True, "rel_error": 2e-4, "first_call_s": 3.2, "rounds": 5, "install": "fresh", "ms": 0.2,
       "anchor_ms": 0.21, "ratio": 1.05, "ratio_min": 1.01, "ratio_max": 1.08}


def test_on_a_cpu_it_answers_in_one_line(capsys):
    assert ops_speed.main([]) == 2
    assert "ladder.ops_speed (it times the ops on a GPU) needs a CUDA GPU" in capsys.readouterr().err


def test_a_wrong_result_is_shown_wrong_and_not_timed():
    wrong = {k: v for k, v in ROW.items() if k not in ("ms", "anchor_ms", "ratio", "ratio_min", "ratio_max")}
    lines = ops_speed.table([ROW, {**wrong, "correct": False, "rel_error": 0.5}]).splitlines()
    assert "1.050x 1.010-1.080" in lines[1] and "WRONG: rel. error 5.0e-01, not timed" in lines[2]


def test_rows_merge_by_op_case_and_install_and_show_on_the_results_page():
    old = {"provenance": {"gpu": "GPU"}, "ceilings": {}, "ops_speed": [ROW, {**ROW, "install": "tuned"}]}
    new = {"provenance": {"gpu": "GPU"}, "ops_speed": [{**ROW, "ratio": 0.9}]}
    merged = results.merge(old, new)["ops_speed"]
    assert sorted((r["install"], r["ratio"]) for r in merged) == [("fresh", 0.9), ("tuned", 1.05)]
    text = results_page.ops_speed_section(results.Recording(None, {"ops_speed": merged}))
    assert "A fresh install:" in text and "A tuned install:" in text and "0.900x" in text


def test_a_case_is_checked_then_timed_in_rounds_and_a_wrong_one_is_not_timed(monkeypatch, capsys):
    import torch
    from ladder.timing import Timing
    times = iter([1.0, 2.0, 1.0, 3.0])   # ours, anchor, ours, anchor
    monkeypatch.setattr(ops_speed, "bench", lambda fn, *a, **k: (fn(), Timing(next(times), 0, 0))[1])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    x = torch.randn(8, 8)
    case = {"op": "matmul", "case": "8³", "shape": [8] * 3, "run": lambda: x @ x, "anchor": lambda: x @ x,
            "want": lambda: x.double() @ x.double(), "kernel": lambda: "k", "anchor_name": "torch.matmul"}
    row = ops_speed.measure_case(case, rounds=2)
    assert row["correct"] and (row["ratio"], row["ratio_min"], row["ratio_max"]) == (2.5, 2.0, 3.0)
    wrong = ops_speed.measure_case({**case, "run": lambda: x @ x + 1}, rounds=2)
    assert not wrong["correct"] and "ms" not in wrong
    right_line, wrong_line = capsys.readouterr().err.splitlines()   # a line per case as it finishes
    assert right_line.startswith("matmul 8³: 2.500x (min 2.000, max 3.000) torch.matmul, kernel k, first call")
    assert wrong_line.startswith("matmul 8³: WRONG (rel. error")


def test_add_rows_merges_one_kind_into_this_gpus_recording_and_needs_one(tmp_path, monkeypatch):
    import json
    import types
    import pytest
    gpu = types.SimpleNamespace(name="GPU", slug="gpu", arch="sm_90")
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    with pytest.raises(SystemExit, match="needs an earlier recording"):
        results.add_rows(gpu, "ops_speed", [ROW])
    (tmp_path / "gpu.json").write_text(json.dumps({"provenance": {"gpu": "GPU", "date": "then"}, "ceilings": {},
                                                   "ops_speed": [{**ROW, "install": "tuned"}]}))
    saved = json.loads(results.add_rows(gpu, "ops_speed", [ROW]).read_text())
    assert sorted(r["install"] for r in saved["ops_speed"]) == ["fresh", "tuned"]


def test_the_training_case_returns_the_three_gradients_each_checked():
    import torch
    from ladder import check
    case = ops_speed._training_case("linear + GELU", 37, 45, 29, gen=torch.Generator().manual_seed(0), device="cpu")
    got, want = case["run"](), case["want"]()
    assert [g.shape for g in got] == [(37, 29), (45, 29), (45,)]
    assert all(check.compare(g, w).ok for g, w in zip(got, want))
    assert all(check.compare(g, w).ok for g, w in zip(case["anchor"](), want))
    # each of its three matmuls named: in the interpreter, rung 6 by the op's rule
    assert case["kernel"]() == "triton:6_autotuned; backward triton:6_autotuned, triton:6_autotuned"


def test_the_attention_training_case_returns_the_three_gradients_each_checked():
    """Forward and backward on a model's views (the interpreter's rung 6 and its backward at a ragged shape): dQ, dK,
    dV of the op and of SDPA, each within fp16's tolerance of fp32 SDPA's; the kernels named."""
    import torch
    from ladder import check
    case = ops_speed._attention_training_case((1, 2, 33, 64, 1), torch.Generator().manual_seed(0), device="cpu")
    got, want = case["run"](), case["want"]()
    assert [g.shape for g in got] == [(1, 2, 33, 64)] * 3
    assert all(check.compare(g, w).ok for g, w in zip(got, want))
    assert all(check.compare(g, w).ok for g, w in zip(case["anchor"](), want))
    assert case["kernel"]() == "triton:6_autotuned; backward rung 2"


def test_the_grid_is_the_dispatch_tables_27_shapes_with_b_row_major():
    from ladder import dispatch
    cases = ops_speed.grid_cases()
    assert [tuple(c[1:4]) for c in cases] == dispatch.GRID and len(cases) == 27
    assert {(c[4], c[5]) for c in cases} == {("row", None)}
    assert len({c[0] for c in cases}) == 27


def test_a_matmul_row_names_the_kernel_an_eager_call_runs(monkeypatch):
    import types
    import torch
    from ladder import ops
    monkeypatch.setattr(ops, "matmul_choice", lambda *a, **k: types.SimpleNamespace(kernel="compiled", eager="eager"))
    case = ops_speed._matmul_case("8³", 8, 8, 8, "row", None, gen=torch.Generator().manual_seed(0), device="cpu")
    assert case["kernel"]() == "eager"
