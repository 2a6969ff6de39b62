"""``checkpoint.save_interval: auto``: the interval that loses least work to failures (Young/Daly).

A failure costs the work since the last checkpoint (half an interval on average) and every save costs its time
``C`` (what training loses to it: the whole save when synchronous, the stall when asynchronous). With a mean time
between failures ``M`` of the whole job, the interval of training time that loses least is, to first order,

    tau = sqrt(2 x C x M)            (Young 1974, "A first order approximation to the optimum checkpoint interval";
                                      Daly 2006 shows it holds while C << M, as it does for checkpoints)

and ``tau / step time`` iterations. Example: a 60 s synchronous save, 24 h MTBF: tau = sqrt(2 x 60 x 86,400) s =
54 min; at 20 s per iteration, every 161 iterations. An asynchronous save also has a floor: its background write
must end before the next save, or that save waits for it (the wait then counts in ``C``, which lengthens ``tau``
anyway), so the interval never falls below the measured write time.

``AutoInterval`` holds the measurements (the same on every rank: the callback agrees on them with a MAX over ranks)
and decides when to save: the first save of a run with nothing measured comes after ``PROBE_STEPS`` iterations
(the first one of a process warms up; the others give the step time), to measure ``C``; the interval is
recomputed after each of the first ``RECOMPUTE_SAVES`` saves of each process, from the median of the last costs,
then kept. The measurements travel in the checkpoint, so a resumed run starts with an interval.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

PROBE_STEPS = 3
"""Iterations of a process before the first save of a run that measured no save yet (the first is a warm-up)."""
RECOMPUTE_SAVES = 3
"""The interval is recomputed after each of the first this many saves of a process."""
KEEP = 5
"""Save costs kept (the median of these is ``C``)."""
STEP_WINDOW = 50
"""Step times kept (their median is the step time)."""


def young_daly_seconds(save_s: float, mtbf_s: float) -> float:
    """sqrt(2 x save cost x MTBF), in seconds of training between saves."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def interval_iterations(save_s: float, step_s: float, mtbf_s: float, write_s: float = 0.0) -> int:
    """Young/Daly's interval in iterations of ``step_s`` seconds, at least 1, and at least the iterations that a
    background write of ``write_s`` seconds spans (asynchronous saves)."""
    iterations = round(young_daly_seconds(save_s, mtbf_s) / step_s)
    return max(1, iterations, math.ceil(write_s / step_s))


@dataclass
class AutoInterval:
    """When to save under ``save_interval: auto``; ``state`` / ``load`` carry the measurements across a resume."""

    mtbf_hours: float
    save_costs: list[float] = field(default_factory=list)
    """Agreed save costs, seconds (last ``KEEP``)."""
    step_s: float | None = None
    """Agreed step time, seconds."""
    write_s: float = 0.0
    """Agreed background write time of the last asynchronous save, seconds (0: synchronous)."""
    interval: int | None = None
    last_saved: int = 0
    """Iteration of the last save, or of the resume (the callback sets it at the start)."""
    _steps: list[float] = field(default_factory=list)
    _process_steps: int = 0
    _process_saves: int = 0

    def observe_step(self, seconds: float) -> None:
        """A step time of this process (the first one, a warm-up, is left out)."""
        self._process_steps += 1
        if self._process_steps > 1:
            self._steps = [*self._steps, seconds][-STEP_WINDOW:]

    def local_step_s(self) -> float:
        """This process's median step time (0 before a measured one)."""
        return statistics.median(self._steps) if self._steps else 0.0

    def due(self, iteration: int) -> bool:
        """Save after ``iteration``?"""
        if self.interval is None:
            return self._process_steps >= PROBE_STEPS
        return iteration - self.last_saved >= self.interval

    def wants_recompute(self) -> bool:
        """After this save: recompute (one of the first ``RECOMPUTE_SAVES`` of this process)?"""
        return self._process_saves < RECOMPUTE_SAVES

    def saved(self, iteration: int, cost_s: float | None = None, step_s: float | None = None,
              write_s: float | None = None) -> None:
        """A save after ``iteration``; with agreed measurements, the interval is recomputed from them."""
        self.last_saved = iteration
        self._process_saves += 1
        if cost_s is None:
            return
        self.save_costs = [*self.save_costs, cost_s][-KEEP:]
        if step_s:
            self.step_s = step_s
        if write_s is not None:
            self.write_s = write_s
        self.interval = self.compute()

    def compute(self) -> int | None:
        if not self.save_costs or not self.step_s:
            return None
        return interval_iterations(statistics.median(self.save_costs), self.step_s, self.mtbf_hours * 3600.0,
                                   self.write_s)

    def describe(self) -> str:
        """One line: the interval and its inputs."""
        assert self.interval is not None and self.step_s
        cost = statistics.median(self.save_costs)
        tau = young_daly_seconds(cost, self.mtbf_hours * 3600.0)
        floor = f"; at least the {self.write_s:.2f} s background write" if self.write_s else ""
        return (f"checkpoint.save_interval=auto: every {self.interval} iterations: sqrt(2 x {cost:.3f} s per save x "
                f"{self.mtbf_hours:g} h MTBF) = {tau:,.{0 if tau >= 10 else 2}f} s of training at {self.step_s:.3f} s "
                f"per iteration{floor} (the save's cost: the median of the last {len(self.save_costs)})")

    def state(self) -> dict[str, Any]:
        return {"save_costs": self.save_costs, "step_s": self.step_s, "write_s": self.write_s}

    def load(self, state: dict[str, Any]) -> None:
        self.save_costs = list(state.get("save_costs", []))
        self.step_s, self.write_s = state.get("step_s"), float(state.get("write_s", 0.0))
        self.interval = self.compute()
