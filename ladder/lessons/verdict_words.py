"""A Why's verdict words agree with the verdicts printed above it: "**Why (hits at both shapes).**" over a cell that
prints a miss, or "three misses, one hit" over two of each, is prose a re-run left behind (ladder.lessons.numbers
checks the numbers, not these words).

A Why's parenthesis is read for counts ("three misses, one hit"), for all-or-none ("hits at every shape", "a miss at
every shape", "misses both ways") and for a bare "a hit" / "a miss" (at least one). The verdicts are the hit/miss
words the outputs print (`1.82x hit`, `95.02% miss ↑`, `-> HIT`) between the section's heading and the Why; in a
"Rung N" section only rung N's rows count, where its rows name it (`cuda:9_persistent ...`).

    python -m ladder.lessons.verdict_words [notebooks...]
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ladder.lessons.numbers import NOTEBOOKS, output_text

WHY = re.compile(r"\*\*Why \(([^)]*)\)")
SECTION = re.compile(r"^#{1,2}\s+(.*)", re.M)
RUNG = re.compile(r"\bRung (\d+)\b")
VERDICT = re.compile(r"\d[\d.]*(?:x|×|%)\s+(hit|miss)\b|->\s*(HIT|MISS)\b")
COUNT_WORDS = {w: n for n, w in enumerate(("no", "one", "two", "three", "four", "five", "six", "seven", "eight"))}
COUNTED = re.compile(rf"\b({'|'.join(COUNT_WORDS)}|\d+) (hits?|miss(?:es)?)\b", re.I)
ALL_HITS = re.compile(r"\bhits? (?:at (?:both|every|all)|everywhere)\b|\bhits at every\b", re.I)
ALL_MISSES = re.compile(r"\bmiss(?:es)? (?:at (?:both|every|all)|both ways)\b|\bmisses, all\b", re.I)
SOME = re.compile(r"\b(hits?|miss(?:es)?)\b", re.I)


@dataclass
class Finding:
    """A Why whose parenthesis says what the hits and misses printed above it do not bear out."""
    cell: int
    claim: str
    hits: int
    misses: int

    def __str__(self) -> str:
        return f"  cell {self.cell:3d}: Why ({self.claim}) over {self.hits} hit(s), {self.misses} miss(es) printed"


def _kind(word: str) -> str:
    return "hit" if word.lower().startswith("hit") else "miss"


def verdicts(text: str, rung: str | None) -> dict[str, int]:
    """Hits and misses printed in `text`; with `rung`, only on lines naming `<backend>:<rung>_` if any do."""
    lines = text.splitlines()
    if rung is not None:
        own = [line for line in lines if re.search(rf"\b\w+:{rung}_\w+", line)]
        lines = own or lines
    found = {"hit": 0, "miss": 0}
    for line in lines:
        for match in VERDICT.finditer(line):
            found[_kind(match.group(1) or match.group(2))] += 1
    return found


def disagrees(claim: str, found: dict[str, int]) -> bool:
    """Whether a Why's parenthesis says something about its verdicts that `found` contradicts."""
    counted = COUNTED.findall(claim)
    if counted:
        said = {"hit": 0, "miss": 0}
        for number, word in counted:
            said[_kind(word)] += int(number) if number.isdigit() else COUNT_WORDS[number.lower()]
        return any(said[k] != found[k] for k in said if any(_kind(w) == k for _, w in counted))
    if ALL_HITS.search(claim):
        return found["miss"] > 0 or found["hit"] == 0
    if ALL_MISSES.search(claim):
        return found["hit"] > 0 or found["miss"] == 0
    return any(found[_kind(word)] == 0 for word in SOME.findall(claim))


def check(nb) -> list[Finding]:
    findings, outputs, rung = [], "", None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            outputs += output_text(cell) + "\n"
            continue
        if cell.cell_type != "markdown":
            continue
        heading = SECTION.search(cell.source)
        if heading and not cell.source.lstrip().startswith("**Why"):
            outputs, found_rung = "", RUNG.search(heading.group(1))
            rung = found_rung.group(1) if found_rung else None
        for claim in WHY.findall(cell.source):
            if not SOME.search(claim):
                continue
            found = verdicts(outputs, rung)
            if sum(found.values()) and disagrees(claim, found):
                findings.append(Finding(index, claim, found["hit"], found["miss"]))
    return findings


def main(argv: list[str] | None = None) -> int:
    import nbformat   # an optional dependency (the test and lab extras)
    args = sys.argv[1:] if argv is None else argv
    total = 0
    for path in [Path(a) for a in args] or sorted(NOTEBOOKS.glob("*.ipynb")):
        findings = check(nbformat.read(str(path), 4))
        print(f"{path.stem}: {len(findings)} Why(s) whose verdict words the outputs above contradict")
        for finding in findings:
            print(finding)
        total += len(findings)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
