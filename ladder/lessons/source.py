"""The kernel-source viewer every lesson prints with, and the readers of a kernel file's constants.

A rung's file after its header comment (the lesson's prose says what the comment says), the diff from the rung
before, a header's declarations, Python functions and Triton kernels; `show_cuda_rung` puts them together for a
CUDA ladder whose later rungs switch code on with `#if NAME` blocks in earlier rungs' files: the versions a later
rung adds are folded to one line, and a rung that only #defines switches shows the lines they change. The counts
of code lines (`lines_of_code`, `compiled_lines`) and the readers of a .cu file's `#define` and `const int`
values (`cu_define`, `cu_expression`), which the diagrams and the exercises draw from, live here too.
"""
from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import re
import textwrap
from pathlib import Path

from ladder import problems
from ladder.runtime import cuda

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------- a file, a diff, a Python function

def _header_and_body(path: str) -> tuple[list[str], list[str]]:
    """A kernel file's header comment (its idea, prediction and SASS signature, which the lesson's prose, prediction
    table and SASS table give) and the code after it."""
    return cuda.header_and_body((ROOT / path).read_text())


def show_source(path: str, off: set[str] = frozenset()) -> None:
    """A kernel file's code, after its header comment (a student reads the idea in the lesson's prose); `off`: the
    macros the file leaves off (switched_off), whose `#if NAME ... #else` versions of its code are folded."""
    header, body = _header_and_body(path)
    note = f"  (its {len(header)}-line header comment left out: the lesson's prose says it)" if header else ""
    print(f"// {path}{note}\n" + "\n".join(_folded(body, off, path)))


def _unified_diff(old: list[str], new: list[str], before: str, after: str, context: int = 2) -> list[str]:
    """A unified diff that ignores changes of indentation alone: code that a rung wraps in a new loop reads as
    context (indented as it is now), not as removed and added again."""
    matcher = difflib.SequenceMatcher(None, [line.strip() for line in old], [line.strip() for line in new],
                                      autojunk=False)
    lines = [f"--- {before}", f"+++ {after}"]
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + line for line in new[b1:b2]]
            else:
                lines += ["-" + line for line in old[a1:a2]] + ["+" + line for line in new[b1:b2]]
    return lines


DIFF_LINES = 40   # a diff a student reads on the main path: the hunks that carry the idea, not a second copy of the file


def show_diff(before: str, after: str, off: set[str] = frozenset(), hunks: int | list[int] | None = None,
              lines: int | None = DIFF_LINES) -> None:
    """The diff between two rungs' code (header comments left out): the one idea the second rung adds. Never the
    whole file under a diff's name: at most `lines` lines of hunks (None: no limit), then a line naming what was
    left out and the calls that show it. A rung that rewrites more than it keeps (its diff longer than its file,
    no `hunks` chosen) is shown as its file, and says so. `hunks`: the first so many hunks, or the numbers (from 1) of the hunks
    that carry the idea; `off` as show_source's."""
    old, new = _header_and_body(before)[1], _folded(_header_and_body(after)[1], off, after)
    diff = _unified_diff(old, new, before, after)
    starts = [i for i, line in enumerate(diff) if line.startswith("@@")]
    if not starts:   # the two file names alone: no hunk
        print(f"// {after}: the same code as {before}, line for line (its header comment aside)")
        return
    if len(diff) > len(new) and hunks is None:   # a rewrite: the diff would be longer than the new file
        includes = f'#include "{Path(before).name}"' in "\n".join(new)
        print(f"// {after} includes {before} whole and adds what follows: its whole file" if includes else
              f"// {after} rewrites more of {before} than it keeps: its whole file, not a diff")
        show_source(after, off)
        return
    blocks = [diff[a:b] for a, b in zip(starts, starts[1:] + [len(diff)])]
    chosen = (range(len(blocks)) if hunks is None else range(min(hunks, len(blocks))) if isinstance(hunks, int)
              else [n - 1 for n in hunks])
    body = [line for i in chosen for line in blocks[i]]
    shown = body if lines is None else body[:lines]
    print("\n".join(diff[:2] + shown))
    ends = dict(zip(chosen, itertools.accumulate(len(blocks[i]) for i in chosen)))   # a hunk's last line in body
    unseen = [i + 1 for i in range(len(blocks)) if i not in ends or ends[i] - len(blocks[i]) >= len(shown)]
    cut = next((i for i in chosen if ends[i] - len(blocks[i]) < len(shown) < ends[i]), None)
    if unseen or cut is not None:
        parts = [f"hunk {cut + 1} after its first {len(shown) - ends[cut] + len(blocks[cut])} lines"] if cut is not None else []
        parts += [f"hunk{'s' if len(unseen) > 1 else ''} {', '.join(map(str, unseen))}"] if unseen else []
        print(f"// ... {len(diff) - 2 - len(shown)} more lines of {len(blocks)} hunks ({'; '.join(parts)}): "
              f"lessons.source.show_diff({before!r}, {after!r}, lines=None); "
              f"the whole file: lessons.source.show_source({after!r})")


def show_declarations(path: str) -> None:
    """What a header of helpers offers: each top-level declaration with the comment above it, bodies elided."""
    shown, depth = [], 0
    for line in _header_and_body(path)[1]:
        opens = line.count("{") - line.count("}")
        if depth == 0 and line.strip():
            shown.append(line.rstrip() + (" ... }" if opens > 0 else ""))
        depth += opens
    print(f"// {path}: its declarations (bodies left out)\n" + "\n".join(shown))


def _python_function(obj):
    """The Python function behind a Triton kernel (jit, heuristics, autotune, interpreter wrappers)."""
    while not inspect.isfunction(obj) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj


def code(obj) -> str:
    return inspect.getsource(_python_function(obj)).rstrip()


def show_code(*objects) -> None:
    """The source of Python functions or Triton kernels, one after another."""
    print("\n\n".join(code(o) for o in objects))


def show_code_diff(before, after) -> None:
    """Unified diff between two functions or kernels: the one idea the second adds."""
    a, b = code(before).splitlines(), code(after).splitlines()
    print("\n".join(difflib.unified_diff(a, b, _python_function(before).__name__, _python_function(after).__name__,
                                         lineterm="", n=2)))


def lines_of_code(text: str, comment: str = "#") -> int:
    """Lines that are neither blank nor only a comment (docstrings count as code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(comment))


def python_code_lines(obj) -> int:
    """Lines of a function's code, neither blank nor comment, its docstring left out."""
    text = textwrap.dedent(code(obj))
    node = ast.parse(text).body[0]
    doc = node.body[0] if node.body and isinstance(node.body[0], ast.Expr) and isinstance(
        getattr(node.body[0], "value", None), ast.Constant) and isinstance(node.body[0].value.value, str) else None
    kept = text.splitlines()
    if doc is not None:
        del kept[doc.lineno - 1:doc.end_lineno]
    return lines_of_code("\n".join(kept))


def python_file_code_lines(path) -> int:
    """Lines of a Python file's code, neither blank nor comment, its docstrings (module, classes, functions) left
    out."""
    text = Path(path).read_text()
    docs = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines_of_code("\n".join(line for n, line in enumerate(text.splitlines(), 1) if n not in docs))


# ------------------------------------------------------------- a .cu file's constants

def cu_define(path: str, name: str) -> int:
    """The integer a .cu file (includes inlined) #defines `name` as, e.g. cu_define("matmul/3_smem_tiled.cu",
    "TILE") -> 32; the first definition wins, as in the preprocessor's #ifndef defaults."""
    m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)\b", cuda.source(path), re.M)
    if not m:
        raise KeyError(f"{path} does not #define {name} as a number")
    return int(m.group(1))


def cu_expression(path: str, variable: str) -> str:
    """The right-hand side of `const int <variable> = ...;` in a .cu file."""
    m = re.search(rf"\bconst\s+int\s+{variable}\s*=\s*([^;,]+)[;,]", cuda.source(path))
    if not m:
        raise KeyError(f"{path} has no `const int {variable} = ...`")
    return m.group(1).strip()


# ------------------------------------------------------------- the #if blocks a later rung switches on

def _quoted_includes(path: str) -> list[str]:
    """The files `path` (relative to the repository) includes with #include "...", relative to the repository."""
    here = (ROOT / path).parent
    return [str((here / name).resolve().relative_to(ROOT))
            for name in (m.group(2) for m in cuda.LOCAL_INCLUDE.finditer((ROOT / path).read_text()))]


def _include_chain(path: str) -> list[str]:
    """Every file `path` includes with #include "...", directly or through another, relative to the repository."""
    chain, todo = [], _quoted_includes(path)
    while todo:
        name = todo.pop(0)
        if name not in chain:
            chain.append(name)
            todo += _quoted_includes(name)
    return chain


def _directive(line: str) -> tuple[str, str]:
    """('if', condition), ('ifndef', name), ('endif', '') ... of a preprocessor line; ('', '') for code."""
    m = re.match(r"\s*#\s*(\w+)\s*(.*)", line)
    return (m.group(1), m.group(2).split("//")[0].strip()) if m else ("", "")


def _if_blocks(lines: list[str]) -> list[tuple[int, int | None, int]]:
    """(its #if line, its own #else or #elif line or None, its #endif line) of each #if/#ifdef/#ifndef block of
    `lines`, nested ones included, outermost first."""
    stack, found = [], []
    for i, line in enumerate(lines):
        kind = _directive(line)[0]
        if kind in ("if", "ifdef", "ifndef"):
            stack.append([i, None])
        elif kind in ("else", "elif") and stack and stack[-1][1] is None:
            stack[-1][1] = i
        elif kind == "endif" and stack:
            start, other = stack.pop()
            found.append((start, other, i))
    return sorted(found)


def _bare_if(line: str) -> str | None:
    """NAME of an `#if NAME` line (a macro tested alone), else None."""
    kind, condition = _directive(line)
    return condition if kind == "if" and re.fullmatch(r"\w+", condition) else None


def switched_off(path: str) -> set[str]:
    """The macros rung file `path` (its includes inlined) tests alone (`#if NAME`) and leaves off: never #defined,
    or #defined as 0 first (the preprocessor reads both as 0): the switches of later rungs that include it."""
    first: dict[str, str] = {}
    for name, value in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]*(\S*)", cuda.source(ROOT / path), re.M):
        first.setdefault(name, value)
    tested = {name for line in cuda.source(ROOT / path).splitlines() if (name := _bare_if(line))}
    return {name for name in tested if first.get(name, "0") == "0"}


def _defined_by(path: str, name: str) -> str:
    """The rung file beside `path` that #defines `name` ("10_intra_overlap.cu"), or "a later rung"."""
    for other in sorted((ROOT / path).parent.glob("*.cu")):
        if re.search(rf"^\s*#\s*define\s+{name}\b", other.read_text(), re.M):
            return other.name
    return "a later rung"


def _later_directives(lines: list[str], off: set[str]) -> set[int]:
    """The lines of `lines` that only a later rung (its macros `off`) reads, around code the earlier rungs compile:
    the #if and #endif of each `#if !NAME ... #endif` block (code the later rung drops) and each `#ifndef NAME`
    default of one."""
    hidden = set()
    for start, other, end in _if_blocks(lines):
        kind, condition = _directive(lines[start])
        if other is None and kind == "if" and condition.startswith("!") and condition[1:].strip() in off:
            hidden.update((start, end))
        elif kind == "ifndef" and condition in off and end == start + 2:
            hidden.update(range(start, end + 1))
    return hidden


def _folded(lines: list[str], off: set[str], path: str) -> list[str]:
    """`lines` with the code a later rung switches on folded to one line, which that rung's section shows: the
    first version of each `#if NAME ... #else` block whose NAME is `off`, and each `#if NAME ... #endif` block (no
    #else: code the later rung adds) whole. An `#if !NAME ... #endif` block (code the later rung drops) shows its
    lines without the two directives, as the earlier rungs compile them; an `#ifndef NAME` default is left out."""
    if not off:
        return lines
    folds, covered = [], -1
    for start, other, end in _if_blocks(lines):   # outermost first; a block inside a folded one goes with it
        if start > covered and _bare_if(lines[start]) in off and (other is None or other > start + 1):
            folds.append((start, other, end))
            covered = end if other is None else other
    hidden = _later_directives(lines, off)
    out = [None if i in hidden else line for i, line in enumerate(lines)]
    for start, other, end in reversed(folds):
        name, first = _bare_if(lines[start]), lines[start + 1]
        stop = other if other is not None else end
        count = stop - start - 1
        note = (f"{first[:len(first) - len(first.lstrip())]}// ... {count} line{'s' * (count > 1)} of "
                f"{_defined_by(path, name)} ({name})")
        if other is not None:
            out[start + 1:other] = [note]
        else:
            out[start:stop + 1] = [note]
    return [line for line in out if line is not None]


def compiled_lines(lines: list[str], off: set[str]) -> list[str]:
    """`lines` without the versions of code a rung does not compile: the first version of each `#if NAME` block
    whose NAME is `off` (with its directives), the #else version of one whose NAME is on (its #if and #endif kept,
    as a block's the rung compiles)."""
    dropped: set[int] = set()
    for start, other, end in _if_blocks(lines):
        name = _bare_if(lines[start])
        if name is None:
            continue
        if name in off:
            dropped.update(range(start, (other if other is not None else end) + 1), [end])
        elif other is not None:
            dropped.update(range(other, end))
    return [line for i, line in enumerate(lines) if i not in dropped]


def switched_on(path: str, macros: set[str], context: int = 1, off: set[str] = frozenset()) -> list[str]:
    """The lines of rung file `path` (its header comment left out) that the #defines `macros` of a rung including
    it change: every #if/#ifdef block whose condition names one of them, and every other line whose code reads
    one; an `#ifndef NAME` default of one of them is left out (the rung replaces it). An `#if NAME ... #else`
    block with NAME among `macros` shows its first version, the #else one (the earlier rungs') folded to one line.
    `off`: macros the rung leaves off (switched_off): their `#if NAME` versions are not what it compiles, left out
    (an #else's lines kept as code), and so are the directives around code they drop (_later_directives).
    `context` lines of the file around each, "..." between runs that are not adjacent."""
    lines = _header_and_body(path)[1]
    hidden = _later_directives(lines, off)
    notes: dict[int, str] = {}
    for start, other, end in _if_blocks(lines):
        name = _bare_if(lines[start])
        if name in off:    # this rung compiles the #else version (if any), as plain code
            hidden.update(range(start, (other if other is not None else end) + 1), [end])
        elif name in macros and other is not None and end > other + 1:
            hidden.update(range(other + 1, end))
            indent = lines[other + 1][:len(lines[other + 1]) - len(lines[other + 1].lstrip())]
            count = end - other - 1
            notes[other + 1] = (f"{indent}// ... {count} line{'s' * (count > 1)} without {name}: the earlier rungs' "
                                "version")
    kept = [i for i in range(len(lines)) if i not in hidden or i in notes]
    lines = [notes.get(i, lines[i]) for i in kept]
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(macros))) + r")\b") if macros else None
    shown, skipped, i = set(), set(), 0
    while names and i < len(lines):
        kind, condition = _directive(lines[i])
        if kind in ("if", "ifdef", "ifndef", "elif"):
            depth, end = 0, i
            for end in range(i, len(lines)):
                k = _directive(lines[end])[0]
                depth += (k in ("if", "ifdef", "ifndef")) - (k == "endif")
                if depth == 0:
                    break
            if names.search(condition):
                (skipped if kind == "ifndef" else shown).update(range(i, end + 1))
                i = end + 1
                continue
        elif names.search(lines[i].split("//")[0]):
            shown.add(i)
        i += 1
    around = {j for i in shown for j in range(i - context, i + context + 1)
              if 0 <= j < len(lines) and j not in skipped}
    out, last = [], None
    for j in sorted(around):
        if last is not None and j != last + 1:
            out.append("    ...")
        out.append(lines[j])
        last = j
    return out


def _defines(source: str) -> dict[str, str]:
    """The #define lines of a rung file (its header comment left out), by the name each defines."""
    return {m.group(1): m.group(0).strip() for m in
            re.finditer(r"^\s*#\s*define\s+(\w+).*$", "\n".join(_header_and_body(source)[1]), re.M)}


def _show_switched_on(source: str, before: str | None = None) -> None:
    """For a rung file that #defines macros: what the defines it adds to the rung `before` (its own, without one)
    change in the files it includes (the earlier rungs' code, shown above, is not repeated; a later rung's, off
    here, is left out)."""
    earlier = _defines(before) if before else {}
    macros = {name for name, line in _defines(source).items() if earlier.get(name) != line}
    off = switched_off(source)
    chain, todo = [], [p for p in _quoted_includes(source) if p.endswith(".cu")]
    while todo:
        path = todo.pop(0)
        chain.append(path)
        todo += [p for p in _quoted_includes(path) if p.endswith(".cu") and p not in chain]
    for path in chain:
        changed = switched_on(path, macros, off=off)
        if macros and changed:
            print(f"\n// the lines of {path} that read {', '.join(sorted(macros))}: "
                  "what this rung's defines change there")
            print("\n".join(changed))
    # a switch no rung file reads (rung 11's FAST_EXP2: `#if NAME` in a shared header): shown there, with the
    # function around it
    unread = {m for m in macros if not any(switched_on(path, {m}, off=off) for path in chain)}
    for path in dict.fromkeys(h for p in [source, *chain] for h in _quoted_includes(p) if h.endswith(".cuh")):
        switches = unread & {name for line in (ROOT / path).read_text().splitlines() if (name := _bare_if(line))}
        if switches:
            print(f"\n// the lines of {path} that read {', '.join(sorted(switches))}: what this rung's defines "
                  "change there")
            print("\n".join(switched_on(path, switches, context=4, off=off)))


# ------------------------------------------------------------- a CUDA rung, as a lesson shows it

_SHOWN_INCLUDES: set = set()   # the headers shown so far in this session (a notebook's kernel)
# The lesson that teaches each shared header of kernels/cuda/matmul/ that other ladders include.
BUILDING_BLOCKS = {"tensor_core.cuh": "02a", "tma.cuh": "02b", "cluster.cuh": "02c"}


def show_cuda_rung(problem, number: int, hunks: int | list[int] | None = None, lines: int | None = DIFF_LINES) -> None:
    """CUDA rung `number` of `problem`: its diff from the CUDA rung before (show_diff's: at most 40 lines, of the
    `hunks` that carry the idea), or the file for a ladder's first rung; for a rung that #defines macros and includes an earlier rung's file, the lines those defines
    change there; then the headers beside it that it includes, each once per session."""
    cuda_rungs = [r for r in problem.rungs if r.backend == "cuda"]
    mine = [r for r in cuda_rungs if r.name.split("_")[0] == str(number)]
    if not mine:
        print(f"no CUDA rung {number} in {problem.name} yet")
    try:
        ladder = [r for r in problems.get(problem.name).rungs if r.backend == "cuda"]
    except problems.UnknownName:   # a problem made for one lesson (l04d's backward_problem): no earlier lessons
        ladder = cuda_rungs
    # the rungs before this lesson's (an earlier lesson's): a header one of them includes was shown with it
    earlier = ladder[:ladder.index(cuda_rungs[0])] if cuda_rungs and cuda_rungs[0] in ladder else []

    def shown_with(path: Path):
        return next((r for r in earlier if str(path) in _include_chain(r.source)), None)

    def includes(source: str) -> None:
        here = (ROOT / source).parent
        for name in _quoted_includes(source):
            path = Path(name)
            if path.suffix == ".cu" or path in _SHOWN_INCLUDES:   # a rung file: its diff was shown
                continue
            _SHOWN_INCLUDES.add(path)
            if (ROOT / path).parent == here and shown_with(path):
                print(f"// {source} includes {path} (its declarations are shown with rung {shown_with(path).name}, "
                      "in an earlier lesson)\n")
            elif (ROOT / path).parent == here:
                print(f"// ===== {path}, included by {source}\n")
                show_declarations(str(path))
                includes(str(path))
            else:
                lesson_of = BUILDING_BLOCKS.get(path.name, "02a")
                print(f"// {source} includes {path} (lesson {lesson_of}'s building blocks)\n")

    for rung in mine:
        i = cuda_rungs.index(rung)
        off = switched_off(rung.source)   # later rungs' switches: their versions of this file's code are folded
        before = cuda_rungs[i - 1].source if i else None
        if before:
            show_diff(before, rung.source, off, hunks, lines)
        else:
            show_source(rung.source, off)
        _show_switched_on(rung.source, before)
        includes(rung.source)


def kernel_lines(path: str, first: str, count: int = 10, after: str | None = None) -> str:
    """`count` lines of a kernel file (path from the repository root) from the first line that contains `first`
    (searching from the first line containing `after`, if given), under a comment naming the file and lines: a
    quote a lesson prints, read from the file so that it stays true."""
    lines = (ROOT / path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    at = next((i for i in range(start, len(lines)) if first in lines[i]), None)
    if at is None:
        raise KeyError(f"{path} has no line containing {first!r}")
    body = lines[at:at + count]
    indent = min(len(line) - len(line.lstrip()) for line in body if line.strip() and not line.startswith("#"))
    return "\n".join([f"// {path}, lines {at + 1}-{at + len(body)}"]
                     + [line if line.startswith("#") else line[indent:] for line in body])
