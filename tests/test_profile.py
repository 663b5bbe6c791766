"""ladder.profile reads ncu's raw CSV page: one ncu run gives both a rung's summed counters and its main kernel's
warp states, the same as two runs would."""
import subprocess

from ladder import profile


def _fake_ncu(program, metrics):
    metrics = list(metrics)
    kernels = [("small", 1000.0), ("big", 3000.0)]
    head = ",".join(f'"{c}"' for c in ["ID", "Kernel Name", *metrics])
    units = ",".join('""' for _ in range(2 + len(metrics)))
    rows = []
    for i, (name, ns) in enumerate(kernels):
        values = [ns if m == profile.METRICS["duration_ns"] else (50.0 + i if "pct" in m else 10.0 * (i + 1) + len(m))
                  for m in metrics]
        rows.append(",".join(f'"{v}"' for v in [i, name, *values]))
    return subprocess.CompletedProcess([], 0, "\n".join(["==PROF== done", head, units, *rows]), "")


def test_one_ncu_run_gives_the_profile_and_the_warp_states_of_two(monkeypatch):
    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(profile, "_ncu", _fake_ncu)
    job = ("matmul", "cuda", "6_autotuned", (64, 64, 64))
    both = profile.profile_and_warp_states(*job)
    assert both == (profile.profile(*job), profile.warp_states(*job))
    counters, states = both
    assert counters["kernel_ns"] == [1000.0, 3000.0]
    assert counters["tensor_pipe_pct"] == (50.0 * 1000 + 51.0 * 3000) / 4000   # weighted by each kernel's time
    assert states["kernel"] == "big" and states["time_share"] == 0.75
    program = profile.run_once_command(*job)
    assert program[1:] == ["-m", "ladder", "run-once", "matmul", "cuda", "6_autotuned", "64", "64", "64"]
    assert profile.program_profile(program, profile.METRICS) == counters


def test_issue_records_each_rungs_counts_from_one_ncu_run_and_a_lesson_prints_them(monkeypatch, capsys, tmp_path):
    """`python -m ladder issue` sums each rung's instructions and time over its kernels, weights the issue rate and
    occupancy by each kernel's time, records a row per rung and shape (a re-run replaces its own), and
    verdicts.issue_counts prints the recorded rows, or says which rungs it lacks and the command that records them."""
    from ladder import cli, results, verdicts
    from ladder.runtime import hardware
    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(profile, "_ncu", _fake_ncu)
    monkeypatch.setattr(cli, "require_gpu", lambda what: None)
    added = []
    monkeypatch.setattr(results, "add_rows", lambda gpu, kind, rows: added.append((kind, rows)) or "saved")
    monkeypatch.setattr(hardware, "require_real", lambda what: None)
    monkeypatch.setattr(hardware, "detect", lambda: type("GPU", (), {"name": "G"}))
    cli.main(["issue", "matmul", "64", "64", "64", "--rungs", "triton:3_tiled", "cuda:3b_register_blocked", "--record"])
    kind, rows = added[0]
    assert kind == "issue" and [r["rung"] for r in rows] == ["3_tiled", "3b_register_blocked"]
    instructions = profile.METRICS["instructions"]
    assert rows[0]["instructions"] == (10.0 + len(instructions)) + (20.0 + len(instructions))
    assert rows[0]["issue_active_pct"] == (50.0 * 1000 + 51.0 * 3000) / 4000 and rows[0]["duration_ns"] == 4000.0
    assert "kernels" not in rows[0] and rows[0]["shape"] == [64, 64, 64]
    printed = capsys.readouterr().out
    assert "triton:3_tiled" in printed and "0.004" in printed   # ncu ms: 4000 ns
    again = [dict(rows[0], instructions=1.0)]
    merged = results.merge({"issue": rows, "ceilings": {}}, {"provenance": {}, "issue": again})
    assert sorted(r["instructions"] for r in merged["issue"]) == sorted([1.0, rows[1]["instructions"]])
    rec = results.Recording(None, {"provenance": {"gpu": "G"}, "issue": rows})
    table = verdicts.issue_counts("matmul", ["cuda:3b_register_blocked", "triton:3_tiled"], (64, 64, 64), rec)
    assert [line.split()[0] for line in table.splitlines()[1:3]] == ["cuda:3b_register_blocked", "triton:3_tiled"]
    lacking = verdicts.issue_counts("matmul", ["triton:4_tensor_core"], (64, 64, 64), rec)
    assert "triton:4_tensor_core: no instruction counts" in lacking and "ladder issue matmul 64 64 64" in lacking


def test_issue_names_a_rung_given_without_its_backend(capsys):
    from ladder import cli
    assert cli.main(["issue", "matmul", "64", "64", "64", "--rungs", "3_tiled"]) == 2
    assert "backend:rung" in capsys.readouterr().err


def test_issue_table_prints_a_dash_where_ncu_gave_no_count():
    row = {"backend": "cuda", "rung": "4_tensor_core", "duration_ns": 2e6, "instructions": None,
           "issue_active_pct": 40.0, "occupancy_pct": None}
    line = profile.issue_table([row], "G").splitlines()[1].split()
    assert line[:3] == ["cuda:4_tensor_core", "2.000", "-"] and line[3] == "40.0%"
