"""Predictions and computed verdicts: one machine-readable table per ladder, hit or miss at every headline shape.

The tables are `kernels/predictions/<ladder>.toml` (see the README there): per rung, what is predicted (a
speed-up over an earlier rung, a % of a measured roof, or a % of the library anchor timed in the same run),
the band, and what counts as a hit. `verdicts(problem, backend, rows)` judges rows (the recording's, or a
live run's) at every headline shape (the problem's bench shapes); `format_verdicts` prints them compactly.

`Ladder` walks a ladder rung by rung as a lesson does: `measure(rung)` times it live on a GPU (or takes the
recording's rows without one) and prints one line per headline shape; `prediction(rung)` and `verdict(rung)`
print the rung's prediction and its verdicts.
"""
from __future__ import annotations

import math
import tomllib
from concurrent.futures import wait
from dataclasses import dataclass, field
from pathlib import Path

from ladder import ceilings as ceilings_mod
from ladder import problems, profile, roofline, runner
from ladder.runtime import hardware, world
from ladder import results as results_mod

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "kernels" / "predictions"
QUANTITIES = ("speedup", "pct_roof", "pct_anchor")
ROOF_NAMES = {"copy_TBps": "copy", "fp32_TFLOPs": "fp32", "fp16_tc_TFLOPs": "tensor-core"}
# A claimed gain's band starts here or above: above one timing's run-to-run spread (kernels/predictions/README.md)
GAIN_FLOOR = 1.02


# ---------------------------------------------------------------- the tables

@dataclass(frozen=True)
class Prediction:
    rung: str                      # "cuda:2_coalesced"
    quantity: str                  # "speedup" | "pct_roof" | "pct_anchor"
    band: tuple[float, float]
    hit: tuple[float, float]
    basis: str = ""
    over: str | None = None        # speedup: the rung it is measured against
    roof: str | None = None        # pct_roof: the ceiling's key
    anchor: str | None = None      # pct_anchor: "torch:cublas"
    at: dict = field(default_factory=dict, hash=False)  # shape label -> band (and hit) for that shape
    source: str = ""               # the table file

    @property
    def backend(self) -> str:
        return self.rung.split(":", 1)[0]

    @property
    def name(self) -> str:
        return self.rung.split(":", 1)[1]

    def _at(self, label: str) -> tuple[float, float] | None:
        """The band of the first `at` key whose words are all in the shape's label ('causal' matches
        'D64 causal')."""
        words = set(label.split())
        return next((tuple(b) for k, b in self.at.items() if set(k.split()) <= words), None)

    def band_at(self, label: str) -> tuple[float, float]:
        return self._at(label) or self.band

    def hit_at(self, label: str) -> tuple[float, float]:
        return self._at(label) or self.hit

    def what(self) -> str:
        """'x over 1_naive', '% fp32 roof', '% of cublas'."""
        if self.quantity == "speedup":
            return f"x over {self.over.split(':', 1)[1]}"
        if self.quantity == "pct_roof":
            return f"% {ROOF_NAMES.get(self.roof, self.roof)} roof"
        return f"% of {self.anchor.split(':', 1)[1]}"

    def describe(self, label: str | None = None) -> str:
        """'5-15x over 1_naive (hit: >= 5)'; for one shape, its band."""
        lo, hi = self.band_at(label) if label else self.band
        text = f"{_num(lo)}-{_num(hi)}{self.what()}"
        if not label and self.at:
            text += " (" + ", ".join(f"{k} {_num(a)}-{_num(b)}" for k, (a, b) in self.at.items()) + ")"
        hlo, hhi = self.hit_at(label) if label else self.hit
        if (hlo, hhi) != (lo, hi):
            text += f" (hit: {'>= ' + _num(hlo) if math.isinf(hhi) else _num(hlo) + '-' + _num(hhi)})"
        if self.quantity == "speedup" and lo < 1:
            text += " (break-even expected)" if hi > 1 else " (a loss expected)"
        return text


def _num(x: float) -> str:
    return f"{x:g}"


def _parse(path: Path) -> tuple[dict, list[Prediction]]:
    data = tomllib.loads(path.read_text())
    out = []
    for p in data.get("prediction", []):
        band = tuple(float(x) for x in p["band"])
        at = {k: tuple(float(x) for x in v) for k, v in p.get("at", {}).items()}
        out.append(Prediction(p["rung"], p["quantity"], band, tuple(float(x) for x in p.get("hit", band)),
                              p.get("basis", ""), p.get("over"), p.get("roof"), p.get("anchor"), at,
                              str(path.relative_to(ROOT))))
    return data, out


def tables() -> dict[str, tuple[dict, list[Prediction]]]:
    """Every table: file stem -> (its header keys, its predictions)."""
    return {path.stem: _parse(path) for path in sorted(TABLES.glob("*.toml"))}


def _problem_name(problem) -> str:
    return problem if isinstance(problem, str) else problem.name


def _backends(backend) -> tuple[str, ...]:
    return (backend,) if isinstance(backend, str) else tuple(backend)


def predictions(problem, backend) -> list[Prediction]:
    """The predictions of one ladder (a problem and one backend or several), in the table's order."""
    name, backends = _problem_name(problem), _backends(backend)
    return [p for header, preds in tables().values() if header.get("problem") == name
            for p in preds if p.backend in backends]


# A verdict table's header says where its bands come from: predictions written before any run, each band's basis in
# kernels/predictions/<file>.toml (whose header names the GPU they were written for)
BANDS = "bands written before any run"


# ---------------------------------------------------------------- shapes

def shape_label(problem, shape) -> str:
    """A headline shape's short name: 'n=1e9', '4096³', 'D64 causal'."""
    name, shape = _problem_name(problem), tuple(shape)
    if name == "vector_add":
        (n,) = shape
        exponent = round(math.log10(n)) if n > 0 else 0
        return f"n=1e{exponent}" if 10 ** exponent == n else f"n={n}"
    if name == "attention":
        return f"D{shape[3]}{' causal' if shape[4] else ''}"
    if name == "attention_backward":   # two sequence lengths: S in the label too
        return f"S{shape[2] // 1024}k D{shape[3]}{' causal' if shape[4] else ''}"
    if len(set(shape)) == 1:
        return f"{shape[0]}³"
    return "x".join(map(str, shape))


def headline_shapes(problem) -> list[tuple]:
    prob = problems.get(problem) if isinstance(problem, str) else problem
    return [tuple(s) for s in prob.bench_shapes]


# ---------------------------------------------------------------- verdicts

@dataclass
class Verdict:
    prediction: Prediction
    shape: tuple
    label: str                     # the shape's short name
    value: float | None            # the measured quantity (x or %), None when it cannot be computed
    outcome: str                   # "hit", "miss", or why there is no verdict ("not measured", ...)
    note: str = ""                 # "*" when the roof came from another run of the same GPU

    @property
    def direction(self) -> str:
        """'', 'below' or 'above' the hit range."""
        if self.value is None or self.outcome == "hit":
            return ""
        lo, _ = self.prediction.hit_at(self.label)
        return "below" if self.value < lo else "above"

    def text(self) -> str:
        if self.value is None:
            return self.outcome
        unit = "x" if self.prediction.quantity == "speedup" else "%"
        digits = 2 if unit == "x" or self.value < 10 else 1
        edges = self.prediction.hit_at(self.label)
        if any(round(self.value, digits) == round(e, digits) for e in edges):   # rounded onto the edge: show which side
            digits += 1
        mark = {"below": " ↓", "above": " ↑"}.get(self.direction, "")
        return f"{self.value:.{digits}f}{unit}{self.note} {self.outcome}{mark}"


def _row(rows: list[dict], label: str, shape: tuple) -> dict | None:
    return next((r for r in rows if results_mod.rung_label(r) == label and tuple(r["shape"]) == tuple(shape)), None)


def _ceilings(row: dict, ceilings: dict | None, recording, roof: str | None = None) -> tuple[dict | None, str]:
    """The ceilings a row is judged against: its own run's (a recorded row's session; a live row: those
    given), else, for a recorded row whose run kept none (or not `roof`: a run before the instruction roofs were
    measured has no tensor-core roof), the recording's newest, marked '*'."""
    if "recorded" not in row:
        return ceilings, ""
    rec = recording or results_mod.load()
    session = rec.session(row) or {}
    if session.get("ceilings") and (roof is None or session["ceilings"].get(roof)):
        return session["ceilings"], ""
    return rec.ceilings, "*"


def _anchor(row: dict, rows: list[dict], anchor: str, recording) -> dict | None:
    if "recorded" in row:
        return results_mod.run_anchor(row, anchor, recording)
    return next((r for r in rows if results_mod.rung_label(r) == anchor and "recorded" not in r
                 and tuple(r["shape"]) == tuple(row["shape"])), None)


def judge(p: Prediction, shape: tuple, rows: list[dict], problem: str, ceilings: dict | None = None,
          recording=None) -> Verdict:
    label = shape_label(problem, shape)
    row = _row(rows, p.rung, shape)
    if row is None:
        return Verdict(p, shape, label, None, "not measured")
    note = ""
    if p.quantity == "speedup":
        before = _row(rows, p.over, shape)
        if before is None:
            return Verdict(p, shape, label, None, f"no {p.over.split(':', 1)[1]}")
        value = before["ms"] / row["ms"]
    elif p.quantity == "pct_roof":
        ceil, note = _ceilings(row, ceilings, recording, p.roof)
        if not ceil or not ceil.get(p.roof):
            return Verdict(p, shape, label, None, "no ceilings")
        rate = row["tbps"] if p.roof == "copy_TBps" else row["tflops"]
        value = 100 * rate / ceil[p.roof]
    elif p.quantity == "pct_anchor":
        ref = _anchor(row, rows, p.anchor, recording)
        if ref is None:
            return Verdict(p, shape, label, None, f"no {p.anchor.split(':', 1)[1]} in its run")
        value = 100 * row["tflops"] / ref["tflops"]
    else:
        raise ValueError(f"{p.source}: unknown quantity {p.quantity!r} (one of {', '.join(QUANTITIES)})")
    lo, hi = p.hit_at(label)
    return Verdict(p, shape, label, value, "hit" if lo <= value <= hi else "miss", note)


def verdicts(problem, backend, rows: list[dict], ceilings: dict | None = None, recording=None,
             rung: str | None = None) -> list[Verdict]:
    """Hit or miss of every prediction of the ladder (`backend`: one or several) at every headline shape.
    `rows`: the recording's runs or a live run's (the anchors among them); `ceilings`: a live run's
    (recorded rows are judged against their own run's). `rung`: only that rung's ('2_coalesced' or a label).
    A problem narrowed to some rungs (Problem.only, Problem.span) is judged on those: a prediction about a rung
    outside it, or measured over one, is left out."""
    name = _problem_name(problem)
    shapes = headline_shapes(problem)
    shown = None if isinstance(problem, str) else {r.label for r in problem.rungs}
    chosen = [p for p in predictions(name, backend)
              if (rung is None or rung in (p.rung, p.name))
              and (shown is None or (p.rung in shown and (p.over is None or p.over in shown)))]
    return [judge(p, shape, rows, name, ceilings, recording) for p in chosen for shape in shapes]


def format_verdicts(found: list[Verdict], title: str = "") -> str:
    """One line per prediction, one column per headline shape; a last line counts the hits."""
    if not found:
        return title + "\n(no predictions)" if title else "(no predictions)"
    labels = list(dict.fromkeys(v.label for v in found))
    preds = list(dict.fromkeys(v.prediction for v in found))
    by = {(v.prediction, v.label): v for v in found}
    width = max(12, *(len(lab) + 2 for lab in labels), *(len(by[p, lab].text()) + 2 for p in preds for lab in labels))
    rung_w = max(len(p.rung) for p in preds) + 1
    pred_w = max(len(p.describe()) for p in preds) + 1
    lines = [title] if title else []
    lines.append(f"{'rung':{rung_w}s} {'predicted':{pred_w}s}" + "".join(f"{lab:>{width}s}" for lab in labels))
    for p in preds:
        lines.append(f"{p.rung:{rung_w}s} {p.describe():{pred_w}s}"
                     + "".join(f"{by[p, lab].text():>{width}s}" for lab in labels))
    judged = [v for v in found if v.value is not None]
    hits = sum(v.outcome == "hit" for v in judged)
    misses = len(judged) - hits
    lines.append(f"{hits} hit{'s' * (hits != 1)}, {misses} miss{'es' * (misses != 1)} in {len(judged)} verdicts"
                 + (f"; {len(found) - len(judged)} not judged" if len(judged) < len(found) else ""))
    if any(v.note == "*" for v in found):
        lines.append("* the run that timed this rung kept no ceilings: the roof is the recording's newest")
    return "\n".join(lines)


def show(problem, backend, rows: list[dict] | None = None, ceilings: dict | None = None,
         rung: str | None = None) -> None:
    """Print the verdicts of a ladder; without rows, over the recording (labelled)."""
    title = ""
    if rows is None:
        rec = results_mod.load()
        rows, title = rec.runs(_problem_name(problem)), f"{rec.label}; {BANDS}"
    print(format_verdicts(verdicts(problem, backend, rows, ceilings, rung=rung), title))


def format_predictions(problem, backend, rung: str | None = None, basis: bool = True) -> str:
    """The predictions of a ladder (or of one rung), one line each, with the model behind each band."""
    lines = []
    for p in predictions(problem, backend):
        if rung is None or rung in (p.rung, p.name):
            lines.append(f"{p.rung}: {p.describe()}" + (f"\n  basis: {p.basis}" if basis and p.basis else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------- a ladder, rung by rung

def roof_of(problem, rung, gpu) -> str:
    """The ceiling a rung is measured against: copy bandwidth for a memory-bound problem, else the unit
    that does its math on `gpu` (tensor cores or CUDA cores)."""
    if problem.name == "vector_add":
        return "copy_TBps"
    return "fp16_tc_TFLOPs" if roofline.compute_unit(problem, rung, gpu) == "tensor cores" else "fp32_TFLOPs"


class Ladder:
    """A ladder measured rung by rung: live on a GPU (ceilings measured once), from the recording without."""

    def __init__(self, problem, backend, shapes: list[tuple] | None = None):
        self.problem = problems.get(problem) if isinstance(problem, str) else problem
        self.backends = _backends(backend)
        self.shapes = [tuple(s) for s in (shapes or self.problem.bench_shapes)]
        self.live = world.WORLD.gpu
        self._anchors_timed: set[str] = set()
        if self.live:
            self.gpu = hardware.detect()
            compiling = runner.compile_ahead(self.problem)  # other processes compile while the ceilings are measured
            self.ceilings, self.rows = ceilings_mod.measure(self.gpu), []
            wait(compiling)
            self.roofs, self.datasheet = self.ceilings, ceilings_mod.datasheet_ceilings(self.gpu.datasheet)
            self.label = f"live on {self.gpu.emulation_note or self.gpu.name}"
        else:
            self.recording = results_mod.load()
            self.gpu = roofline.datasheet_gpu(self.recording.gpu)
            self.ceilings = None  # each recorded row is judged against its own run's
            self.roofs, self.datasheet = self.recording.ceilings, self.recording.data.get("datasheet")
            labels = {r.label for r in self.problem.rungs}  # this ladder's rungs and its anchor, not the others'
            self.rows = [r for r in self.recording.runs(self.problem.name)
                         if tuple(r["shape"]) in self.shapes and results_mod.rung_label(r) in labels]
            self.label = self.recording.label

    def _rung(self, name: str):
        backend, rung = name.split(":", 1) if ":" in name else (self.backends[0], name)
        return self.problem.rung(backend, rung)

    def _previous(self, rung) -> str | None:
        labels = [r.label for r in self.problem.rungs if r.backend == rung.backend]
        i = labels.index(rung.label)
        return labels[i - 1] if i else None

    def measure(self, name: str) -> None:
        """Time the rung at every headline shape (live), or take its recorded rows; print one line per
        shape: time, TFLOP/s (TB/s for a memory-bound problem), % of its roof, speed-up over the rung before."""
        rung = self._rung(name)
        if self.live:
            reason = runner.unavailable(rung)
            if reason:
                print(f"{rung.label}: not run here: {reason}")
                return
            if rung.label not in self._anchors_timed:  # else a verdict has just timed it as its anchor
                self._time(rung)
        print(self.lines(rung.label))

    def _time(self, rung) -> None:
        self.rows = [r for r in self.rows if results_mod.rung_label(r) != rung.label]
        self.rows += [runner.time_rung(self.problem, rung, shape) for shape in self.shapes]

    def _time_anchors(self, found: list[Prediction]) -> None:
        """Live: time the library a '% of' verdict compares with, once, before the first such verdict, so
        that every rung's verdict has its anchor from this run."""
        for p in found:
            if not self.live or p.quantity != "pct_anchor":
                continue
            anchor = self._rung(p.anchor)
            if (not any(results_mod.rung_label(r) == anchor.label for r in self.rows)
                    and runner.unavailable(anchor) is None):
                self._time(anchor)
                self._anchors_timed.add(anchor.label)

    def lines(self, label: str) -> str:
        rung = self._rung(label)
        roof = roof_of(self.problem, rung, self.gpu)
        before = self._previous(rung) if rung.backend != "torch" else None
        out = [f"{rung.label} ({self.label})"]
        for shape in self.shapes:
            row = _row(self.rows, rung.label, shape)
            tag = shape_label(self.problem, shape)
            if row is None:
                out.append(f"  {tag:>11s}  not measured")
                continue
            ceil, note = _ceilings(row, self.ceilings, getattr(self, "recording", None), roof)
            ceil = ceil if ceil and ceil.get(roof) else None
            rate = f"{row['tbps']:6.2f} TB/s" if roof == "copy_TBps" else f"{row['tflops']:7.2f} TFLOP/s"
            value = row["tbps"] if roof == "copy_TBps" else row["tflops"]
            pct = 100 * value / ceil[roof] if ceil else None
            pct = f"{pct:5.{2 if pct < 10 else 1}f}%{note or ' '} of {ROOF_NAMES[roof]} roof" if ceil else ""
            prev = _row(self.rows, before, shape) if before else None
            step = f"  {prev['ms'] / row['ms']:6.3f}x over {before.split(':', 1)[1]}" if prev else ""
            out.append(f"  {tag:>11s} {row['ms']:10.4f} ms {rate}  {pct}{step}"
                       + ("" if row.get("correct", True) else "  WRONG"))
        if any("*" in line for line in out[1:]):
            out.append("  * the run that timed this rung kept no such roof: the roof is the recording's newest")
        return "\n".join(out)

    def step(self, name: str, anchor: str | None = None) -> None:
        """A rung's measurement and verdict (and, given `anchor`, its gap to that library): one cell per rung."""
        self.measure(name)
        self.verdict(name)
        if anchor:
            self.gap(name, anchor)

    def gap(self, name: str, anchor: str) -> None:
        """How fast `name` runs against the library `anchor` timed in the same run, per headline shape, with
        the spread of the two timings (their 20th-80th percentiles)."""
        label, recording = self._rung(name).label, getattr(self, "recording", None)
        for shape in self.shapes:
            row = _row(self.rows, label, shape)
            ref = _anchor(row, self.rows, anchor, recording) if row else None
            tag = shape_label(self.problem, shape)
            if ref is None:
                print(f"{tag:>11s}: {label} or {anchor} not timed in one run here")
                continue
            ratio = ref["ms"] / row["ms"]
            lo, hi = ref["ms_p20"] / row["ms_p80"], ref["ms_p80"] / row["ms_p20"]
            print(f"{tag:>11s}: {label} runs at {ratio:.3f}x {anchor.split(':', 1)[1]}'s speed "
                  f"(spread of the two timings, 20th-80th percentiles: {lo:.3f}-{hi:.3f}x)")

    def prediction(self, name: str) -> None:
        rung = self._rung(name)
        print(format_predictions(self.problem, rung.backend, rung.label))

    def verdict(self, name: str | None = None) -> None:
        """Hit or miss at every headline shape: one rung's, or (no name) the whole ladder's."""
        rung = self._rung(name).label if name else None
        self._time_anchors([p for p in predictions(self.problem.name, self.backends)
                            if rung is None or rung in (p.rung, p.name)])
        found = verdicts(self.problem, self.backends, self.rows, self.ceilings,
                         getattr(self, "recording", None), rung=rung)
        print(format_verdicts(found, "" if name else f"{self.label}; {BANDS}"))
        if rung:
            print(warp_state_line(self.problem, rung))


# ---------------------------------------------------------------- the counters behind a "why"

COUNTERS = {
    "DRAM GB": lambda m: ((m.get("dram_bytes_read") or 0) + (m.get("dram_bytes_write") or 0)) / 1e9,
    "L2 GB": lambda m: (m.get("l2_bytes") or 0) / 1e9,
    "load instr.": lambda m: m.get("global_load_instructions") or 0,
    "sectors/request": lambda m: (m.get("global_load_sectors") or 0) / max(m.get("global_load_requests") or 1, 1),
    "bank conflicts": lambda m: m.get("shared_bank_conflicts") or 0,
    "tensor instr.": lambda m: m.get("tensor_instructions") or 0,
    "tensor pipe %": lambda m: m.get("tensor_pipe_pct") or 0,
    # counters added later: a profile recorded before them shows "-"
    "instr. (G)": lambda m: None if m.get("instructions") is None else m["instructions"] / 1e9,
    "MUFU pipe %": lambda m: m.get("xu_pipe_pct"),
    "L2 to SM GB": lambda m: None if m.get("l2_to_sm_bytes") is None else m["l2_to_sm_bytes"] / 1e9,
}


def counters(problem, labels: list[str], names: list[str], recording=None, shape: tuple | None = None) -> str:
    """The recorded Nsight Compute counters `names` (keys of COUNTERS) of the rungs `labels`, one line each (at
    the profiled shape, or `shape`)."""
    profiles, rec = _profiles(problem, recording, shape)
    width = max([26, *(len(label) + 1 for label in labels)])
    lines = [f"{'rung':{width}s}" + _counter_header(names)]
    for label in labels:
        p = profiles.get(label)
        if p is None:
            lines.append(f"{label:{width}s} not profiled")
            continue
        lines.append(f"{label:{width}s}" + _counter_cells(p["metrics"], names))
    lines.append(f"({_profiled_at(problem, profiles, labels, rec)})")
    return "\n".join(lines)


def issue_counts(problem, labels: list[str], shape: tuple | None = None, recording=None) -> str:
    """The rungs `labels`' instructions, issue rate and occupancy at `shape` (default: the profiled one), as
    `python -m ladder issue --record` recorded them (the recording holding such rows)."""
    rec = recording or results_mod.load_having("issue")
    name = _problem_name(problem)
    shape = list(shape or problems.get(name).bench_shapes[0])
    rows = {results_mod.rung_label(r): r for r in rec.data.get("issue", [])
            if r["problem"] == name and r["shape"] == shape}
    missing = [label for label in labels if label not in rows]
    if missing:
        return (f"{', '.join(missing)}: no instruction counts {rec.label} at {'x'.join(map(str, shape))} (python -m "
                f"ladder issue {name} {' '.join(map(str, shape))} --rungs {' '.join(labels)} --record, on a GPU)")
    return profile.issue_table([rows[label] for label in labels], f"{'x'.join(map(str, shape))}, {rec.label}")


def _counter_width(name: str) -> int:
    return max(9, len(name) + 1)


def _counter_header(names: list[str]) -> str:
    return "".join(f"{n:>{_counter_width(n)}s}" for n in names)


def _counter_cells(metrics: dict, names: list[str]) -> str:
    """The counters `names` (keys of COUNTERS) of one profile, under _counter_header: "-" where it has none."""
    cells = ((COUNTERS[n](metrics), _counter_width(n)) for n in names)
    return "".join("-".rjust(w) if x is None else f"{x:>{w}.3g}" for x, w in cells)


def _profiles(problem, recording=None, shape: tuple | None = None) -> tuple[dict, object]:
    """The recorded ncu profiles of `problem`'s rungs by label (at the profiled shape, or `shape`), and the
    recording."""
    rec = recording or results_mod.load()
    name = _problem_name(problem)
    if shape is None or tuple(shape) == tuple(problems.get(name).bench_shapes[0]):
        return {results_mod.rung_label(p): p for p in rec.profiles(name)}, rec
    return {results_mod.rung_label(p): p for p in rec.shape_profiles(name) if tuple(p["shape"]) == tuple(shape)}, rec


def _profiled_at(problem, profiles: dict, labels: list[str], rec) -> str:
    """Where the profiles shown were taken: "ncu at <shape>, recorded on <GPU>"."""
    shape = next((profiles[label]["shape"] for label in labels if label in profiles), None)
    return f"ncu at {shape_label(problem, shape) if shape else '-'}, {rec.label}"


def cut(name: str, width: int) -> str:
    """`name` in at most `width` characters, a cut one marked with …"""
    return name if len(name) <= width else name[:width - 1] + "…"


def kernel_times(problem, labels: list[str], recording=None, width: int = 60) -> str:
    """Each rung's kernels as ncu timed them once (the recorded profile): name, time and share of the rung's time."""
    profiles, rec = _profiles(problem, recording)
    lines = []
    for label in labels:
        p = profiles.get(label)
        times = p["metrics"].get("kernel_ns") if p else None
        if not times:
            lines.append(f"{label}: not profiled" if p is None else f"{label}: profiled without kernel times")
            continue
        lines.append(f"{label}: {sum(times) / 1e3:.0f} µs in {len(times)} kernel{'s' * (len(times) > 1)}")
        for name, t in zip(p["metrics"]["kernels"], times):
            lines.append(f"  {cut(name, width):{width}s} {t / 1e3:8.0f} µs {t / sum(times):5.0%}")
    lines.append(f"({_profiled_at(problem, profiles, labels, rec)}: each kernel run once, clocks as found)")
    return "\n".join(lines)


# ---------------------------------------------------------------- why warps waited: ncu's warp states

STALL_NAMES = {"long_scoreboard": "long scoreboard", "short_scoreboard": "short scoreboard", "barrier": "barrier",
               "mio_throttle": "MIO throttle", "math_pipe_throttle": "math pipe throttle", "wait": "wait",
               "not_selected": "not selected", "gmma": "wgmma", "lg_throttle": "LG throttle",
               "dispatch_stall": "dispatch", "tex_throttle": "TEX throttle", "branch_resolving": "branch",
               "membar": "membar", "drain": "drain", "imc_miss": "constant miss", "no_instruction": "no instruction",
               "sleeping": "sleeping", "misc": "misc"}
LIMITS = {"limit_registers": "registers", "limit_shared_mem": "shared memory", "limit_warps": "warps",
          "limit_blocks": "blocks"}


def _stalled(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def _stall_width(reason: str) -> int:
    return max(9, len(STALL_NAMES[reason]))


def _stall_header(also: tuple[str, ...]) -> str:
    return "".join(f" {STALL_NAMES[r]:>{_stall_width(r)}s}" for r in also)


def _stall_cells(m: dict, also: tuple[str, ...]) -> str:
    """The warp states `also` of one profile, under _stall_header (0 where a reason was not counted)."""
    return "".join(f" {_stalled(m.get(f'stall_{r}') or 0.0):>{_stall_width(r)}s}" for r in also)


def _occupancy(m: dict) -> str:
    return f"{m['occupancy_pct']:3.0f}%/{m['occupancy_theoretical_pct']:3.0f}%"


def _top_reasons(m: dict, top: int) -> str:
    return ", ".join(f"{STALL_NAMES[r]} {_stalled(v)}" for r, v in profile.top_stalls(m, top))


def limiter(m: dict) -> str:
    """What caps the blocks an SM holds at once: the smallest of ncu's occupancy limits (ties named together)."""
    limits = {name: m[key] for key, name in LIMITS.items() if m.get(key)}
    if not limits:
        return "-"
    least = min(limits.values())
    return " = ".join(name for name, v in limits.items() if v == least)


def _warp_states(problem, recording=None, shape: tuple | None = None) -> tuple[dict, object]:
    """The recorded warp states of `problem`'s rungs at `shape` (default: the shape every rung is profiled at)."""
    rec = recording or results_mod.load()
    shape = tuple(shape or problems.get(_problem_name(problem)).bench_shapes[0])
    return {results_mod.rung_label(w): w for w in rec.warp_states(_problem_name(problem))
            if tuple(w["shape"]) == shape}, rec


def across_shapes(problem, label: str, names: list[str], recording=None, also: tuple[str, ...] = ()) -> str:
    """One rung's recorded profile at each headline shape, a line each: ncu's kernel time, issue activity, warp
    cycles per issued instruction, the top stall reasons, the reasons `also` asked for, occupancy, registers, and
    the counters `names` (keys of COUNTERS); what a shape was not profiled at says so."""
    rec = recording or results_mod.load()
    lines = [f"{label} at each shape (ncu, {rec.label})",
             f"{'shape':12s} {'ms':>8s} {'issued':>6s} {'cyc/inst':>8s}  {'top stall reasons':46s}"
             f"{_stall_header(also)} {'occupancy':>9s} {'regs':>4s}" + _counter_header(names)]
    for shape in problems.get(_problem_name(problem)).bench_shapes:
        w = _warp_states(problem, rec, shape)[0].get(label)
        p = _profiles(problem, rec, shape)[0].get(label)
        if w is None or p is None:
            lines.append(f"{shape_label(problem, shape):12s} not profiled")
            continue
        m = w["metrics"]
        lines.append(f"{shape_label(problem, shape):12s} {m['duration_ns'] / 1e6:8.2f} {m['issue_active_pct']:5.0f}% "
                     f"{m['cycles_per_issue']:8.1f}  {_top_reasons(m, 3):46s}{_stall_cells(m, also)} "
                     f"{_occupancy(m)} {m['registers_per_thread']:4.0f}" + _counter_cells(p["metrics"], names))
    return "\n".join(lines)


def tensor_pipe_table(problem, labels: list[str], recording=None, shape: tuple | None = None) -> str:
    """The recorded kernel of each rung in `labels` at `shape` (ncu's warp-state run): its time, the share of it
    the tensor pipe was busy, and their product, the tensor-core time. Equal tensor-core times with unequal
    durations say the slower kernel does the same math and leaves the tensor cores idle longer."""
    found, rec = _warp_states(problem, recording, shape)
    lines = [f"{'rung':26s} {'kernel':52s} {'time':>8s} {'tensor pipe busy':>16s} {'tensor time':>11s}"]
    for label in labels:
        w = found.get(label)
        m = w["metrics"] if w else {}
        if m.get("tensor_pipe_pct") is None or not m.get("duration_ns"):
            lines.append(f"{label:26s} tensor pipe not profiled")
            continue
        us = m["duration_ns"] / 1e3
        lines.append(f"{label:26s} {m['kernel'][:52]:52s} {us:6.1f}us {m['tensor_pipe_pct']:15.1f}% "
                     f"{us * m['tensor_pipe_pct'] / 100:9.1f}us")
    shown = [found[label] for label in labels if label in found]
    at = shape_label(problem, shown[0]["shape"]) if shown else "-"
    lines.append(f"(ncu at {at}, {rec.label}: one run each, caches flushed, clocks as they were)")
    return "\n".join(lines)


def _longest_kernel(m: dict) -> str:
    """Which kernel a profile of a rung that launches several describes (ncu profiles its longest)."""
    if (m.get("kernels") or 1) < 2:
        return ""
    return f"; the longest of {m['kernels']} kernel launches, {cut(m['kernel'], 32)}, {m['time_share']:.0%} of the time"


def warp_state_line(problem, label: str, recording=None, top: int = 3, shape: tuple | None = None) -> str:
    """One line beside a step: the reasons its warps waited on most, how often a warp issued, its occupancy and
    what limits it (recorded by ncu at the profiled shape, or `shape`)."""
    found, rec = _warp_states(problem, recording, shape)
    w = found.get(label)
    if w is None:
        return f"warp states: {label} not profiled"
    m = w["metrics"]
    reasons = _top_reasons(m, top)
    return (f"warp states (ncu, {shape_label(problem, w['shape'])}, {rec.label}{_longest_kernel(m)}): waiting on {reasons} "
            f"(warps per issued instruction); an instruction issued in {m['issue_active_pct']:.0f}% of cycles; "
            f"occupancy {m['occupancy_pct']:.0f}% of {m['occupancy_theoretical_pct']:.0f}% possible "
            f"(limited by {limiter(m)})")


def warp_state_table(problem, labels: list[str], recording=None, top: int = 3, shape: tuple | None = None,
                     also: tuple[str, ...] = ()) -> str:
    """The recorded warp states of the rungs `labels` (at the profiled shape, or `shape`), one line each: issue
    activity, warp cycles per issued instruction, the top stall reasons, the reasons `also` asked for whether or
    not they lead, occupancy (achieved / theoretical), registers, shared memory, limiter."""
    found, rec = _warp_states(problem, recording, shape)
    lines = [f"{'rung':26s} {'issued':>6s} {'cyc/inst':>8s}  {'top stall reasons (warps per issued instruction)':54s}"
             f"{_stall_header(also)} {'occupancy':>9s} {'regs':>4s} {'smem':>7s}  limited by"]
    for label in labels:
        w = found.get(label)
        if w is None:
            lines.append(f"{label:26s} not profiled")
            continue
        m = w["metrics"]
        reasons = _top_reasons(m, top)
        lines.append(f"{label:26s} {m['issue_active_pct']:5.0f}% {m['cycles_per_issue']:8.1f}  {reasons:54s}"
                     f"{_stall_cells(m, also)} {_occupancy(m)} {m['registers_per_thread']:4.0f} "
                     f"{m['shared_bytes_per_block'] / 1024:5.0f}KiB  {limiter(m)}")
    shown = [found[label] for label in labels if label in found]
    at = shape_label(problem, shown[0]["shape"]) if shown else "-"
    lines.append(f"(ncu's warp states at {at}, {rec.label}; occupancy: resident warps, % of the SM's "
                 "most; a rung that launches several kernels: its longest)")
    return "\n".join(lines)
