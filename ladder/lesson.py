"""Small helpers the notebooks call: show a rung's source, the diff from the previous rung,
and the SASS signature table."""
from __future__ import annotations

import difflib
from pathlib import Path

from ladder import sass

ROOT = Path(__file__).resolve().parent.parent


def show_source(path: str) -> None:
    print((ROOT / path).read_text())


def show_diff(before: str, after: str) -> None:
    """Unified diff between two rungs' files: the one idea the second rung adds."""
    a, b = (ROOT / before).read_text().splitlines(), (ROOT / after).read_text().splitlines()
    print("\n".join(difflib.unified_diff(a, b, before, after, lineterm="", n=2)))


def load_widths(variants: dict[str, sass.Sass]) -> str:
    """'name: 16-bit global loads' per variant (stable across compiler versions)."""
    return "\n".join(f"{name:28s} global loads: " + ", ".join(f"{b}-bit" for b in sorted(s.global_load_bits()))
                     for name, s in variants.items())
