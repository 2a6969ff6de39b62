"""``ParallelState``: this process's coordinates in the TP x PP x DP grid, and its process groups.

The state is a frozen value passed explicitly to every layer that communicates; nothing in bloomtrain
keeps process groups in module globals. Rank order follows DeepSpeed's PipeModelDataParallelTopology
(axes pipe, data, model; row-major): ``global_rank = (pp * DP + dp) * TP + tp``, so TP ranks are
adjacent (intra-node) and PP is the slowest axis (docs/bloom-training.md, "Rank order").

The ``get_*`` methods implement DeepSpeed's ``mpu`` protocol with the meaning of DeepSpeed's own
``PipelineParallelGrid``: "model parallel" is the TP x PP slice of one data-parallel replica (used to sum
gradient norms), "tensor"/"slice" parallel is TP only. A state with ``tp_size == 1`` needs no groups, and
an *offline* state (groups None) is enough to build and slice a sharded model for conversion tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

ProcessGroup = Any  # torch.distributed.ProcessGroup; Any keeps the dataclass cheap to build offline


@dataclass(frozen=True)
class ParallelState:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    dp_rank: int = 0
    dp_size: int = 1
    tp_group: ProcessGroup | None = None
    pp_group: ProcessGroup | None = None
    dp_group: ProcessGroup | None = None
    model_group: ProcessGroup | None = None  # TP x PP ranks of one DP replica

    def __post_init__(self) -> None:
        for axis in ("tp", "pp", "dp"):
            rank, size = getattr(self, f"{axis}_rank"), getattr(self, f"{axis}_size")
            if size < 1 or not 0 <= rank < size:
                raise ValueError(f"ParallelState: {axis}_rank={rank} is outside [0, {axis}_size={size})")

    # --- constructors ---------------------------------------------------------------------------------

    @classmethod
    def single(cls) -> ParallelState:
        """One process: every degree is 1 and no communication happens."""
        return cls()

    @classmethod
    def offline(cls, tp_rank: int, tp_size: int, pp_rank: int = 0, pp_size: int = 1) -> ParallelState:
        """Coordinates without process groups: enough to build, initialise and slice a shard, not to run it."""
        return cls(tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size)

    @staticmethod
    def global_rank(tp: int, pp: int, dp: int, tp_size: int, dp_size: int) -> int:
        return (pp * dp_size + dp) * tp_size + tp

    @classmethod
    def from_sizes(cls, tp_size: int, pp_size: int = 1, dp_size: int | None = None) -> ParallelState:
        """Create every TP, PP, DP and model-parallel group (collective: call on all ranks, same order)."""
        world, rank = dist.get_world_size(), dist.get_rank()
        if dp_size is None:
            dp_size = world // (tp_size * pp_size)
        if tp_size * pp_size * dp_size != world:
            raise ValueError(
                f"ParallelState: tp {tp_size} x pp {pp_size} x dp {dp_size} != world size {world}; "
                "pick degrees whose product is the number of processes"
            )
        pp_rank, rest = divmod(rank, dp_size * tp_size)
        dp_rank, tp_rank = divmod(rest, tp_size)

        def rank_of(tp: int, pp: int, dp: int) -> int:
            return cls.global_rank(tp, pp, dp, tp_size, dp_size)

        # new_group is collective over the whole world: every rank creates every group in the same order
        # and keeps the one it belongs to.
        mine: dict[str, ProcessGroup] = {}
        layouts = {
            "tp": [[rank_of(t, p, d) for t in range(tp_size)] for p in range(pp_size) for d in range(dp_size)],
            "dp": [[rank_of(t, p, d) for d in range(dp_size)] for p in range(pp_size) for t in range(tp_size)],
            "pp": [[rank_of(t, p, d) for p in range(pp_size)] for d in range(dp_size) for t in range(tp_size)],
            "model": [
                sorted(rank_of(t, p, d) for p in range(pp_size) for t in range(tp_size)) for d in range(dp_size)
            ],
        }
        for name, groups in layouts.items():
            for ranks in groups:
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine[name] = group
        return cls(
            tp_rank=tp_rank,
            tp_size=tp_size,
            pp_rank=pp_rank,
            pp_size=pp_size,
            dp_rank=dp_rank,
            dp_size=dp_size,
            tp_group=mine["tp"],
            pp_group=mine["pp"],
            dp_group=mine["dp"],
            model_group=mine["model"],
        )

    @classmethod
    def from_topology(cls, topology: Any) -> ParallelState:
        """From a ``deepspeed.runtime.pipe.topology.PipeModelDataParallelTopology`` (checks the rank order)."""
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology  # noqa: PLC0415

        if not isinstance(topology, PipeModelDataParallelTopology):
            raise TypeError(f"expected PipeModelDataParallelTopology, got {type(topology).__name__}")
        tp, pp, dp = topology.get_dim("model"), topology.get_dim("pipe"), topology.get_dim("data")
        for r in range(topology.world_size()):
            c = topology.get_coord(r)
            if cls.global_rank(c.model, c.pipe, c.data, tp, dp) != r:
                raise ValueError(f"topology rank order differs from (pp*DP+dp)*TP+tp at rank {r}: {c}")
        return cls.from_sizes(tp, pp, dp)

    # --- DeepSpeed mpu protocol -----------------------------------------------------------------------

    def get_tensor_model_parallel_rank(self) -> int:
        return self.tp_rank

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp_size

    def get_tensor_model_parallel_group(self) -> ProcessGroup | None:
        return self.tp_group

    get_slice_parallel_rank = get_tensor_model_parallel_rank
    get_slice_parallel_world_size = get_tensor_model_parallel_world_size
    get_slice_parallel_group = get_tensor_model_parallel_group

    def get_pipe_parallel_rank(self) -> int:
        return self.pp_rank

    def get_pipe_parallel_world_size(self) -> int:
        return self.pp_size

    def get_pipe_parallel_group(self) -> ProcessGroup | None:
        return self.pp_group

    def get_data_parallel_rank(self) -> int:
        return self.dp_rank

    def get_data_parallel_world_size(self) -> int:
        return self.dp_size

    def get_data_parallel_group(self) -> ProcessGroup | None:
        return self.dp_group

    def get_model_parallel_rank(self) -> int:
        """Index within the TP x PP slice: ``pp * TP + tp`` (the ``mp_rank_XX`` of checkpoint names)."""
        return self.pp_rank * self.tp_size + self.tp_rank

    def get_model_parallel_world_size(self) -> int:
        return self.tp_size * self.pp_size

    def get_model_parallel_group(self) -> ProcessGroup | None:
        return self.model_group

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1
