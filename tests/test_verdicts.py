"""The prediction tables (kernels/predictions/*.toml) and the verdicts computed from them (ladder.verdicts)."""
from __future__ import annotations

import math
import re

import pytest

from ladder import problems, results, verdicts
from ladder.roofline import datasheet_gpu

LADDERS = [("vector_add", ("cuda", "triton")), ("matmul", "cuda"), ("matmul", "triton"),
           ("attention", "cuda"), ("attention", "triton")]
ALL = [p for _, preds in verdicts.tables().values() for p in preds]


def _rungs(problem: str, backend) -> list:
    return [r for r in problems.get(problem).rungs if r.backend in verdicts._backends(backend)]


@pytest.mark.parametrize("problem,backend", LADDERS)
def test_every_rung_has_a_prediction(problem, backend):
    predicted = {p.rung for p in verdicts.predictions(problem, backend)}
    missing = [r.label for r in _rungs(problem, backend) if r.label not in predicted]
    assert not missing, f"no prediction for {missing} in kernels/predictions/"


def test_every_prediction_is_of_a_rung_that_exists():
    for header, preds in verdicts.tables().values():
        labels = {r.label for r in problems.get(header["problem"]).rungs}
        for p in preds:
            assert p.rung in labels, f"{p.source}: no rung {p.rung}"
            assert p.over is None or p.over in labels, f"{p.source}: {p.rung} over an unknown rung {p.over}"
            assert p.anchor is None or p.anchor in labels, f"{p.source}: unknown anchor {p.anchor}"


@pytest.mark.parametrize("p", ALL, ids=lambda p: f"{p.rung}:{p.quantity}")
def test_bands_are_sane(p):
    assert p.quantity in verdicts.QUANTITIES
    assert {"speedup": p.over, "pct_roof": p.roof, "pct_anchor": p.anchor}[p.quantity], "what it is measured against"
    assert p.roof is None or p.roof in verdicts.ROOF_NAMES
    for lo, hi in [p.band, *p.at.values()]:
        assert 0 < lo < hi, (lo, hi)
        if p.quantity == "speedup":
            assert hi / lo <= 3.5, f"a speed-up band {lo}-{hi} is wider than ~3x: it cannot fail"
    lo, hi = p.hit
    assert lo <= p.band[0] and hi >= p.band[1] and lo > 0, "the hit range holds the band"
    if p.quantity == "speedup":
        assert p.over != p.rung
        for lo, hi in [p.band, p.hit, *p.at.values()]:   # kernels/predictions/README.md: the rules a band follows
            assert not 1 <= lo < verdicts.GAIN_FLOOR, f"a gain band from {lo} counts no change as a hit"
    assert p.basis, "each band says the model it comes from"


def test_a_band_around_one_says_break_even_and_one_under_it_a_loss():
    p = verdicts.Prediction("cuda:2_x", "speedup", (0.98, 1.05), (0.98, 1.05), "b", over="cuda:1_x")
    assert p.describe().endswith("(break-even expected)")
    assert verdicts.Prediction("cuda:2_x", "speedup", (1.02, 1.1), (1.02, 1.1), over="cuda:1_x").describe() == \
        "1.02-1.1x over 1_x"
    lossy = verdicts.Prediction("cuda:2_x", "speedup", (1.02, 1.1), (1.02, 1.1), over="cuda:1_x", at={"D64": (0.85, 1.0)})
    assert lossy.describe("D64") == "0.85-1x over 1_x (a loss expected)"


def _prediction_text(path) -> str:
    """The '// Prediction:' paragraph of a kernel file's header, on one line."""
    text = path.read_text()
    m = re.search(r"^// Prediction:(.*?)(?=^// [A-Z][A-Za-z ]*:|^(?!//))", text, re.S | re.M)
    assert m, f"{path}: no '// Prediction:' in the header"
    return " ".join(line.lstrip("/ ").strip() for line in m.group(1).splitlines())


def _quoted(text: str) -> set[tuple[float, float]]:
    """The ranges a header's prediction states, 'a-bx' or 'a-b%' (a ratio 'a-bx' also as a % of an anchor)."""
    found = set()
    for lo, hi, unit in re.findall(r"(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)(x|%)", text):
        found.add((float(lo), float(hi)))
        if unit == "x":
            found.add((round(100 * float(lo), 6), round(100 * float(hi), 6)))
    return found


@pytest.mark.parametrize("p", [p for p in ALL if p.backend == "cuda"], ids=lambda p: f"{p.rung}:{p.quantity}")
def test_kernel_headers_quote_the_tables_band(p):
    """The CUDA kernels' headers state the band of the table, the single source (Triton rungs share one
    file, whose docstring makes no numeric prediction)."""
    rung = problems.get(_problem_of(p)).rung(p.backend, p.name)
    text = _prediction_text(verdicts.ROOT / rung.source)
    for band in [p.band, *p.at.values()]:
        assert band in _quoted(text), f"{rung.source} header does not quote {band[0]:g}-{band[1]:g}: {text}"


def _problem_of(p) -> str:
    return next(h["problem"] for h, preds in verdicts.tables().values() if p in preds)


def test_no_header_quotes_a_band_the_table_lacks():
    """A range 'a-bx' or 'a-b%' in a CUDA header's prediction is one of the table's bands of that ladder
    (a header may quote the next rung's, as rung 1's does for rung 2)."""
    for problem in ("vector_add", "matmul", "attention"):
        bands = {b for p in verdicts.predictions(problem, "cuda") for b in [p.band, *p.at.values()]}
        for rung in _rungs(problem, "cuda"):
            text = _prediction_text(verdicts.ROOT / rung.source)
            stated = {(float(a), float(b)) for a, b, _ in re.findall(r"(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)(x|%)", text)}
            unknown = {q for q in stated if q not in bands and (round(100 * q[0], 6), round(100 * q[1], 6)) not in bands}
            assert not unknown, f"{rung.source}: {unknown} not in the table ({sorted(bands)})"


@pytest.mark.parametrize("problem,backend", LADDERS)
def test_verdicts_over_the_recording_at_every_headline_shape(problem, backend):
    """Every rung the recording has timed gets a hit or a miss at every headline shape (a rung newer than the
    recording: 'not measured')."""
    rec = results.load()
    found = verdicts.verdicts(problem, backend, rec.runs(problem), recording=rec)
    shapes = {tuple(s) for s in problems.get(problem).bench_shapes}
    recorded = {f"{r['backend']}:{r['rung']}" for r in rec.runs(problem)}
    for p in verdicts.predictions(problem, backend):
        mine = [v for v in found if v.prediction == p]
        assert {v.shape for v in mine} == shapes
        if p.rung not in recorded:
            assert {v.outcome for v in mine} == {"not measured"}
            continue
        for v in mine:
            assert v.outcome in ("hit", "miss") and v.value is not None and math.isfinite(v.value), (p.rung, v.label, v.outcome)
    text = verdicts.format_verdicts(found, "title")
    assert len(text.splitlines()) <= 60
    assert "hits" in text.splitlines()[-1] or "hits" in text


def test_the_attention_shapes_are_d64_d128_causal_or_not():
    labels = [verdicts.shape_label("attention", s) for s in verdicts.headline_shapes("attention")]
    assert sorted(labels) == sorted(["D64", "D64 causal", "D128", "D128 causal"])


def _invented(rows, shape, p) -> list[dict]:
    """Rows for a rung the recording lacks: a copy of the row of the rung (or anchor) it is measured against, and
    that rung's own row, copied from the library's (cuBLAS, SDPA), where it is newer than the recording too."""
    def row(label):
        return next((r for r in rows if f"{r['backend']}:{r['rung']}" == label and tuple(r["shape"]) == tuple(shape)),
                    None)

    def renamed(r, label):
        backend, name = label.split(":", 1)
        return {**r, "backend": backend, "rung": name}

    against = p.over or p.anchor or "torch:cublas"
    base = row(against)
    anchor = row("torch:cublas") or row("torch:sdpa")   # the problem's library row: matmul's or attention's
    invented = [] if base else [renamed(anchor, against)]
    return invented + [renamed(base or invented[0], p.rung)]


def _fabricated(rows, label, shape, factor):
    """`rows` with `label`'s row at `shape` made `factor` times faster."""
    out = []
    for r in rows:
        if f"{r['backend']}:{r['rung']}" == label and tuple(r["shape"]) == tuple(shape):
            r = {**r, "ms": r["ms"] / factor, "tflops": r["tflops"] * factor, "tbps": r["tbps"] * factor}
        out.append(r)
    return out


@pytest.mark.parametrize("p", ALL, ids=lambda p: f"{p.rung}:{p.quantity}")
def test_a_row_outside_the_band_is_a_miss(p):
    problem = _problem_of(p)
    rec = results.load()
    rows = rec.runs(problem)
    shape = verdicts.headline_shapes(problem)[0]
    label = verdicts.shape_label(problem, shape)
    if verdicts.judge(p, shape, rows, problem, recording=rec).value is None:  # newer than the recording:
        rows = rows + _invented(rows, shape, p)                                  # give it a row
    v = verdicts.judge(p, shape, rows, problem, recording=rec)
    lo, hi = p.hit_at(label)
    # a rung far above its hit range (when it has a top), and far below it
    if math.isfinite(hi):
        up = verdicts.judge(p, shape, _fabricated(rows, p.rung, shape, 2 * hi / v.value), problem, recording=rec)
        assert up.outcome == "miss" and up.direction == "above", up.text()
    down = verdicts.judge(p, shape, _fabricated(rows, p.rung, shape, 0.5 * lo / v.value), problem, recording=rec)
    assert down.outcome == "miss" and down.direction == "below", down.text()
    inside = verdicts.judge(p, shape, _fabricated(rows, p.rung, shape, (lo + min(hi, 2 * lo)) / 2 / v.value),
                            problem, recording=rec)
    assert inside.outcome == "hit", inside.text()


def test_live_rows_use_the_ceilings_and_anchors_given():
    """A live run's rows carry no 'recorded' date: the roof is the ceilings passed, the anchor the row beside it."""
    rec = results.load()
    live = [{k: v for k, v in r.items() if k != "recorded"} for r in rec.runs("matmul")]
    p = next(p for p in verdicts.predictions("matmul", "triton") if p.quantity == "pct_anchor")
    v = verdicts.judge(p, (4096, 4096, 4096), live, "matmul")
    mine, ref = (next(r for r in live if f"{r['backend']}:{r['rung']}" == x and r["shape"] == [4096] * 3)
                 for x in (p.rung, p.anchor))
    assert v.value == pytest.approx(100 * mine["tflops"] / ref["tflops"])
    roof = next(p for p in verdicts.predictions("matmul", "cuda") if p.quantity == "pct_roof")
    assert verdicts.judge(roof, (4096,) * 3, live, "matmul").outcome == "no ceilings"
    v = verdicts.judge(roof, (4096,) * 3, live, "matmul", ceilings={"fp32_TFLOPs": 50.0})
    assert v.value == pytest.approx(100 * _row(live, roof.rung)["tflops"] / 50.0)


def _row(rows, label):
    return next(r for r in rows if f"{r['backend']}:{r['rung']}" == label and r["shape"] == [4096] * 3)


def test_a_missing_rung_is_not_measured_not_a_miss():
    p = verdicts.predictions("matmul", "cuda")[1]
    v = verdicts.judge(p, (4096,) * 3, [], "matmul")
    assert v.value is None and v.outcome == "not measured"


def test_the_ladder_walk_over_the_recording(capsys):
    ladder = verdicts.Ladder("matmul", "cuda")
    ladder.measure("2_coalesced")
    ladder.prediction("2_coalesced")
    ladder.verdict("2_coalesced")
    out = capsys.readouterr().out
    assert "4096³" in out and "8192³" in out and "x over 1_naive" in out and "hit" in out


def test_a_live_ladder_times_the_anchor_before_the_first_verdict_that_needs_it(monkeypatch, capsys):
    """On a GPU a rung's '% of cuBLAS' verdict comes before the lesson times cuBLAS: the ladder times it then,
    once, and the lesson's later measure of cuBLAS shows those rows instead of timing it again."""
    from ladder import runner
    timed = []

    def time_rung(problem, rung, shape):
        timed.append(rung.label)
        ms = 1.0 if rung.label == "torch:cublas" else 1.1
        return {"problem": problem.name, "backend": rung.backend, "rung": rung.name, "shape": list(shape), "ms": ms,
                "ms_p20": ms, "ms_p80": ms, "tflops": problem.flops(shape) / ms / 1e9, "tbps": 1.0, "correct": True}

    monkeypatch.setattr(runner, "time_rung", time_rung)
    monkeypatch.setattr(runner, "unavailable", lambda rung: None)
    live = object.__new__(verdicts.Ladder)  # a live ladder without measuring this machine's ceilings
    live.problem, live.backends, live.live = problems.get("matmul"), ("cuda",), True
    live.shapes, live.rows, live._anchors_timed = [(4096,) * 3], [], set()
    live.ceilings = live.roofs = {"fp16_tc_TFLOPs": 900.0, "fp32_TFLOPs": 60.0}
    live.gpu, live.label = datasheet_gpu("H100 SXM"), "live on a test double"
    live.measure("8_tma_warp_specialized")
    live.verdict("8_tma_warp_specialized")
    assert "in its run" not in capsys.readouterr().out
    assert timed == ["cuda:8_tma_warp_specialized", "torch:cublas"]
    live.measure("torch:cublas")
    live.verdict("8_tma_warp_specialized")
    out = capsys.readouterr().out
    assert timed == ["cuda:8_tma_warp_specialized", "torch:cublas"] and "90.9% hit" in out


def test_counters_name_the_gpu_and_shape_their_profiles_were_recorded_on():
    rec = results.load()
    text = verdicts.counters("matmul", ["cuda:7_wgmma"], ["DRAM GB"], rec)
    assert text.endswith(f"(ncu at 4096³, recorded on {rec.gpu})")
    assert "not profiled" in verdicts.counters("matmul", ["cuda:no_such_rung"], ["DRAM GB"], rec)


def test_counters_a_profile_predates_show_a_dash_not_zero():
    rec = results.Recording(None, {"provenance": {"gpu": "H100", "date": "2026-11-27T00:00"}, "profiles": [
        {"problem": "attention", "backend": "cuda", "rung": r, "shape": [4, 32, 4096, 64, 0], "recorded": "2026-11-27",
         "metrics": m} for r, m in (("10_intra_overlap", {"tensor_pipe_pct": 43.0}),
                                    ("11_fast_exp2", {"tensor_pipe_pct": 48.0, "instructions": 2.5e9,
                                                      "xu_pipe_pct": 61.0}))]})
    lines = verdicts.counters("attention", ["cuda:10_intra_overlap", "cuda:11_fast_exp2"],
                              ["tensor pipe %", "instr. (G)", "MUFU pipe %"], rec).splitlines()
    assert lines[1].split()[1:] == ["43", "-", "-"] and lines[2].split()[1:] == ["48", "2.5", "61"]


def test_kernel_times_split_a_rung_into_its_kernels_and_say_which_are_not_profiled():
    rec = results.Recording(None, {"provenance": {"gpu": "H100", "date": "2026-11-26T00:00"}, "profiles": [
        {"problem": "attention_backward", "backend": "triton", "rung": "4_autotuned", "shape": [4, 32, 4096, 64, 0],
         "recorded": "2026-11-26", "metrics": {"kernels": ["pre", "dkdv", "dq"], "kernel_ns": [1e4, 6e5, 3.9e5]}}]})
    text = verdicts.kernel_times("attention_backward", ["triton:4_autotuned", "torch:sdpa"], rec)
    assert "triton:4_autotuned: 1000 µs in 3 kernels" in text
    assert "dkdv" in text and " 600 µs   60%" in text and "torch:sdpa: not profiled" in text
    assert text.endswith("recorded on H100: each kernel run once, clocks as found)")


def test_counters_at_another_shape_read_that_shapes_profiles_and_a_merge_keeps_each_shape():
    """`record --every-shape` keeps one profile a rung at the profiled shape ("profiles") and the others apart
    ("shape_profiles"): counters(shape=...) reads those, and a later recording at one shape leaves the rest."""
    def row(shape, pct, date):
        return {"problem": "attention", "backend": "cuda", "rung": "7_wgmma_tma", "shape": list(shape),
                "recorded": date, "metrics": {"tensor_pipe_pct": pct}}
    d64, d128, d128c = (4, 32, 4096, 64, 0), (4, 32, 4096, 128, 0), (4, 32, 4096, 128, 1)
    old = {"provenance": {"gpu": "H100", "date": "2026-11-25T00:00"}, "ceilings": {}, "runs": [],
           "profiles": [row(d64, 40.0, "2026-11-25")],
           "shape_profiles": [row(d128, 50.0, "2026-11-25"), row(d128c, 45.0, "2026-11-25")]}
    new = {"provenance": {"gpu": "H100", "date": "2026-11-26T00:00"}, "runs": [],
           "shape_profiles": [row(d128, 55.0, "2026-11-26")]}
    rec = results.Recording(None, results.merge(old, new))
    at_d128 = verdicts.counters("attention", ["cuda:7_wgmma_tma"], ["tensor pipe %"], rec, shape=d128)
    assert "55" in at_d128 and "ncu at D128," in at_d128 and at_d128.endswith("recorded on H100)")
    assert "45" in verdicts.counters("attention", ["cuda:7_wgmma_tma"], ["tensor pipe %"], rec, shape=d128c)
    assert "40" in verdicts.counters("attention", ["cuda:7_wgmma_tma"], ["tensor pipe %"], rec)
    assert "not profiled" in verdicts.counters("attention", ["cuda:7_wgmma_tma"], ["tensor pipe %"], rec,
                                               shape=(4, 32, 4096, 64, 1))


def test_a_narrowed_ladder_is_judged_on_its_own_rungs():
    """A lesson's span of the ladder (04e: CUDA rungs 6-9) shows no line for a rung outside it, nor for a speed-up
    measured over one (rung 6 over rung 5); the whole problem keeps every prediction."""
    import kernels.attention as at
    rec = results.load()
    narrowed = at.PROBLEM.only("cuda", "torch").span("cuda", "6_autotuned", "9_pingpong")
    found = verdicts.verdicts(narrowed, "cuda", rec.runs("attention"), recording=rec)
    rungs = {(v.prediction.rung, v.prediction.over) for v in found}
    assert {r for r, _ in rungs} == {"cuda:6_autotuned", "cuda:7_wgmma_tma", "cuda:8_warp_specialized", "cuda:9_pingpong"}
    assert ("cuda:6_autotuned", "cuda:5_pipelined") not in rungs
    everything = verdicts.verdicts("attention", "cuda", rec.runs("attention"), recording=rec)
    assert {v.prediction.rung for v in everything} >= {"cuda:1_naive", "cuda:5_pipelined"}


def test_a_value_that_rounds_onto_a_band_edge_prints_the_digit_that_decides():
    """1.0187x against a band from 1.02 is a miss; printed as "1.02x miss" it would read as a hit: one more digit."""
    p = verdicts.Prediction("cuda:2_x", "speedup", (1.02, 1.1), (1.02, 1.1), over="cuda:1_x")
    assert verdicts.Verdict(p, (1,), "4096³", 1.0187, "miss").text() == "1.019x miss ↓"
    assert verdicts.Verdict(p, (1,), "4096³", 1.05, "hit").text() == "1.05x hit"


def test_one_rung_across_shapes_reads_each_shapes_warp_states_and_counters_and_names_a_missing_one():
    d64, d128 = (4, 32, 4096, 64, 0), (4, 32, 4096, 128, 0)
    states = dict(duration_ns=2e6, issue_active_pct=40.0, cycles_per_issue=8.0, stall_long_scoreboard=3.0,
                  stall_wait=1.0, occupancy_pct=25.0, occupancy_theoretical_pct=25.0, registers_per_thread=128)
    rows = lambda shape, scale: {"problem": "attention", "backend": "triton", "rung": "3_fused", "shape": list(shape),
                                 "recorded": "2026-12-04",
                                 "metrics": {**states, "stall_long_scoreboard": 3.0 * scale, "l2_bytes": 1e9 * scale}}
    rec = results.Recording(None, {"provenance": {"gpu": "H200", "date": "2026-12-04T00:00"},
                                   "profiles": [rows(d64, 1)], "shape_profiles": [rows(d128, 10)],
                                   "warp_states": [rows(d64, 1), rows(d128, 10)]})
    lines = verdicts.across_shapes("attention", "triton:3_fused", ["L2 GB"], rec, also=("long_scoreboard",)).splitlines()
    assert lines[0] == "triton:3_fused at each shape (ncu, recorded on H200)"
    assert lines[2].split()[:4] == ["D64", "2.00", "40%", "8.0"] and lines[2].split()[-5:] == ["3", "25%/", "25%", "128", "1"]
    assert lines[4].startswith("D128 ") and lines[4].split()[-5:] == ["30", "25%/", "25%", "128", "10"]
    assert lines[3] == "D64 causal   not profiled" and lines[5] == "D128 causal  not profiled"
