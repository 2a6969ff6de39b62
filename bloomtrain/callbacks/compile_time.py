"""``CompileTimeCallback``: how long ``model.compile`` took, logged once per launch.

torch.compile works on each graph's first call, inside the first step of a launch (forward graphs, then the
backward graphs in the first backward). The first step's time minus the second's is that cost, to within one
step's noise: one console line and one ``metrics.jsonl`` record (``compile_s``) after the second step.
"""

from __future__ import annotations

import logging

from bloomtrain.callbacks.base import METRICS, Callback, Step, TrainerView

log = logging.getLogger(__name__)


class CompileTimeCallback(Callback):
    priority = METRICS  # a metrics record, beside the iteration's

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.times: list[float] = []

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        if len(self.times) >= 2 or step.output is None:
            return
        self.times.append(step.output.step_time_s)
        if len(self.times) == 2:
            first, second = self.times
            record = {"iteration": step.iteration, "compile_s": round(max(first - second, 0.0), 3),
                      "first_step_s": round(first, 3), "second_step_s": round(second, 3),
                      "compiled_blocks": self.blocks}
            trainer.log(record, step.iteration,
                        f"bloomtrain: model.compile: the first step took {first:.1f} s, the second {second:.2f} s: "
                        f"about {record['compile_s']:.1f} s compiling {self.blocks} blocks")
