"""Assignment 13: the capstone's decision table for one op (lesson 05, ladder/capstone/decision.py).

Given the recorded profile of the GPT-2-small-shaped model (the op's time alone, how many times one forward
pass runs it, the eager forward pass) and the op's floor on the roofline at the run's ceilings, the student
computes (1) the op's share of the eager forward pass, (2) its time over its floor, (3) what Amdahl's law
allows end to end if the op ran exactly at its floor, (4) the measured rows of the decision table: room
above the floor, hot (>= 10%), hot (> 5%), speed-up >= 2x end to end, each by decision.py's own rule and
threshold, and (5) the verdict: write the kernel only if every one of those rows favours it (the judgement
rows of the lesson, stable shape, survives a model change, maintainable, are not asked here).

Every expected value is computed from the recording (`results.load_having("capstone")`) when a check runs,
never written down or kept on the checker, so it stays right when the capstone is recorded again and a student
cannot read it off. The op is one whose every measured row is far from its threshold on every GPU recorded (tests
hold each margin to at least 15%), so no timing noise flips the decision. Feedback on a wrong answer names the slip without the
numbers another task asks for.
"""
from __future__ import annotations

from typing import NamedTuple

from ladder import results
from ladder.capstone import costs, decision
from ladder.capstone.model import PRESETS
from ladder.exercises.grading import Result, check_number, not_answered, not_yet, passed, unanswered


OP = "attention output proj."   # twice its floor, yet a few percent of the run: hot by neither bar, "don't write it"
MARGIN = 0.15           # each measured row at least this far (relatively) from its threshold on every recorded GPU


def yes_no(answer) -> bool | None:
    """True / False (a Python or NumPy bool, or "yes" / "no"); None for anything else."""
    if isinstance(answer, bool) or (type(answer).__module__ == "numpy" and type(answer).__name__ in ("bool", "bool_")):
        return bool(answer)
    if isinstance(answer, str) and answer.strip().lower() in ("yes", "no"):
        return answer.strip().lower() == "yes"
    return None


def _said(value: bool) -> str:
    return "yes" if value else "no"


class _Answers(NamedTuple):
    share: float
    x_floor: float
    amdahl: float
    room: bool
    hot_10: bool
    hot_5: bool
    two_x: bool
    write_it: bool


class CapstoneDecision:
    """The decision table's measured rows for one op of the recorded capstone model."""

    def __init__(self, op: str = OP, row: dict | None = None, model: str = "gpt2-small"):
        if row is None:
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

    def _answers(self) -> _Answers:
        """The answers, by decision.py's rules: worked out when a check runs, never kept on the checker."""
        share = self.alone_ms * self.per_forward / self.eager_ms
        x_floor = self.alone_ms / self.floor_ms
        amdahl = costs.amdahl(share, x_floor)
        room, hot_10, hot_5 = x_floor >= decision.ROOM, share >= decision.HOT_CONDITION, share > decision.HOT_CHECK
        two_x = amdahl >= decision.END_TO_END
        return _Answers(share, x_floor, amdahl, room, hot_10, hot_5, two_x, room and hot_10 and hot_5 and two_x)

    def margins(self) -> dict[str, float]:
        """How far (relatively) each measured row sits from its threshold: the decision is only as firm as these."""
        a = self._answers()
        return {"room": abs(a.x_floor / decision.ROOM - 1), "hot_10": abs(a.share / decision.HOT_CONDITION - 1),
                "hot_5": abs(a.share / decision.HOT_CHECK - 1), "two_x": abs(a.amdahl / decision.END_TO_END - 1)}

    def given(self) -> str:
        """What the student works from, in one line."""
        return (f"{self.op}: {1e3 * self.alone_ms:.2f} µs a run, timed alone; {self.per_forward} runs per forward "
                f"pass; floor {1e3 * self.floor_ms:.2f} µs a run; eager forward pass {self.eager_ms:.3f} ms")

    # ------------------------------------------------------------ (1)-(3): numbers

    def check_share(self, answer) -> Result:
        f, n = self._answers().share, self.per_forward
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
        s = self._answers().x_floor
        return check_number("(2) time over its floor", answer, s, [
            (1 / s, "that is floor / time, inverted: how many times its floor the op takes is time / floor (> 1)"),
            (s - 1, "that is the excess over the floor, (time - floor) / floor; the question asks time / floor"),
            (s * self.per_forward, f"both the time alone and the floor are one run's; do not multiply one by the "
                                   f"{self.per_forward} runs"),
            (s / self.per_forward, f"both the time alone and the floor are one run's; do not divide one by the "
                                   f"{self.per_forward} runs"),
        ], "")

    def check_amdahl(self, answer) -> Result:
        a, n = self._answers(), self.per_forward
        f, s = a.share, a.x_floor
        return check_number("(3) end-to-end speed-up at the floor", answer, a.amdahl, [
            (s, "that applies the op's own speed-up to the whole run; only the fraction f of the time gets faster: "
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

    def _check_row(self, task: str, answer, want: bool, why: str, mistake: str) -> Result:
        """`why` (said once the answer is right) may hold numbers; `mistake` (said when it is not) names the rule
        and the slip, not the numbers of (1)-(3)."""
        if unanswered(answer):
            return not_answered(task)
        said = yes_no(answer)
        if said is None:
            return not_yet(task, f"answer True or False (or \"yes\" / \"no\"), not {answer!r}")
        if said == want:
            return passed(task, f"correct ({_said(want)}: {why})")
        return not_yet(task, f"not quite: {mistake}")

    def check_room(self, answer) -> Result:
        a, room = self._answers(), decision.ROOM
        why = f"{a.x_floor:.2f}x its floor, {'at least' if a.room else 'under'} the {room:g}x that counts as room"
        mistake = (f"room above the floor means time / floor >= {room:g} (decision.ROOM): compare your answer to (2) "
                   "with it (floor / time is the ratio inverted)")
        return self._check_row("(4a) room above the floor", answer, a.room, why, mistake)

    def check_hot_10(self, answer) -> Result:
        a = self._answers()
        why = f"{100 * a.share:.1f}% of the eager forward pass, {'at least' if a.hot_10 else 'under'} a tenth"
        mistake = ("the conditions' hot is at least 10% of the time: share >= decision.HOT_CONDITION; compare your "
                   "answer to (1), a fraction of 1, with it" + ("; > 5% is the six checks' bar, not this one"
                                                                  if a.hot_5 and not a.hot_10 else ""))
        return self._check_row("(4b) hot (>= 10% of time)", answer, a.hot_10, why, mistake)

    def check_hot_5(self, answer) -> Result:
        a = self._answers()
        why = f"{100 * a.share:.1f}% of the eager forward pass, {'over' if a.hot_5 else 'not over'} 5%"
        mistake = ("the six checks' hot is a share > 5% of wall-clock (decision.HOT_CHECK), not the conditions' "
                   "tenth; compare your answer to (1) with it")
        return self._check_row("(4c) hot (> 5% of wall-clock)", answer, a.hot_5, why, mistake)

    def check_two_x(self, answer) -> Result:
        a, target = self._answers(), decision.END_TO_END
        why = f"{'' if a.two_x else 'even '}at its floor Amdahl allows {a.amdahl:.3f}x end to end"
        mistake = (f"the check asks Amdahl's end-to-end speed-up at the floor, your (3), to be >= {target:g}x; the "
                   "op's own speed-up (2) applies only to its share of the run")
        return self._check_row(f"(4d) speed-up >= {target:g}x end to end", answer, a.two_x, why, mistake)

    # ------------------------------------------------------------ (5): the verdict

    def check_verdict(self, answer) -> Result:
        task = "(5) verdict: write it?"
        if unanswered(answer):
            return not_answered(task)
        said = yes_no(answer)
        if said is None:
            return not_yet(task, f"answer True (write it) or False (do not), not {answer!r}")
        a = self._answers()
        rows = {"room above the floor": a.room, "hot (>= 10% of time)": a.hot_10,
                "hot (> 5% of wall-clock)": a.hot_5, f"speed-up >= {decision.END_TO_END:g}x end to end": a.two_x}
        against = [q for q, yes in rows.items() if not yes]
        if said == a.write_it:
            return passed(task, "correct (" + ("write it: every measured row favours it" if a.write_it else
                                               "do not write it; answered no: " + ", ".join(against)) + ")")
        if said:
            return not_yet(task, "not quite: write it only if every measured row (4a)-(4d) favours it; look at "
                                 "your rows again")
        return not_yet(task, "not quite: write it when every measured row (4a)-(4d) favours it; look at your rows "
                             "again")
