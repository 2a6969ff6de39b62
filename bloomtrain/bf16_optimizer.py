"""The bf16 optimizer step in a fixed number of kernels: DeepSpeed's ``BF16_Optimizer`` with a lean step.

DeepSpeed 0.19.8's ``BF16_Optimizer`` keeps what BLOOM's training needs and its checkpoints hold: bf16 weights
viewed into one flat buffer per parameter group, an fp32 gradient accumulator of the same layout filled by a
hook per parameter, and the fp32 master weights and Adam state of this rank's DP partition ("ZeRO-1"). Its
files (``*_optim_states.pt``: the base optimizer's state dict, the fp32 partitions, paddings, the fragment
map that ``ds_to_universal`` reads) and its universal-checkpoint loading stay as they are. Only the step
changes, because DeepSpeed's spends a kernel or more per parameter tensor:

- **Norm.** DeepSpeed takes one norm per gradient, moves each to the device and stacks them, then all-reduces
  over the model-parallel group even when it has one rank. Here the tensors that count (not the pipeline's
  tied copy; on TP ranks other than 0, only sharded ones: DeepSpeed's rule) are merged into runs of adjacent
  tensors of the flat fp32 gradient buffer, once, at build time; a step takes one ``torch._foreach_norm``
  over those runs (every tensor of a group counts at TP rank 0 off the last stage: one run per group), and
  all-reduces only over a model-parallel group of more than one rank.
- **Skip and clip.** The norm is read on the host once (the engine decides there whether the step is
  applied). The clip coefficient ``clip / (norm + 1e-6)``, capped at 1, stays a device scalar (DeepSpeed
  reads ``coef < 1`` on the host a second time) and scales only this rank's DP partition of the gradients,
  the part its AdamW reads (DeepSpeed scales every gradient, tensor by tensor).
- **AdamW** runs on the two flat fp32 partitions; ``build_optimizer`` gives it torch's fused kernel where the
  device has one (CUDA, CPU), so its step counts live on the device and are never read on the host.
- **DP reduction.** DeepSpeed's pipeline engine concatenates the group buffers into one bucket, all-reduces
  it and copies it back, at DP = 1 too (two copies of every fp32 gradient a step).
  ``install`` makes the engine all-reduce each group buffer in place with DeepSpeed's own
  ``allreduce_bucket`` (a one-tensor bucket is flattened as a view: same dtype cast and averaging), and
  nothing at DP = 1.

The tied embedding's all-reduce between the first and last stage is DeepSpeed's, unchanged: its groups exist
only at PP > 1, where they always span two stages.

``LeanBF16Optimizer`` is what DeepSpeed builds inside ``lean_bf16``, so everything DeepSpeed checks about its BF16
optimizer holds (docs/bloom-training.md, "The lean step", says why a subclass). Loading a
checkpoint (a legacy shard or a universal one) brings the saved AdamW flags back with the saved param groups;
``load_state_dict`` then restores the fused kernel and puts the step counts where it needs them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

import torch
import torch.distributed as dist
from deepspeed.runtime.bf16_optimizer import BF16_Optimizer
from deepspeed.runtime.constants import PIPE_REPLICATED
from deepspeed.runtime.utils import is_model_parallel_parameter
from deepspeed.utils.bwc import bwc_tensor_model_parallel_rank

CLIP_EPS = 1e-6
"""Added to the norm before dividing (DeepSpeed's and torch's clip)."""
ADAMW_FLAGS = ("fused", "foreach", "capturable")
"""The AdamW group settings that choose its implementation: kept across a checkpoint load."""


def adamw(groups: list[dict[str, Any]], **kwargs: Any) -> torch.optim.AdamW:
    """torch's AdamW with its fused kernel where the parameters' device has one (CUDA, CPU: the fastest there
    too, docs/bloom-training.md), else foreach."""
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except RuntimeError:  # no fused kernel for this device or dtype
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def counted_runs(flat: torch.Tensor, params: list[torch.Tensor], counted: list[bool]) -> list[torch.Tensor]:
    """Views of ``flat`` (``params`` laid out back to back from offset 0) covering the counted tensors, with
    adjacent counted tensors merged into one view."""
    runs: list[torch.Tensor] = []
    start = end = offset = 0
    for param, count in zip(params, counted, strict=True):
        if count:
            if end != offset:  # a gap since the current run: close it
                if end > start:
                    runs.append(flat.narrow(0, start, end - start))
                start = offset
            end = offset + param.numel()
        offset += param.numel()
    if end > start:
        runs.append(flat.narrow(0, start, end - start))
    return runs


class LeanBF16Optimizer(BF16_Optimizer):
    """``BF16_Optimizer`` whose step costs a fixed number of kernels, whatever the number of parameter tensors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.has_moe_layers or self._uses_muon:
            raise NotImplementedError("LeanBF16Optimizer: no MoE layers, no Muon (bloomtrain uses neither)")
        if self.grad_acc_dtype != torch.float32:
            raise NotImplementedError("LeanBF16Optimizer: fp32 gradient accumulation only "
                                      "(data_types.grad_accum_dtype)")
        self._adamw_flags = [{k: g[k] for k in ADAMW_FLAGS if k in g} for g in self.optimizer.param_groups]
        tp_rank = bwc_tensor_model_parallel_rank(mpu=self.mpu)
        self._norm_runs: list[torch.Tensor] = []
        for params, flat in zip(self.bf16_groups, self.fp32_groups_gradients_flat, strict=True):
            counted = [not getattr(p, PIPE_REPLICATED, False) and (tp_rank == 0 or is_model_parallel_parameter(p))
                       for p in params]
            self._norm_runs += counted_runs(flat, params, counted)

    @torch.no_grad()
    def global_norm(self) -> torch.Tensor:
        """The L2 norm of the gradients over TP x PP (each tensor counted once): an fp32 device scalar.

        On a GPU each run's sum of squares is a tree reduction in fp32. torch's CPU norm accumulates fp32 with a
        relative error that grows with the length (~1e-5 over 250k elements, where DeepSpeed's per-tensor norms
        err ~3e-6): on a CPU the runs are reduced in float64."""
        device = self.fp32_groups_gradients_flat[0].device
        wide = torch.float64 if device.type == "cpu" else None
        if not self._norm_runs:  # a stage of tied copies only (check_layout refuses such layouts)
            total = torch.zeros((), dtype=wide or torch.float32, device=device)
        else:
            total = torch.stack(torch._foreach_norm(self._norm_runs, 2.0, dtype=wide)).pow(2.0).sum()
        if self.mpu is not None:
            group = self.mpu.get_model_parallel_group()
            if dist.get_world_size(group=group) > 1:
                dist.all_reduce(total, group=group)
        return total.pow(0.5).float()

    @torch.no_grad()
    def step(self, closure=None) -> None:
        if closure is not None:
            raise NotImplementedError(f"{type(self).__name__} does not support closure.")
        norm = self.global_norm()
        # The step's one host read: the engine decides on the host whether the step is applied (was_step_applied,
        # skipped_steps); the float also serves get_global_grad_norm without another read.
        value = float(norm)
        self.overflow = not math.isfinite(value)
        self._global_grad_norm = math.inf if self.overflow else value
        if self.overflow:
            self.clear_hp_grads()
            self.clear_lp_grads()
            return
        # DeepSpeed's coefficient, computed the same way, capped at 1 (scaling by 1.0 is exact)
        coef = (self.clip_grad / (norm + CLIP_EPS)).clamp_(max=1.0) if self.clip_grad > 0.0 else None
        for param, grad in zip(self.fp32_groups_flat_partition, self.fp32_groups_gradient_flat_partition,
                               strict=True):
            if coef is not None:
                grad.mul_(coef)
            param.grad = grad
        self.optimizer.step()
        self._lazy_init_hp_params_optimizer_state()  # links the universal-checkpoint fragments to the new state
        self.update_lp_params()
        self.clear_hp_grads()

    def load_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """DeepSpeed's load (legacy or universal), then the AdamW implementation chosen at build time again (the
        loaded param groups carry the flags they were saved with) and, for the fused kernel, each step count as a
        float32 scalar on its parameter's device."""
        super().load_state_dict(*args, **kwargs)
        for group, flags in zip(self.optimizer.param_groups, self._adamw_flags, strict=True):
            group.update(flags)
            on_device = group.get("fused") or group.get("capturable")
            for param in group["params"]:
                state = self.optimizer.state.get(param, {})
                if "step" in state:
                    step = torch.as_tensor(state["step"], dtype=torch.float32)
                    state["step"] = step.to(param.device) if on_device else step.cpu()


def reduce_flat_grads(engine) -> None:
    """The pipeline engine's data-parallel gradient reduction (its ``_bf16_reduce_grads``) for
    ``LeanBF16Optimizer``: each group's flat fp32 gradient buffer all-reduced in place with DeepSpeed's own
    ``allreduce_bucket`` (communication dtype, averaging), nothing at DP = 1."""
    group = engine.mpu.get_data_parallel_group()
    world = dist.get_world_size(group=group)
    if world == 1:
        return
    for flat in engine.optimizer.fp32_groups_gradients_flat:
        reduced = engine.allreduce_bucket([flat], group, world)
        assert reduced.data_ptr() == flat.data_ptr()  # a one-tensor bucket is a view: nothing to copy back


@contextmanager
def lean_bf16() -> Iterator[None]:
    """Within the block, DeepSpeed builds ``LeanBF16Optimizer`` where it would build ``BF16_Optimizer``.

    DeepSpeed names the class in two places: ``engine._configure_bf16_optimizer`` builds it, and
    ``PipelineEngine.__init__`` sets ``using_bf16_optimizer`` from ``type(optimizer) == BF16_Optimizer`` (which
    picks the fp32 ``_hp_grad`` for the tied all-reduce and the bf16 backward's gradient clearing)."""
    import deepspeed.runtime.engine as ds_engine  # noqa: PLC0415
    import deepspeed.runtime.pipe.engine as ds_pipe_engine  # noqa: PLC0415

    modules = (ds_engine, ds_pipe_engine)
    originals = [m.BF16_Optimizer for m in modules]
    for m in modules:
        m.BF16_Optimizer = LeanBF16Optimizer
    try:
        yield
    finally:
        for m, original in zip(modules, originals, strict=True):
            m.BF16_Optimizer = original


def install(engine) -> None:
    """After ``deepspeed.initialize`` inside ``lean_bf16``: the engine reduces gradients with ``reduce_flat_grads``."""
    if not (isinstance(engine.optimizer, LeanBF16Optimizer) and engine.using_bf16_optimizer):
        raise TypeError(f"expected DeepSpeed to build LeanBF16Optimizer and drive it as its BF16 optimizer, got "
                        f"{type(engine.optimizer).__name__} (using_bf16_optimizer={engine.using_bf16_optimizer})")
    engine._bf16_reduce_grads = MethodType(reduce_flat_grads, engine)
