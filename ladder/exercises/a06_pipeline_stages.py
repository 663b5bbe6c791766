"""Assignment 06: the ring of cp.async stages in matmul rung 5 (kernels/cuda/matmul/5_pipelined.cu).

The kernel's loop, per K tile t (of `tiles`), with STAGES shared-memory buffers:

    prologue: fetch tiles 0 .. STAGES-2, one cp.async group each
    for t in range(tiles):
        cp.async.wait_group(N)      # all but the N most recent groups have landed
        __syncthreads()
        fetch(tile_to_fetch(t))     # into buffer_of(that tile), if it exists; one group (empty if not)
        compute(buffer_of(t))

The student writes buffer_of(t, stages), tile_to_fetch(t, stages) and groups_in_flight(stages) = N.
The check plays the loop for 2-5 stages and 1-9 tiles, buffer by buffer, and names the first step
where a tile is read before it landed, a buffer is overwritten while it is read or still needed, or a
tile is never fetched; then it asks that as many copies as possible stay in flight.
"""
from __future__ import annotations

import re

from ladder.runtime import cuda
from ladder.exercises.grading import Fail, Result, judge


TASK = "pipeline stages"


def play(buffer_of, tile_to_fetch, groups_in_flight, stages: int, tiles: int) -> None:
    """Raise Fail at the first step the pipeline goes wrong."""
    n = groups_in_flight(stages)
    if not isinstance(n, int) or n < 0:
        raise Fail(f"groups_in_flight({stages}) = {n!r}: wait_group takes a count of groups, 0 or more")
    buffers: dict[int, int] = {}   # buffer -> tile it holds
    groups: list[int | None] = []  # committed groups, oldest first: the tile each copies (None: empty)
    fetched: set[int] = set()

    def fetch(tile: int, during: int) -> None:
        if tile >= tiles:
            groups.append(None)
            return
        b = buffer_of(tile, stages)
        if not isinstance(b, int) or not 0 <= b < stages:
            raise Fail(f"buffer_of({tile}, {stages}) = {b!r}: there are buffers 0 to {stages - 1}")
        old = buffers.get(b)
        if old is not None and old >= during:
            raise Fail(f"with {stages} stages, at t = {during} the fetch of tile {tile} overwrites buffer {b}, "
                       f"which holds tile {old}, {'read in this very step' if old == during else 'not computed yet'}")
        if tile in fetched:
            raise Fail(f"tile {tile} is fetched twice")
        buffers[b] = tile
        fetched.add(tile)
        groups.append(tile)

    for tile in range(stages - 1):
        fetch(tile, -1)
    for t in range(tiles):
        landed = groups[:max(0, len(groups) - n)]
        if t not in fetched:
            raise Fail(f"with {stages} stages, tile {t} is never fetched before the math reads it at t = {t}: "
                       f"the prologue fetches tiles 0 to {stages - 2}, so step t fetches the tile {stages - 1} ahead")
        if t not in landed:
            raise Fail(f"with {stages} stages, at t = {t}, wait_group({n}) lets tile {t}'s copy still be in "
                       f"flight (groups committed so far: tiles {[g for g in groups if g is not None]}) when "
                       f"the math reads it")
        ahead = tile_to_fetch(t, stages)
        if not isinstance(ahead, int):
            raise Fail(f"tile_to_fetch({t}, {stages}) = {ahead!r}: a tile number")
        if ahead < tiles and ahead in fetched:
            raise Fail(f"at t = {t} tile_to_fetch gives tile {ahead}, already fetched; each step fetches the "
                       f"next tile the prologue and earlier steps have not")
        fetch(ahead, t)
        if buffers.get(buffer_of(t, stages)) != t:
            raise Fail(f"with {stages} stages, at t = {t} buffer_of({t}) = {buffer_of(t, stages)} holds tile "
                       f"{buffers.get(buffer_of(t, stages))}, not tile {t}")
    missing = sorted(set(range(tiles)) - fetched)
    if missing:
        raise Fail(f"tiles {missing} are never fetched")


class PipelineStages:
    STAGES = (2, 3, 4, 5)
    TILES = range(1, 10)

    def check(self, buffer_of, tile_to_fetch, groups_in_flight) -> Result:
        def body() -> str:
            for stages in self.STAGES:
                for tiles in self.TILES:
                    play(buffer_of, tile_to_fetch, groups_in_flight, stages, tiles)
            for stages in self.STAGES:
                if groups_in_flight(stages) < stages - 2:
                    raise Fail(f"correct, but with {stages} stages wait_group({groups_in_flight(stages)}) waits "
                               f"for copies the math does not need yet: only {groups_in_flight(stages) + 1} "
                               f"tile(s) in flight while a tile is computed; leave as many groups in flight as "
                               f"can be")
            return (f"correct: every tile lands in a buffer no one reads, is read only after it landed, and "
                    f"STAGES - 1 tiles are in flight while one is computed, for {len(self.STAGES)} ring sizes "
                    f"and 1 to {max(self.TILES)} tiles")
        return judge(TASK, (buffer_of, tile_to_fetch, groups_in_flight), body)


def loop_source(path: str = "matmul/5_pipelined.cu", first: str = "auto fetch", last: str = "compute(t % STAGES)") -> str:
    """The kernel's loop, from the line holding `first` to the one holding `last`, with the three answers
    written as the student's function names and the comments (which say them) dropped."""
    lines = cuda.source(path).splitlines()
    start = next(i for i, line in enumerate(lines) if first in line)
    end = next(i for i, line in enumerate(lines) if i >= start and last in line)
    text = "\n".join(re.sub(r"\s*//.*$", "", line) for line in lines[start:end + 1])
    for answer, name in (("t + STAGES - 1", "tile_to_fetch(t)"), ("t % STAGES", "buffer_of(t)"),
                         ("cp_async_wait<STAGES - 2>", "cp_async_wait<groups_in_flight>")):
        text = text.replace(answer, name)
    return text
