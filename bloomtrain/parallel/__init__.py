"""Tensor parallelism of our own (Megatron's layers and mappings) with an explicit ``ParallelState``."""

from bloomtrain.parallel.state import ParallelState

__all__ = ["ParallelState"]
