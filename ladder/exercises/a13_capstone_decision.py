"""Assignment 13: the capstone's decision table for one op (lesson 05, ladder/capstone/decision.py).

Given the recorded profile of the GPT-2-small-shaped model (the op's time alone, how many times one forward
pass runs it, the eager forward pass) and the op's floor on the roofline at the run's ceilings, the student
computes (1) the op's share of the eager forward pass, (2) its time over its floor, (3) what Amdahl's law
allows end to end if the op ran exactly at its floor, (4) the measured rows of the decision table: room
above the floor, hot (top 10%), hot (> 5%), speed-up >= 2x end to end, each by decision.py's own rule and
threshold, and (5) the verdict: write the kernel only if every one of those rows favours it (the judgement
rows of the lesson, stable shape, survives a model change, maintainable, are not asked here).

Every expected value is computed from the recording (`results.load_having("capstone")`), never written
down, so the checker stays right when the capstone is recorded again.
"""
from __future__ import annotations

from ladder.capstone import costs, decision
from ladder.capstone.model import PRESETS
from ladder.exercises.grading import Result, check_number, not_answered, not_yet, passed, unanswered

OP = "layer norm"  # room above its floor, but not hot: a "don't write it" case


def yes_no(answer) -> bool | None:
    """True / False (a Python or NumPy bool, or "yes" / "no"); None for anything else."""
    if isinstance(answer, bool) or (type(answer).__module__ == "numpy" and type(answer).__name__ in ("bool", "bool_")):
        return bool(answer)
    if isinstance(answer, str) and answer.strip().lower() in ("yes", "no"):
        return answer.strip().lower() == "yes"
    return None


def _said(value: bool) -> str:
    return "yes" if value else "no"


class CapstoneDecision:
    """The decision table's measured rows for one op of the recorded capstone model."""

    def __init__(self, op: str = OP, row: dict | None = None, model: str = "gpt2-small"):
        if row is None:
            from ladder import results
            row = results.load_having("capstone").capstone(model)
        if row is None:
            raise ValueError(decision.NOT_RECORDED)
        cfg = PRESETS[row["model"]]
        priced = {o.name: o for o in costs.ops(cfg)}
        if op not in priced:
            raise ValueError(f"no op {op!r} in the model; one of: {', '.join(priced)}")
        self.op = op
        self.per_forward = priced[op].per_forward                     # runs per forward pass
        self.layers = cfg.layers
        self.alone_ms = next(o["torch_ms"] for o in row["ops"] if o["op"] == op)   # one run, timed alone
        self.floor_ms = priced[op].floor_ms(row["ceilings"])          # one run at the roofline
        self.eager_ms = row["variants"]["eager"]["ms"]                # the whole eager forward pass
        # the answers, by decision.py's rules
        self.share = self.alone_ms * self.per_forward / self.eager_ms
        self.x_floor = self.alone_ms / self.floor_ms
        self.amdahl = costs.amdahl(self.share, self.x_floor)
        self.room = self.x_floor >= decision.ROOM
        self.hot_10 = self.share >= decision.HOT_CONDITION
        self.hot_5 = self.share > decision.HOT_CHECK
        self.two_x = self.amdahl >= decision.END_TO_END
        self.write_it = self.room and self.hot_10 and self.hot_5 and self.two_x

    def given(self) -> str:
        """What the student works from, in one line."""
        return (f"{self.op}: {1e3 * self.alone_ms:.2f} µs a run, timed alone; {self.per_forward} runs per forward "
                f"pass; floor {1e3 * self.floor_ms:.2f} µs a run; eager forward pass {self.eager_ms:.3f} ms")

    # ------------------------------------------------------------ (1)-(3): numbers

    def check_share(self, answer) -> Result:
        f, n = self.share, self.per_forward
        hints = [
            (f / n, f"that is one run of the op; one forward pass runs it {n} times (time alone x {n})"),
            (100 * f, "give the share as a fraction of 1 (0.05), not a percent"),
            (1 / f, "that is the forward pass over the op's time: the share is the op's time over the forward pass"),
        ]
        if n != self.layers:
            hints.append((f * self.layers / n, f"{self.layers} is the number of layers; the op runs {n} times per "
                                               "forward pass (count it in the table's x column)"))
        return check_number("(1) share of the eager forward pass", answer, f, hints, "")

    def check_x_floor(self, answer) -> Result:
        s = self.x_floor
        return check_number("(2) time over its floor", answer, s, [
            (1 / s, "that is floor / time, inverted: how many times its floor the op takes is time / floor (> 1)"),
            (s - 1, "that is the excess over the floor, (time - floor) / floor; the question asks time / floor"),
            (s * self.per_forward, f"both the time alone and the floor are one run's; do not multiply one by the "
                                   f"{self.per_forward} runs"),
            (s / self.per_forward, f"both the time alone and the floor are one run's; do not divide one by the "
                                   f"{self.per_forward} runs"),
        ], "")

    def check_amdahl(self, answer) -> Result:
        f, s, n = self.share, self.x_floor, self.per_forward
        return check_number("(3) end-to-end speed-up at the floor", answer, self.amdahl, [
            (s, f"that applies the op's own {s:.2f}x to the whole run; only the fraction f of the time gets faster: "
                "1 / ((1 - f) + f / s)"),
            (costs.amdahl(s, f), "f and s are swapped: f is the op's share of the time (< 1), s its speed-up "
                                 "(time / floor)"),
            (costs.amdahl(f, 1 / s), "s is the op's speed-up, time / floor (> 1), not floor / time"),
            (1 / (1 - f), "that is an infinitely fast op, 1 / (1 - f); at its floor it is s times faster, not "
                          "infinitely"),
            (costs.amdahl(f / n, s), f"that uses the share of one run of the op; the forward pass runs it {n} times"),
            (costs.amdahl(100 * f, s), "f is the share as a fraction of 1, not a percent"),
        ], "", rel=0.002)

    # ------------------------------------------------------------ (4): the measured rows

    def _check_row(self, task: str, answer, want: bool, why: str, mistake: str | None = None) -> Result:
        if unanswered(answer):
            return not_answered(task)
        said = yes_no(answer)
        if said is None:
            return not_yet(task, f"answer True or False (or \"yes\" / \"no\"), not {answer!r}")
        if said == want:
            return passed(task, f"correct ({_said(want)}: {why})")
        return not_yet(task, f"not quite: {mistake or why}")

    def check_room(self, answer) -> Result:
        s, room = self.x_floor, decision.ROOM
        why = f"{s:.2f}x its floor, {'at least' if self.room else 'under'} the {room:g}x that counts as room"
        if self.room:
            mistake = (f"room above the floor means time / floor >= {room:g} (decision.ROOM); this op takes {s:.2f}x "
                       f"its floor (floor / time, {1 / s:.2f}, is the ratio inverted)")
        else:
            mistake = (f"room above the floor means time / floor >= {room:g} (decision.ROOM); this op takes only "
                       f"{s:.2f}x its floor")
        return self._check_row("(4a) room above the floor", answer, self.room, why, mistake)

    def check_hot_10(self, answer) -> Result:
        f = self.share
        why = f"{100 * f:.2f}% of the eager forward pass, {'at least' if self.hot_10 else 'under'} a tenth"
        if not self.hot_10 and self.hot_5:
            mistake = (f"10% vs 5%: the conditions' hot is the top 10% of the time (share >= 10%); > 5% is the "
                       f"six checks' bar. This op takes {100 * f:.2f}%")
        else:
            mistake = f"the conditions' hot is the top 10% of the time (share >= 10%); this op takes {100 * f:.2f}%"
        return self._check_row("(4b) hot (top 10% of time)", answer, self.hot_10, why, mistake)

    def check_hot_5(self, answer) -> Result:
        f = self.share
        why = f"{100 * f:.2f}% of the eager forward pass, {'over' if self.hot_5 else 'not over'} 5%"
        if self.hot_5 and not self.hot_10:
            mistake = (f"5% vs 10%: the six checks' hot is > 5% of wall-clock, not the conditions' tenth. This op "
                       f"takes {100 * f:.2f}% (compare the exact share, not the table's rounded one)")
        else:
            mistake = f"the six checks' hot is a share > 5% of wall-clock; this op takes {100 * f:.2f}%"
        return self._check_row("(4c) hot (> 5% of wall-clock)", answer, self.hot_5, why, mistake)

    def check_two_x(self, answer) -> Result:
        s, gain, target = self.x_floor, self.amdahl, decision.END_TO_END
        why = f"even at its floor Amdahl allows {gain:.3f}x end to end" if not self.two_x else \
            f"at its floor Amdahl allows {gain:.3f}x end to end"
        if not self.two_x and s >= target:
            mistake = (f"that applies the op's own {s:.2f}x to the whole run; the op is {100 * self.share:.2f}% of it, "
                       f"and Amdahl allows {gain:.3f}x end to end, under {target:g}x")
        else:
            mistake = f"Amdahl allows {gain:.3f}x end to end at the floor; the check asks for >= {target:g}x"
        return self._check_row(f"(4d) speed-up >= {target:g}x end to end", answer, self.two_x, why, mistake)

    # ------------------------------------------------------------ (5): the verdict

    def against(self) -> list[str]:
        rows = {"room above the floor": self.room, "hot (top 10% of time)": self.hot_10,
                "hot (> 5% of wall-clock)": self.hot_5, f"speed-up >= {decision.END_TO_END:g}x end to end": self.two_x}
        return [q for q, yes in rows.items() if not yes]

    def check_verdict(self, answer) -> Result:
        task = "(5) verdict: write it?"
        if unanswered(answer):
            return not_answered(task)
        said = yes_no(answer)
        if said is None:
            return not_yet(task, f"answer True (write it) or False (do not), not {answer!r}")
        against = self.against()
        if said == self.write_it:
            return passed(task, "correct (" + ("write it: every measured row favours it" if self.write_it else
                                               "do not write it: " + ", ".join(against)) + ")")
        if said and self.room and not self.hot_10:
            return not_yet(task, f"not quite: room above the floor is one condition of three; the op is not hot "
                                 f"({100 * self.share:.2f}% of the run, under 10%) and Amdahl allows only "
                                 f"{self.amdahl:.3f}x end to end. Write it only if every row favours it")
        if said:
            return not_yet(task, "not quite: write it only if every row favours it; against it: " + ", ".join(against))
        return not_yet(task, "not quite: every measured row favours writing it (room, hot by both bars, "
                             f"{self.amdahl:.2f}x end to end at the floor)")
