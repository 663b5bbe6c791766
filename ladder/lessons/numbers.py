"""Numbers in prose are printed beside them: a number a lesson's markdown states must be printed, rounded as the
prose writes it, by the committed outputs of its own section or of a section the sentence names, unless the lesson
lists it as a constant. A student reads "1.13×" and finds 1.128x in a cell of the same rung.

Sections: a markdown line `# ...` or `## ...` (anywhere in a cell, outside code fences) starts one, which runs to the
next; `###` and deeper stay inside, so a rung (every lesson titles each with `##`) is one section.

Numbers (`prose_numbers`), outside code, LaTeX, HTML tags and comments, link targets, URLs and headings:
decimals (`0.947`, `7.81e+05`; not a version after a tool's name, `CUDA 12.4`), a trailing `×`/`%`/unit kept;
percentages (`6%`, both ends of `85–90%`); integers of 2+ digits that the sentence measures (`173 lines`, `700 W`,
`46 KiB`) or compares with another number by `→`, `of (the)`, `to`, `vs`, `against`, `instead of` (`66 → 28`,
`42 of the 66`). Never a name or a size: glued to a letter or `_` (`sm_90`, `D128`, `fp16`, `04e`), a factor
(`4096³`, `4096×4096`, `tokens × 768`, `2·N`), an adjective (`16-byte`), after `rung(s)`/`lesson(s)`/`cell(s)`/
`part(s)`/`issue(s)`/`#`, a year.

Printed (`printed`): an output number rounded to the decimals the prose writes equals it ("1.13×": 1.128x yes,
"1.14×" no); an integer matches outputs rounded to units, "about 300" at its significant figures; signs ignored. A
ratio ("1.03×") matches only a printed ratio (`1.028x`) or a printed range's end (`0.97-1.03`): ratios sit near 1,
where any timing would match. Outputs: stream text and text/plain of code cells; not images, HTML or errors.

Named sections: a link to a heading's anchor (`[counters](#Rung-2-—-coalesced)`), `(section: <heading or its
start>)`, or a rung of this lesson (`rung 2's section`, `rung 3: 5.4`, `rungs 9 and 10`; not `CUDA's rung 3`).

Constants: `nb.metadata["ladder"]["constants"]` maps a number as written to its source (`{"4.8": "H200 datasheet,
HBM3e TB/s"}`). Not under "kernel_ladder": `ladder notebooks` rewrites that key after each run.

    python -m ladder.lessons.numbers [notebooks...] [--strict]   (default notebooks/*.ipynb; --strict: exit 1 on any)
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

_SKIP = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|"          # code, LaTeX
                   r"<!--.*?-->|</?[A-Za-z][^>\n]*>|\]\([^)]*\)|https?://\S+", re.S)    # HTML, link targets, URLs
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?(?![\d.]\d)")
_MEASURE = (r"[µun]s|ms|s|[KMGT]i?B(?:/s)?|[GT]?FLOPs?(?:/s|/B)?|GHz|MHz|W|pJ|G|lines?|registers?|instructions?|"
            r"cycles?|sectors?")
_UNIT = re.compile(rf"%|×|x\b|\s?(?:{_MEASURE}|bytes?|warps?|blocks?|tiles?|units?)\b|")
_MEASURED = re.compile(rf"%|×|x\b|\s?(?:{_MEASURE})\b")
_RANGE_TAIL = re.compile(r"\s?[–-]\s?\d+(?:\.\d+)?\s?(%|×|x\b)")
_NOT_A_NUMBER_AFTER = re.compile(r"[³²·]|\s?[×x]\s?\d|-[A-Za-z]|[A-Za-z_](?<!x)|x\w")   # 4096³, 16-byte, 04e
_NOT_A_NUMBER_BEFORE = re.compile(r"[×·]\s?$|\dx\s?$|"                              # 2·N, tokens × 768, rung 12
                                  r"(?:rungs?|lessons?|cells?|parts?|issues?|#)\s*(?:\d+\w*\s*[–-]\s*)?$", re.I)
_VERSION_BEFORE = re.compile(r"(?:CUDA|Triton|PyTorch|torch|Python|cuDNN|driver|NVRTC|ptxas|nvcc|capability)\s$", re.I)
_APPROX_BEFORE = re.compile(r"(?:about|roughly|around|nearly|almost|some|~|≈)\s*$", re.I)
_LINK = r"(?:→|->|of(?: the)?|to|vs\.?|against|instead of)"
_COMPARED_AFTER = re.compile(rf"[%×]?(?:\s[A-Za-zµ/]+){{0,2}}\s?{_LINK}\s?[~≈]?\d")   # 66 → 28, 42 of the 66
_COMPARED_BEFORE = re.compile(rf"\d[%×]?(?:\s[A-Za-zµ/]+){{0,2}}\s?{_LINK}\s?[~≈]?$")
_OUTPUT_NUMBER = re.compile(r"(?<![A-Za-z_.\d])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d_])")   # not H100, 10_cluster


@dataclass
class Number:
    """A number as the prose writes it ("1.13"), the unit after it ("×", "%", " ms", ""), its kind ("decimal",
    "percent" or "integer") and whether an approximation word ("about") stands before it."""
    text: str
    unit: str = ""
    kind: str = "decimal"
    approx: bool = False

    @property
    def value(self) -> float:
        return float(self.text.replace(",", ""))

    @property
    def step(self) -> float:
        """The rounding step the prose writes: 0.01 for "1.13", 1e4 for "7.81e+06", 1 for "66", 100 for "about 300"."""
        mantissa, _, exponent = self.text.lower().replace(",", "").partition("e")
        if exponent or "." in mantissa:
            return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))
        zeros = len(mantissa) - len(mantissa.rstrip("0")) if self.approx and mantissa.strip("0") else 0
        return 10.0 ** zeros


@dataclass
class Section:
    """A heading and what lies under it: its prose, as (cell index, text), its code cells' outputs' text, and the
    `###` (and deeper) headings inside it, which a link may name it by."""
    heading: str
    prose: list[tuple[int, str]] = field(default_factory=list)
    outputs: str = ""
    subheadings: list[str] = field(default_factory=list)


@dataclass
class Finding:
    """A number in prose that no output of its section (nor of a section its sentence names) prints."""
    cell: int
    section: str
    number: str
    sentence: str
    kind: str

    def __str__(self) -> str:
        return f"  cell {self.cell:3d} [{self.section[:40]}] {self.number!r} ({self.kind}): {self.sentence}"


def slug(text: str) -> str:
    """A heading or an anchor as lowercase words joined by '-': GitHub's and Jupyter's anchors reduce to the same."""
    return "-".join(re.findall(r"[^\W_]+", unquote(text).lower()))


def output_text(cell) -> str:
    """What a code cell prints: stream text and text/plain, not an image's text stand-in, HTML or errors."""
    parts = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif "text/plain" in data and not any(kind.startswith("image/") for kind in data):
            parts.append("".join(data["text/plain"]))
    return "\n".join(parts)


def sections(nb) -> list[Section]:
    """The notebook cut at its `#` and `##` headings (the module's docstring says why); the cells before the first
    heading, if any, form a section with an empty heading."""
    found = [Section("")]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            found[-1].outputs += output_text(cell) + "\n"
        elif cell.cell_type == "markdown":
            lines, fenced = [], False
            for line in cell.source.splitlines():
                fenced ^= line.lstrip().startswith("```")
                heading = None if fenced else re.match(r"#{1,2}\s+(.*)", line)
                if heading:
                    found[-1].prose.append((index, "\n".join(lines)))
                    found.append(Section(heading.group(1).strip()))
                    lines = []
                elif not fenced and (sub := re.match(r"#{3,}\s+(.*)", line)):
                    found[-1].subheadings.append(sub.group(1).strip())
                else:
                    lines.append(line)
            found[-1].prose.append((index, "\n".join(lines)))
    for section in found:
        section.prose = [(i, text) for i, text in section.prose if text.strip()]
    return [s for s in found if s.heading or s.prose or s.outputs.strip()]


def _blank(match: re.Match) -> str:
    """Code, math, comments and link targets as spaces (a link's text kept), so the offsets of the rest hold."""
    skipped = match.group(0)
    return "]" + " " * (len(skipped) - 1) if skipped.startswith("](") else " " * len(skipped)


def prose_numbers(text: str) -> list[Number]:
    """The numbers a markdown text states, by the rule in the module's docstring, in order."""
    plain = _SKIP.sub(_blank, text).replace("*", " ")          # **bold** and *italic* marks are not words
    found = []
    for m in _NUMBER.finditer(plain):
        before, after, written = plain[:m.start()], plain[m.end():], m.group(0)
        if _NOT_A_NUMBER_AFTER.match(after) or _NOT_A_NUMBER_BEFORE.search(before):
            continue
        unit = _UNIT.match(after).group(0)
        ranged = _RANGE_TAIL.match(after)
        symbol = ranged.group(1) if ranged else unit.strip()
        if m.group(2) or m.group(3):
            if _VERSION_BEFORE.search(before):
                continue
            kind = "percent" if symbol == "%" else "decimal"
        elif symbol == "%":
            kind = "percent"
        else:
            digits = written.replace(",", "")
            if len(digits) < 2 or re.fullmatch(r"(19|20)\d\d", digits):
                continue                                   # a single digit, a year
            if not (_MEASURED.match(after) or _COMPARED_AFTER.match(after) or _COMPARED_BEFORE.search(before)):
                continue                                   # an integer the sentence neither measures nor compares
            kind = "integer"
        found.append(Number(written, unit, kind, bool(_APPROX_BEFORE.search(before))))
    return found


def printed(number: Number | str, outputs_text: str) -> bool:
    """True when some number in `outputs_text`, rounded to the precision `number` is written at, equals it.
    `number`: a Number, or a string as the prose writes it ("1.13×")."""
    if isinstance(number, str):
        number = (prose_numbers(number) or [Number(re.search(r"\d[\d,.]*", number).group(0).rstrip(".,"))])[0]
    value, step = number.value, number.step
    text = re.sub(r"(?<=\d),(?=\d{3}\b)|\b\d{4}-\d\d-\d\d\b", "", outputs_text or "")   # 1,024; no dates
    for m in _OUTPUT_NUMBER.finditer(text):
        if number.unit in ("×", "x") and not (re.match(r"\s?[x×](?![A-Za-z])|[–-]\d", text[m.end():])
                                               or re.search(r"\d[–-]$", text[:m.start()])):
            continue                                       # a ratio is printed as a ratio or a range's end
        if abs(abs(float(m.group(0))) - value) <= step / 2 + 1e-9 * max(1.0, value):
            return True
    return False


def sentences(text: str) -> list[str]:
    """A markdown text cut into sentences, paragraphs and list items."""
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[^a-z\s])|\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.)\s)", text) if s.strip()]


def named_sections(sentence: str, all_sections: list[Section]) -> list[Section]:
    """The sections a sentence names: a link to a heading's anchor, "(section: <heading>)" or a rung of the lesson."""
    names = [slug(t) for t in re.findall(r"\]\(#([^)]+)\)", sentence)]
    names += [slug(t) for t in re.findall(r"\(section:\s*([^)]+)\)", sentence, re.I)]
    for m in re.finditer(r"(\S*)\s?\brungs? (\d+[a-z]?(?:(?:,\s?|\s?[–-]\s?| and | or )\d+[a-z]?)*)", sentence, re.I):
        if not m.group(1)[:1].isupper():                   # "CUDA's rung 3", "Triton rung 4": another lesson's
            names += [slug("rung " + n) for n in re.findall(r"\d+[a-z]?", m.group(2))]
    return [s for s in all_sections for name in names
            if name and any((slug(h) + "-").startswith(name + "-") for h in (s.heading, *s.subheadings))]


def _listed(nb) -> dict:
    """The lesson's constants as listed: the number as written -> its source (the module's docstring says where)."""
    return nb.metadata.get("ladder", {}).get("constants", {})


def constants(nb) -> set[str]:
    """The numbers the lesson lists as constants, as written."""
    return {m.group(0) for key in _listed(nb) for m in [_NUMBER.search(str(key))] if m}


def unquoted_constants(nb) -> list[str]:
    """The listed constants no markdown cell states any more, as written (a list kept up to date is a short one)."""
    prose = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    return [key for key in _listed(nb) if not re.search(rf"(?<![\w.]){re.escape(str(key))}(?![\w.]\w)", prose)]


def check(nb) -> tuple[list[Number], list[Finding]]:
    """Every number the prose of an nbformat notebook states, and the findings: those no output prints."""
    cut, known = sections(nb), constants(nb)
    checked, findings = [], []
    for section in cut:
        for cell, text in section.prose:
            for sentence in sentences(text):
                where = [section, *named_sections(sentence, cut)]
                for number in prose_numbers(sentence):
                    checked.append(number)
                    if number.text not in known and not any(printed(number, s.outputs) for s in where):
                        findings.append(Finding(cell, section.heading, number.text + number.unit,
                                                " ".join(sentence.split()), number.kind))
    return checked, findings


def unprinted(path) -> list[Finding]:
    """The numbers in a lesson's prose that the committed outputs of their sections do not print."""
    import nbformat   # here, not at the top: an optional dependency (the test and lab extras)
    return check(nbformat.read(str(path), 4))[1]


def main(argv: list[str] | None = None) -> int:
    """Each lesson's count of numbers not printed, its findings, and the total; 1 with --strict when any."""
    import nbformat
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args if a != "--strict"] or sorted(NOTEBOOKS.glob("*.ipynb"))
    total = checked_total = 0
    for path in paths:
        checked, findings = check(nbformat.read(str(path), 4))
        kinds = ", ".join(f"{kind} {sum(f.kind == kind for f in findings)}/{sum(n.kind == kind for n in checked)}"
                          for kind in ("decimal", "percent", "integer"))
        print(f"{path.stem}: {len(findings)} of {len(checked)} numbers in prose not printed by their section's "
              f"outputs ({kinds})")
        for finding in findings:
            print(finding)
        total, checked_total = total + len(findings), checked_total + len(checked)
    print(f"total: {total} of {checked_total} numbers in prose not printed by their section's outputs")
    return 1 if "--strict" in args and total else 0


if __name__ == "__main__":
    sys.exit(main())
