"""Stragglers: each log interval's slowest rank in metrics.jsonl, and a rank that stays slow named in one line.

What is timed is each rank's *busy* time on its step: the CPU seconds its process spends between its last
``pre_step`` and the first hook after the step (``time.process_time``, every thread). A rank that waits for a
peer inside a collective spends none (gloo blocks without spinning), so on CPU ranks the busy time is the rank's
own work, and a slow rank is slow by itself, not because the others wait for it; CPU contention from other
processes stretches wall time, not CPU time, so a healthy run on a crowded machine is not named. On CUDA the
host spins while it waits for the device, so every rank's busy time is about the step's wall time: a slow host
(data, Python) shows, a slow GPU does not.

Every ``logging.log_interval`` iterations the ranks all-gather their mean and fastest busy time per step over the
interval (on a gloo group of their own on CUDA, so it costs no device sync), and every rank adds to the
iteration's record ``slowest_rank``, ``slowest_rank_busy_s`` (its mean) and ``median_rank_busy_s``. A rank whose
fastest step over the last ``stability.straggler_window`` intervals still took ``stability.straggler_factor`` x
the median of its peers' fastest is named once per launch, in one console line (rank, node, how much slower) and
a ``straggler`` event in metrics.jsonl, so that the user can exclude its node. The fastest, not the mean: a slow
node is slow at every step, while a busy machine (an SMT sibling or a cache shared with other work: CPU time
grows too) slows a rank's steps by spells, and a spell shorter than the window leaves a fast step. The first
iteration of a launch (warm-up) is not timed.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from bloomtrain.callbacks.base import STRAGGLERS, Callback, Step, TrainerView


class StragglerCallback(Callback):
    priority = STRAGGLERS

    def __init__(self, factor: float, window: int, log_interval: int, node: str) -> None:
        self.factor, self.window, self.log_interval, self.node = factor, window, log_interval, node
        self.world = 1
        self.group: Any = None
        self.nodes: list[str] = []
        self.first = 1
        self.busy_s, self.fastest_s, self.steps, self._cpu = 0.0, float("inf"), 0, 0.0
        self.fastest: list[deque[float]] = []  # per rank: its fastest step of each of the last intervals
        self.named: set[int] = set()

    def pre_train(self, trainer: TrainerView) -> None:
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        if self.world < 2:
            return
        self.group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        nodes: list[Any] = [None] * self.world
        dist.all_gather_object(nodes, self.node, group=self.group)
        self.nodes = [str(n) for n in nodes]
        self.first = trainer.pos.iteration + 1
        self.fastest = [deque(maxlen=self.window) for _ in range(self.world)]

    def pre_step(self, trainer: TrainerView, step: Step) -> None:
        self._cpu = time.process_time()

    def post_train_batch(self, trainer: TrainerView, step: Step) -> None:
        if self.world < 2:
            return
        if step.iteration > self.first:
            busy = time.process_time() - self._cpu
            self.busy_s, self.fastest_s, self.steps = self.busy_s + busy, min(self.fastest_s, busy), self.steps + 1
        if step.iteration % self.log_interval or not self.steps:
            return
        mine = torch.tensor([self.busy_s / self.steps, self.fastest_s], dtype=torch.float64)
        gathered = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine, group=self.group)
        self.busy_s, self.fastest_s, self.steps = 0.0, float("inf"), 0
        values = torch.stack(gathered).tolist()  # host memory (gloo), also in a GPU run: no device wait
        mean = [v[0] for v in values]
        slowest = max(range(self.world), key=lambda r: mean[r])
        step.metrics.update(slowest_rank=slowest, slowest_rank_busy_s=mean[slowest],
                            median_rank_busy_s=statistics.median(mean))
        for rank in range(self.world):
            self.fastest[rank].append(values[rank][1])
        if len(self.fastest[0]) < self.window:
            return
        best = [min(f) for f in self.fastest]
        for rank in range(self.world):
            peers = statistics.median(best[:rank] + best[rank + 1:])
            if rank not in self.named and peers > 0 and best[rank] >= self.factor * peers:
                self.named.add(rank)
                self._name(trainer, step.iteration, rank, best[rank], peers)

    def _name(self, trainer: TrainerView, iteration: int, rank: int, best_s: float, peers_s: float) -> None:
        node, ratio = self.nodes[rank], best_s / peers_s
        record = {"iteration": iteration, "event": "straggler", "rank": rank, "node": node, "ratio": round(ratio, 3),
                  "fastest_busy_s": best_s, "peers_median_fastest_busy_s": peers_s}
        trainer.log(record, iteration, (
            f"bloomtrain: straggler: rank {rank} on {node} is {ratio:.1f}x slower than the median of its peers: its "
            f"fastest step of the last {self.window} log intervals (to iteration {iteration}) took {best_s:.3f} s of "
            f"CPU, theirs {peers_s:.3f} s; if it stays slow, exclude {node} (bloomtrain slurm --exclude {node}) and "
            "resume"))
