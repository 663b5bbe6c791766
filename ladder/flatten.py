"""CUDA attention rungs 7-15, each one readable file, generated from the one kernel they share.

The source of truth is kernels/cuda/attention/hopper_overlays/: 7_wgmma_tma.cu is the Hopper kernel once, with an
`#if` for each later rung's idea, and 8_warp_specialized.cu ... 15_autotuned.cu are a few `#define`s each (the
rung's switches: PINGPONG, INTRA_OVERLAP, CONSUMERS, ...) and an `#include` of the rung before. From them
`python -m ladder.flatten` writes each rung's file beside the other rungs, at the path the launchers compile and the
lessons show (kernels/cuda/attention/9_pingpong.cu): the rung's header comment, a line saying where it comes from,
then the whole kernel as that rung compiles it, top to bottom. `python -m ladder.flatten --check` writes nothing
and exits 1 when a committed file is not what the source gives.

What `flatten` resolves, a partial preprocessor:

* the switches: the macros the rung files 8-15 #define (`switches()`). An `#if`, `#ifdef`, `#ifndef` or `#elif`
  whose condition reads only switches and HEAD_DIM is resolved when it comes out the same in every configuration
  the rung is compiled with (`configurations`: the launcher's for both head dimensions, and for rung 15 every
  configuration of its search, which passes CONSUMERS): its directives go, and so does every branch not taken. A
  condition that comes out differently (rung 12's `#if HEAD_DIM == 64 && !defined(CONSUMERS)`) stays as written,
  and each configuration goes on through the branch it takes; one that reads any other macro (STAGES,
  __CUDA_ARCH__) stays as written, and a switch #defined inside it is an error (FlattenError), not a guess.
* a resolved directive's trailing comment stays, as a comment line, where the branch it opens is the one kept and
  its condition is positive (`#if PINGPONG  // ...`); a negative one's (`#ifndef`, `#if !X`) says what a later
  rung does instead, and goes with the directive.
* the family's own `#include "8_warp_specialized.cu"` (a .cu file of hopper_overlays/) is inlined, each file once
  and without its header comment (that rung's idea, not this one's); every other `#include "..."` (flash_mma.cuh,
  ../matmul/tma.cuh: headers rungs 1-6 and the matmul ladder share, which the lessons show once) stays an include,
  its path written from the generated file's folder. flash_mma.cuh reads one switch, FAST_EXP2 (rung 11): its
  `#define` stays in rungs 11-15, ahead of the include, as it is in the overlay.
* a switch's `#define` stays where anything left reads the macro (CONSUMERS in BLOCK_M's definition, SHORT_PATH
  in issue_scores, FAST_EXP2 in flash_mma.cuh, a condition that stays); one only the resolved conditions read
  (PINGPONG, INTRA_OVERLAP, PERSISTENT) goes with them.
Every other line, directive and comment is left as it is (runs of blank lines that removed blocks leave are
folded to one). tests/test_flattened_rungs.py checks that the committed files are what this writes, and that the
compiler sees the same program in both, for every configuration each rung is compiled with.
"""
from __future__ import annotations

import argparse
import operator
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from ladder.runtime import cuda
from ladder.runtime.cuda import KERNELS_DIR


OUT_DIR = KERNELS_DIR / "attention"
SOURCE_DIR = OUT_DIR / "hopper_overlays"
HEAD_DIMS = (64, 128)
EVALUATED = frozenset({"HEAD_DIM"})   # besides the switches: every configuration passes it, always a number

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)(.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)(\(?)(.*)$")
_IDENT = re.compile(r"[A-Za-z_]\w*")


class FlattenError(RuntimeError):
    pass


def rungs() -> list[str]:
    """The rung files of the family, in rung order: ["7_wgmma_tma", "8_warp_specialized", ...]."""
    return sorted((p.stem for p in SOURCE_DIR.glob("*.cu") if re.match(r"\d+_", p.stem)),
                  key=lambda name: int(name.split("_")[0]))


# The op's switch: hopper_overlays/op_attention.cu (ladder.ops' launch of rung 15, not a rung) #defines it; every
# rung leaves it off, so its #if blocks leave the rungs' files.
OP_SWITCHES = frozenset({"OP_LAYOUT"})


def switches() -> frozenset[str]:
    """The rung-picking macros: every macro a rung file after the kernel's #defines, and OP_SWITCHES."""
    return OP_SWITCHES | frozenset(m.group(1) for name in rungs()[1:] for line in
                                   (SOURCE_DIR / f"{name}.cu").read_text().splitlines() if (m := _DEFINE.match(line)))


def configurations(rung: str) -> list[dict]:
    """The -D defines `rung` is compiled with: the launcher's (kernels/cuda/attention.py HOPPER) at each head
    dimension, and for rung 15 also every configuration of its search (autotuned_launch: CONSUMERS and
    CONSUMER_REGISTERS too), pruned or not."""
    found = [dict(HEAD_DIM=D, **cuda_attention.hopper_launch(rung, D)[0]) for D in HEAD_DIMS]
    if rung == "15_autotuned":
        found += [dict(HEAD_DIM=D, **cuda_attention.autotuned_launch(c)[0])
                  for D in HEAD_DIMS for c in at.HOPPER_TUNERS[D].configs()]
    unique = {tuple(sorted(c.items())): c for c in found}
    return list(unique.values())


# ------------------------------------------------------------- conditions

_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_]\w*|&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%()<>!~&|^?:,])")


def _tokens(expr: str) -> list[str]:
    expr = re.sub(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    out, i = [], 0
    while i < len(expr):
        m = _TOKEN.match(expr, i)
        if not m:
            raise FlattenError(f"cannot read the condition {expr!r}")
        out.append(m.group(1))
        i = m.end()
        while i < len(expr) and expr[i].isspace():
            i += 1
    return out


_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"), ("+", "-"),
           ("*", "/", "%")]   # C's binary operators, loosest first
_APPLY = {"|": operator.or_, "^": operator.xor, "&": operator.and_, "==": operator.eq, "!=": operator.ne,
          "<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge, "<<": operator.lshift,
          ">>": operator.rshift, "+": operator.add, "-": operator.sub, "*": operator.mul,
          "/": lambda v, w: int(v / w), "%": lambda v, w: v - int(v / w) * w}   # C divides toward zero


class _Expression:
    """An #if condition's value under one configuration's macros (C's rules: an undefined name is 0)."""

    def __init__(self, tokens: list[str], env: dict[str, str], depth: int = 0):
        self.tokens, self.env, self.depth, self.i = tokens, env, depth, 0

    def value(self) -> int:
        v = self._binary(0)
        if self.i != len(self.tokens):
            raise FlattenError(f"cannot read the condition {' '.join(self.tokens)!r}")
        return v

    def _next(self) -> str:
        if self.i >= len(self.tokens):
            raise FlattenError(f"the condition {' '.join(self.tokens)!r} ends early")
        self.i += 1
        return self.tokens[self.i - 1]

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _binary(self, level: int) -> int:
        if level == len(_BINARY):
            return self._unary()
        v = self._binary(level + 1)
        while self._peek() in _BINARY[level]:
            op = self._next()
            w = self._binary(level + 1)   # both sides read: an #if has no side effects to skip
            if op in ("||", "&&"):
                v = int(bool(v) or bool(w)) if op == "||" else int(bool(v) and bool(w))
            else:
                v = int(_APPLY[op](v, w))
        return v

    def _unary(self) -> int:
        t = self._next()
        if t == "!":
            return int(not self._unary())
        if t in "-+~" and len(t) == 1:
            v = self._unary()
            return -v if t == "-" else ~v if t == "~" else v
        if t == "(":
            v = self._binary(0)
            if self._next() != ")":
                raise FlattenError(f"unbalanced parentheses in {' '.join(self.tokens)!r}")
            return v
        if t == "defined":
            name = self._next()
            if name == "(":
                name = self._next()
                if self._next() != ")":
                    raise FlattenError(f"cannot read defined(...) in {' '.join(self.tokens)!r}")
            return int(name in self.env)
        if t[0].isdigit():
            return int(t, 0)
        if _IDENT.fullmatch(t):
            if t not in self.env:
                return 0
            if self.depth > 16 or not self.env[t].strip():
                raise FlattenError(f"{t} has no value an #if can read: {self.env[t]!r}")
            return _Expression(_tokens(self.env[t]), self.env, self.depth + 1).value()
        raise FlattenError(f"cannot read {t!r} in {' '.join(self.tokens)!r}")


def _condition(kind: str, arg: str) -> str:
    """A conditional directive's condition as an #if expression."""
    if kind in ("ifdef", "ifndef"):
        name = arg.split()[0]
        return f"defined({name})" if kind == "ifdef" else f"!defined({name})"
    return arg


def _reads(condition: str) -> set[str]:
    return set(_IDENT.findall(condition)) - {"defined"}


# ------------------------------------------------------------- lines and blocks

@dataclass
class _Line:
    """A logical line: its physical lines (a directive may go on with a backslash), and for a directive its
    kind ('if', 'define', ...), what follows the name with comments left out, and its trailing // comment."""
    physical: list[str]
    kind: str = ""
    arg: str = ""
    comment: str = ""


@dataclass
class _Conditional:
    branches: list[tuple[_Line, list]] = field(default_factory=list)   # (#if/#elif/#else line, its body)
    endif: _Line | None = None


def _strip_comment(text: str) -> tuple[str, str]:
    """(code, trailing // comment) of a directive's text; /* ... */ comments dropped from the code."""
    code = re.sub(r"/\*.*?\*/", " ", text)
    at = code.find("//")
    return (code, "") if at < 0 else (code[:at], code[at:].strip())


def _lines(text: str) -> list[_Line]:
    out, physical, in_comment = [], text.split("\n"), False
    i = 0
    while i < len(physical):
        line = physical[i]
        m = None if in_comment else _DIRECTIVE.match(line)
        if m is None:
            out.append(_Line([line]))
            # a /* that this line leaves open makes the next lines comment, not directives
            for opened in re.finditer(r"/\*|\*/", re.sub(r"//.*", "", line) if not in_comment else line):
                in_comment = opened.group() == "/*"
            i += 1
            continue
        lines = [line]
        while lines[-1].endswith("\\") and i + 1 < len(physical):
            i += 1
            lines.append(physical[i])
        joined = " ".join(part.rstrip("\\") for part in lines)
        code, comment = _strip_comment(_DIRECTIVE.match(joined).group(2))
        out.append(_Line(lines, m.group(1), code.strip(), comment))
        i += 1
    return out


def _blocks(lines: list[_Line]) -> list:
    """`lines` with each #if ... #endif as one _Conditional (nested ones inside its branches)."""
    stack: list[tuple[list, _Conditional | None]] = [([], None)]
    for line in lines:
        if line.kind in ("if", "ifdef", "ifndef"):
            block = _Conditional([(line, [])])
            stack[-1][0].append(block)
            stack.append((block.branches[0][1], block))
        elif line.kind in ("elif", "else"):
            if stack[-1][1] is None:
                raise FlattenError(f"#{line.kind} without #if: {line.physical[0]!r}")
            block = stack.pop()[1]
            block.branches.append((line, []))
            stack.append((block.branches[-1][1], block))
        elif line.kind == "endif":
            if stack[-1][1] is None:
                raise FlattenError(f"#endif without #if: {line.physical[0]!r}")
            stack.pop()[1].endif = line
        else:
            stack[-1][0].append(line)
    if len(stack) != 1:
        raise FlattenError("an #if without its #endif")
    return stack[0][0]


def _indent(text: str) -> str:
    return text[:len(text) - len(text.lstrip())]


# ------------------------------------------------------------- the partial preprocessor

@dataclass
class _Out:
    """A piece of the output: its lines, and for a switch's #define the switch's name."""
    lines: list[str]
    defines: str | None = None


class _Flattener:
    def __init__(self, source: Path, configs: list[dict], switches: frozenset[str], out_dir: Path):
        self.source, self.switches, self.out_dir = source.resolve(), switches, out_dir.resolve()
        self.evaluated = switches | EVALUATED
        # each configuration's macros among those conditions may be resolved on: name -> its replacement text
        self.envs = [{k: str(v) for k, v in c.items() if k in self.evaluated} for c in configs]
        self.inlined: set[Path] = set()
        self.headers: list[Path] = []   # the #include "..." files kept as includes

    def file(self, path: Path, envs: list[dict], uncertain: bool) -> list[_Out]:
        path = path.resolve()
        self.inlined.add(path)
        body = "\n".join(cuda.header_and_body(path.read_text())[1])
        return self.walk(_blocks(_lines(body)), envs, uncertain, path)

    def walk(self, nodes: list, envs: list[dict], uncertain: bool, path: Path) -> list[_Out]:
        out: list[_Out] = []
        for node in nodes:
            if isinstance(node, _Conditional):
                out += self.conditional(node, envs, uncertain, path)
            else:
                out += self.line(node, envs, uncertain, path)
        return out

    def line(self, line: _Line, envs: list[dict], uncertain: bool, path: Path) -> list[_Out]:
        if line.kind in ("define", "undef"):
            name = line.arg.split("(")[0].split()[0]
            if name in self.evaluated:
                if uncertain:
                    raise FlattenError(f"{path.name}: {line.physical[0].strip()!r} under a condition that reads "
                                       "macros other than the switches: cannot tell which rungs it is in")
                if line.kind == "define" and _DEFINE.match(" ".join(line.physical)).group(2):
                    raise FlattenError(f"{path.name}: switch {name} defined as a function-like macro")
                for env in envs:
                    if line.kind == "define":
                        env[name] = line.arg[len(name):].strip()
                    else:
                        env.pop(name, None)
                return [_Out(line.physical, name if line.kind == "define" and name in self.switches else None)]
            return [_Out(line.physical)]
        m = cuda.LOCAL_INCLUDE.match(line.physical[0]) if line.kind == "include" else None
        if m is None:
            return [_Out(line.physical)]
        target = (path.parent / m.group(2)).resolve()
        if not target.exists():
            raise FlattenError(f"{path.name}: included file {m.group(2)!r} not found")
        if target.parent == self.source.parent and target.suffix == ".cu":   # the family's: inlined, once
            return [] if target in self.inlined else self.file(target, envs, uncertain)
        self.headers.append(target)
        where = Path(os.path.relpath(target, self.out_dir)).as_posix()
        return [_Out([f'{m.group(1)}"{where}"{m.group(3)}'])]

    def conditional(self, block: _Conditional, envs: list[dict], uncertain: bool, path: Path) -> list[_Out]:
        if not envs:   # no configuration reaches it: nothing to resolve it by, so it stays as written
            return [_Out([text for line in _raw(block) for text in line.physical])]
        out: list[_Out] = []
        remaining, kept = list(envs), False   # the configurations no branch above has taken
        for directive, body in block.branches:
            if not remaining:
                break   # every configuration took a branch above: the rest is no rung's code
            condition = "1" if directive.kind == "else" else _condition(directive.kind, directive.arg)
            if not _reads(condition) <= self.evaluated:   # reads STAGES, __CUDA_ARCH__, ...: stays, either way
                out.append(_Out([_opening(directive, kept)] + directive.physical[1:]))
                out += self.walk(body, remaining, True, path)
                kept = True
                continue
            taking = [env for env in remaining if _Expression(_tokens(condition), env).value()]
            if not taking:
                continue
            if len(taking) < len(remaining):   # the configurations differ here: the directive stays
                out.append(_Out([_opening(directive, kept)] + directive.physical[1:]))
                out += self.walk(body, taking, uncertain, path)
                remaining = [env for env in remaining if not any(env is t for t in taking)]
                kept = True
                continue
            inner = self.walk(body, taking, uncertain, path)   # every configuration left takes this branch
            if kept:
                out.append(_Out(["#else" + (f"  {directive.comment}" if directive.comment else "")]))
            elif directive.comment and _positive(directive) and (first := _first_code(inner)) is not None:
                out.append(_Out([_indent(first) + directive.comment]))
            out += inner
            remaining = []
        if kept:
            out.append(_Out(block.endif.physical))
        return out

    def flatten(self) -> str:
        header = cuda.header_and_body(self.source.read_text())[0]
        pieces = self.file(self.source, self.envs, False)
        pieces = _without_unread_switches(pieces, self.headers)
        where = Path(os.path.relpath(self.source, self.out_dir)).as_posix()
        note = [f"// Generated from {where} by `python -m ladder.flatten`: do not edit; edit there."]
        body = [text for piece in pieces for text in piece.lines]
        folded: list[str] = []
        for text in body:
            if text.strip() or (folded and folded[-1].strip()):
                folded.append(text)
        while folded and not folded[-1].strip():
            folded.pop()
        return "\n".join(header + note + folded) + "\n"


def _raw(block: _Conditional) -> list[_Line]:
    out = []
    for directive, body in block.branches:
        out.append(directive)
        for node in body:
            out += _raw(node) if isinstance(node, _Conditional) else [node]
    return out + [block.endif]


def _opening(directive: _Line, after_kept: bool) -> str:
    """A directive that stays: as written, but an #elif whose branches above all went is now the #if."""
    first = directive.physical[0]
    if directive.kind == "elif" and not after_kept:
        return re.sub(r"#(\s*)elif", r"#\1if", first, count=1)
    return first


def _positive(directive: _Line) -> bool:
    """An #if (#ifdef, #elif, #else) whose comment says what its own branch does; an #ifndef's or #if !X's says
    what a later rung does instead."""
    return directive.kind in ("ifdef", "else") or (directive.kind in ("if", "elif")
                                                     and not directive.arg.lstrip().startswith("!"))


def _first_code(pieces: list[_Out]) -> str | None:
    return next((text for piece in pieces for text in piece.lines if text.strip()), None)


def _code_names(text: str) -> set[str]:
    """The identifiers of C++ text outside its comments and strings."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', " ", text)
    text = re.sub(r"//[^\n]*", " ", text)
    return set(_IDENT.findall(text))


def _without_unread_switches(pieces: list[_Out], headers: list[Path]) -> list[_Out]:
    """`pieces` without the #defines of switches that nothing left reads (what only the resolved conditions read)."""
    read = set()
    for header in headers:
        read |= _code_names(cuda.source(header))
    read |= _code_names("\n".join(text for piece in pieces if piece.defines is None for text in piece.lines))
    defines = [piece for piece in pieces if piece.defines is not None]
    while True:   # a kept switch's value may read another
        more = {name for piece in defines if piece.defines in read
                for name in _code_names("\n".join(piece.lines)) - {piece.defines, "define"}}
        if more <= read:
            break
        read |= more
    return [piece for piece in pieces if piece.defines is None or piece.defines in read]


def flatten(rung: str, configs: list[dict] | None = None) -> str:
    """The text of rung `rung`'s generated file (rung 7 included: its own switches, all off, resolved too)."""
    return _Flattener(SOURCE_DIR / f"{rung}.cu", configurations(rung) if configs is None else configs, switches(),
                      OUT_DIR).flatten()


def generated() -> dict[Path, str]:
    """Each generated file's path and the text it should hold."""
    return {OUT_DIR / f"{rung}.cu": flatten(rung) for rung in rungs()}


def stale() -> list[Path]:
    """The generated files whose committed text is not what the source gives."""
    return [path for path, text in generated().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ladder.flatten", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = parser.parse_args(argv)
    files = generated()
    old = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in old:
            print(f"stale: {path.relative_to(KERNELS_DIR.parent.parent)} (run `python -m ladder.flatten`)")
        return 1 if old else 0
    for path in old:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(KERNELS_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
