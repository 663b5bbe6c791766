"""A PTX pass for Triton's pipelined TMA loops on Hopper: the CTA barrier before each refill, split.

Triton places CTA barriers (`bar.sync 0`) next to the mbarrier waits, TMA issues and wgmma of a pipelined loop (its
Membar analysis treats the mbarriers and the ring as shared memory any thread may touch): three a key block in rung
7's attention loop under Triton 3.6, five under 3.9. One orders something: the refill of a ring slot after every
warp's last read of it. The others order nothing: every access before them since the last barrier is an mbarrier
wait or arrival, a TMA issue (which the mbarriers order themselves) or a wgmma still in flight (its reads end at a
`wgmma.wait_group`, which no barrier after its issue waits for). The one left is needed, but only by the warps that
issue the copies: the others need only say they are done. Split into `bar.sync` (issuers) and `bar.arrive` (the
rest), the warpgroups stop meeting once a key block and one's softmax can run under the other's products (CUDA
rung 9's turns, unscheduled).

`split_refill_barriers` does both to a kernel's PTX, and changes nothing unless the PTX has the shape this was
written for (a loop with one barrier left, followed by the loop's TMA copies, each issued by warps a `tid < 32k`
test picks, no named barriers in use, 8 warps or more: with one warpgroup there is no lockstep to end; a ring of 3
stages at most, MAX_STAGES).
`refill_barriers_split()` applies it to what Triton compiles inside it (chained after a stages hook already
installed) and writes what it changed into each compiled kernel's metadata (`applied`); with require=True a kernel
it leaves unchanged fails to compile (PassDidNotApply). Triton attention's rung 8 (kernels/attention.py,
`triton_barrier_pass`) is rung 7's kernel (kernels/triton/attention.py, flash_tma_kernel) compiled through it."""
from __future__ import annotations

import functools
import hashlib
import re
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import triton
from triton.runtime.errors import PTXASError


NAME = "split_refill_barriers"   # the pass, as recorded rows and Triton's cache key name it

_LABEL = re.compile(r"^(\$L__\w+):")
_BRANCH = re.compile(r"^(@!?%p\d+\s+)?bra(\.uni)?\s+(\$L__\w+);")
_BARRIER = re.compile(r"^bar\.sync\s+0;")
# what a CTA barrier may be there to order: any memory, fence or barrier instruction
_MEMORY = re.compile(r"^(@!?%p\d+\s+)?(ld|st|atom|red|cp|wgmma|ldmatrix|stmatrix|fence|membar|mbarrier|bar|barrier"
                     r"|tcgen05|griddepcontrol|multimem|prefetch|cvta|isspacep|tensormap)\b")
# ... but these the mbarriers order themselves
_ORDERED_BY_MBARRIERS = re.compile(r"^(@!?%p\d+\s+)?(mbarrier\.try_wait\.parity\.shared|mbarrier\.arrive\.expect_tx"
                                   r"\.shared|cp\.async\.bulk\.tensor\.\dd\.shared::(cluster|cta)\.global\.mbarrier)")
# ... and a barrier cannot order a wgmma still in flight: it reads shared memory until a wgmma.wait_group, which
# is what a barrier after it orders (these three only issue it)
_ASYNC_WGMMA_ISSUE = re.compile(r"^(@!?%p\d+\s+)?wgmma\.(fence|mma_async|commit_group)\b")
MIN_THREADS = 256   # two warpgroups
# The ring depth (Triton's num_stages) the split is safe for. A warp that only arrives runs ahead of the issuers by
# at most the refills in flight, stages - 1: so many generations of the refill barrier can be pending at once, and
# named barriers 1 and 2 in turn keep two apart. At 4 stages a third generation would arrive at a barrier whose
# previous one the issuers have not yet synced on (its count mixed: a hang, or a slot refilled under a reader).
MAX_STAGES = 3


class Changes(NamedTuple):
    """What split_refill_barriers changed in a kernel: both 0 when it left the PTX as compiled."""
    dropped: int   # CTA barriers that ordered nothing, removed
    split: int     # refill barriers split into bar.sync (the issuers) and bar.arrive (the others)


class _Program:
    """A kernel's PTX as statements (an inline asm block is one) and its control flow."""

    def __init__(self, ptx: str):
        self.lines = ptx.splitlines()
        self.stmts: list[tuple[int, list[str]]] = []   # (its line, the last of an inline asm block; its instructions)
        n = 0
        while n < len(self.lines):
            s = self.lines[n].strip()
            if s.startswith("// begin inline asm"):
                body, n = [], n + 1
                while not self.lines[n].strip().startswith("// end inline asm"):
                    t = self.lines[n].strip()
                    if t and not t.startswith("//"):
                        body.append(t)
                    n += 1
                self.stmts.append((n, body or [""]))
            elif s and not s.startswith(("//", ".loc")):
                self.stmts.append((n, [s]))
            n += 1
        self.text = [body[0] if len(body) == 1 else "" for _, body in self.stmts]
        self.labels = {m.group(1): k for k, t in enumerate(self.text) if (m := _LABEL.match(t))}
        self.entry = next((k for k, t in enumerate(self.text) if t.startswith("$L__func_begin")), 0)
        self.succs: dict[int, list[int]] = {}
        self.preds: dict[int, list[int]] = {k: [] for k in range(len(self.stmts))}
        for k, t in enumerate(self.text):
            m = _BRANCH.match(t)
            nxt = [self.labels[m.group(3)]] if m and m.group(3) in self.labels else []
            if not (m and m.group(1) is None) and not t.startswith(("ret", "exit")) and k + 1 < len(self.stmts):
                nxt.append(k + 1)
            self.succs[k] = nxt
            for j in nxt:
                self.preds[j].append(k)

    def region(self, k: int, forward: bool) -> list[str] | None:
        """The instructions on every path from statement k to the next CTA barrier (backward or forward); None
        if a path leaves the kernel first."""
        out, seen = [], set()
        todo = list(self.succs[k] if forward else self.preds[k])
        while todo:
            j = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            if j <= self.entry or self.text[j].startswith(("ret", "exit", "}")):
                return None
            if _BARRIER.match(self.text[j]):
                continue
            out.extend(self.stmts[j][1])
            todo.extend(self.succs[j] if forward else self.preds[j])
        return out

    def redundant(self, k: int) -> bool:
        """Barrier k orders nothing another barrier does not: before it only what the mbarriers order, and after
        it no mbarrier set up anew (if any was used before) and no copy that could complete a phase a wait before
        it has not yet seen."""
        before, after = self.region(k, False), self.region(k, True)
        if before is None or after is None:
            return False
        if any(_MEMORY.match(t) and not (_ORDERED_BY_MBARRIERS.match(t) or _ASYNC_WGMMA_ISSUE.match(t)) for t in before):
            return False
        if any("mbarrier" in t for t in before) and any(re.search(r"mbarrier\.(init|inval)", t) for t in after):
            return False
        return not (any("try_wait" in t for t in before) and any("cp.async.bulk.tensor" in t for t in after))


def drop_redundant_barriers(ptx: str) -> tuple[str, int]:
    """`ptx` without the CTA barriers that order nothing; and how many."""
    prog = _Program(ptx)
    drop = {prog.stmts[k][0] for k, t in enumerate(prog.text) if _BARRIER.match(t) and prog.redundant(k)}
    kept = [line for n, line in enumerate(prog.lines) if n not in drop]
    return "\n".join(kept) + "\n", len(drop)


def _issuing_warps(text: list[str]):
    """A function from a TMA copy's predicate register to the `tid < 32k` predicate it is a conjunction of."""
    tid = {m.group(1) for t in text if (m := re.match(r"^mov\.u32\s+(%r\d+),\s+%tid\.x;", t))}
    masked = {m.group(1) for t in text if (m := re.match(r"^and\.b32\s+(%r\d+),\s+(%r\d+),\s+\d+;", t))
              and m.group(2) in tid}
    warps = {m.group(1) for t in text if (m := re.match(r"^setp\.lt\.u32\s+(%p\d+),\s+(%r\d+),\s+(\d+);", t))
             and m.group(2) in masked and int(m.group(3)) % 32 == 0}
    ands = {m.group(1): m.group(2, 3) for t in text if (m := re.match(r"^and\.pred\s+(%p\d+),\s+(%p\d+),\s+(%p\d+);", t))}

    def find(p: str, depth: int = 0) -> str | None:
        if p in warps:
            return p
        return next((w for q in ands.get(p, ()) if depth < 4 and (w := find(q, depth + 1))), None)
    return find


def split_refill_barriers(ptx: str, stages: int | None = None) -> tuple[str, Changes]:
    """`ptx` with its redundant CTA barriers dropped and each loop's refill barrier split into sync (the warps that
    issue the copies) and arrive (the others), on named barriers 1 and 2 in turn: with a ring of `stages` slots
    (Triton's num_stages, MAX_STAGES at most) a warp can be one key block ahead of the issuers, never two (what it
    reads next came from their previous refill); and what changed (`ptx` unchanged and Changes(0, 0) unless it
    has the expected shape, or a deeper ring)."""
    original = ptx
    if stages is not None and stages > MAX_STAGES:
        return original, Changes(0, 0)
    ptx, dropped = drop_redundant_barriers(ptx)
    lines = ptx.splitlines()
    text = [line.strip() for line in lines]
    named = [m.group(2) for t in text if (m := re.match(r"^(@!?%p\d+\s+)?(?:bar|barrier)\.\S+\s+(\S+)", t))]
    threads = next((int(m.group(1)) for t in text if (m := re.match(r"^\.reqntid\s+(\d+)", t))), 0)
    if any(b != "0;" for b in named) or threads < MIN_THREADS or threads % 32:
        return original, Changes(0, 0)
    issuers_of = _issuing_warps(text)
    labels = {m.group(1): n for n, t in enumerate(text) if (m := _LABEL.match(t))}
    split = {}
    for n, t in enumerate(text):
        m = _BRANCH.match(t)
        if not (m and labels.get(m.group(3), n) < n):
            continue   # not the branch back to a loop's head
        body = range(labels[m.group(3)], n)
        barriers = [k for k in body if _BARRIER.match(text[k])]
        copies = [k for k in body if "cp.async.bulk.tensor" in text[k]]
        issuers = {issuers_of(p.group(1)) if (p := re.match(r"^@(%p\d+)\s+cp\.async", text[k])) else None
                   for k in copies}
        if len(barriers) != 1 or not copies or min(copies) < barriers[0] or len(issuers) != 1 or None in issuers:
            return original, Changes(0, 0)
        w = issuers.pop()
        indent = lines[barriers[0]][: len(lines[barriers[0]]) - len(text[barriers[0]])]
        split[barriers[0]] = [indent + s for s in (
            "xor.b32 \t%refill_turn, %refill_turn, 3;",   # named barrier 1, 2, 1, ...
            "setp.eq.u32 \t%refill_odd, %refill_turn, 1;",
            f"and.pred \t%refill_sync1, {w}, %refill_odd;",
            f"and.pred \t%refill_sync2, {w}, !%refill_odd;",
            f"and.pred \t%refill_arrive1, !{w}, %refill_odd;",
            f"and.pred \t%refill_arrive2, !{w}, !%refill_odd;",
            f"@%refill_sync1 bar.sync \t1, {threads};",
            f"@%refill_sync2 bar.sync \t2, {threads};",
            f"@%refill_arrive1 bar.arrive \t1, {threads};",
            f"@%refill_arrive2 bar.arrive \t2, {threads};")]
    if not split:
        return original, Changes(0, 0)
    out = []
    for n, line in enumerate(lines):
        out.extend(split.get(n, [line]))
        if re.match(r"^\s*\.reg\s+\.b32\s+%r<\d+>;", line):
            out += ["\t.reg .b32 \t%refill_turn;",
                    "\t.reg .pred \t%refill_odd, %refill_sync1, %refill_sync2, %refill_arrive1, %refill_arrive2;"]
        if text[n].startswith("$L__func_begin"):
            out.append("\tmov.b32 \t%refill_turn, 2;")
    return "\n".join(out) + "\n", Changes(dropped, len(split))


@functools.cache
def version() -> str:
    """This pass's content hash: the first 16 hex digits of this file's sha256 (read once)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def tag() -> str:
    """The pass and its content hash in one string, "split_refill_barriers-<hash>": what goes into Triton's cache key
    for a kernel compiled through it (the hook's key on Triton 3.9; rung 8's PTX_PASS constexpr on every version)."""
    return f"{NAME}-{version()}"


def identity() -> dict:
    """The pass as a recorded row names it."""
    return {"name": NAME, "sha256": version()}


def applied(compiled) -> dict | None:
    """What the pass did to a compiled kernel (a triton CompiledKernel, fresh or from Triton's cache on disk):
    identity() and its Changes as "dropped" and "split"; None for a kernel that did not go through it."""
    return getattr(getattr(compiled, "metadata", None), "ptx_pass", None)


class PassDidNotApply(PTXASError):
    """A kernel compiled through the pass with require=True that the pass left as compiled. A PTXASError so that
    @triton.autotune rules that configuration out (as one ptxas refuses) and its search goes on with the others; a
    plain launch raises it."""

    def __str__(self) -> str:
        return self.error_message or ""


def _through_pass(make_ptx, require: bool, stages: int | None):
    """Triton's PTX stage, then split_refill_barriers (for a ring of `stages`: the compile's num_stages); what it
    changed goes into the kernel's metadata (kept in Triton's cache with the binary, so a kernel loaded from disk
    says it too)."""
    def stage(src, metadata):
        ptx, changes = split_refill_barriers(make_ptx(src, metadata), stages)
        metadata["ptx_pass"] = {**identity(), **changes._asdict()}
        if require and not changes.split:
            raise PassDidNotApply(f"{metadata.get('name', 'kernel')}: ladder/ptx.py's {NAME} left its PTX as compiled "
                                  "(no refill barrier to split: one warpgroup, a ring of more than "
                                  f"{MAX_STAGES} stages, or a loop of a shape it was not written for)")
        return ptx
    return stage


def _hook(previous, require: bool):
    """Triton's add_stages_inspection_hook for the pass, chained after `previous` (the hook installed before, or
    None): that one still rewrites its stages, and its key goes into ours."""
    def hook(*args):
        if not args:   # Triton 3.9 asks for a key: before a compile (the disk cache's), at each launch (in memory)
            key, digest = tag(), version()
            if previous is not None:
                before_key, before_digest = previous()
                key, digest = before_key + key, hashlib.sha256(f"{before_digest}{digest}".encode()).hexdigest()
            return key, digest
        if previous is not None:
            previous(*args)
        stages, options = args[1], args[2]   # (backend, stages, options, language, capability)
        stages["ptx"] = _through_pass(stages["ptx"], require, getattr(options, "num_stages", None))
    hook.chained = previous
    hook.ladder_ptx_pass = True
    return hook


@contextmanager
def refill_barriers_split(require: bool = False):
    """What Triton compiles inside goes through split_refill_barriers (require: a kernel it leaves unchanged fails
    to compile, PassDidNotApply). Triton 3.6 does not ask the hook for a cache key: a kernel compiled both ways
    needs a constexpr that tells them apart, rung 8's PTX_PASS (tag()). Chained after a hook already installed
    (ours, in a nested block, is not applied twice); the hook is Triton's global knob, so a compile in another
    thread meanwhile goes through the pass too."""
    knobs = triton.knobs.runtime
    previous = knobs.add_stages_inspection_hook
    before = previous.chained if getattr(previous, "ladder_ptx_pass", False) else previous
    knobs.add_stages_inspection_hook = _hook(before, require)
    try:
        yield
    finally:
        knobs.add_stages_inspection_hook = previous
