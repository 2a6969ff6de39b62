"""Kernel sets other than the plain PyTorch reference: "auto", "fused", "compile" and "apex".

- auto (the default): per kernel, the fused kernel where it passed its first-use self-check on the tensors'
  device type and dtype (bloomtrain.kernels.selfcheck), the PyTorch reference where it failed or the extension
  did not build, with one warning line per reason. On CUDA, attention is the Triton flash kernel
  (bloomtrain.kernels.flash_attention: online softmax, dropout inside, no [s, s] tensor) wherever it serves
  the call; a padding mask or a failed self-check takes the paths below.
- fused: our extension (csrc/kernels), CPU or CUDA by the tensors' device, after the same self-check; a build
  failure or a failed check is a BloomstackError (the run asked for fused kernels and would not get them). Every
  call checks shape/dtype/device and falls back to the reference with one log line per reason (a padding mask,
  a KV-cache step). Its attention is block-causal (bloomtrain.kernels.attention): the masked upper triangle is
  never multiplied.
- compile: the references under ``torch.compile`` (Inductor fuses each into one or two kernels);
  the comparison point the fused kernels must beat.
- apex: NVIDIA apex's FusedLayerNorm and causal softmax where apex is importable and supports the
  call (CUDA, and for the softmax fp16/bf16 with sq == sk); the fused set otherwise. apex has no
  in-kernel ALiBi, so its softmax gets the bias pre-added in the scores' dtype, as BLOOM did.
"""

from __future__ import annotations

import functools
import logging

import torch

from bloomtrain.kernels.alibi_softmax import alibi_softmax_reference, fused_alibi_softmax
from bloomtrain.kernels.attention import attention_reference, fused_causal_attention
from bloomtrain.kernels.bias_gelu import bias_gelu_reference, fused_bias_gelu
from bloomtrain.kernels.fallback import log_fallback
from bloomtrain.kernels.flash_attention import flash_attention
from bloomtrain.kernels.layer_norm import fused_layer_norm, layer_norm_reference
from bloomtrain.kernels.reference import KernelSet
from bloomtrain.kernels.selfcheck import use_flash, use_fused

logger = logging.getLogger("bloomtrain.kernels")

# apex's ScaledUpperTriangMaskedSoftmax asserts these (older builds stop at 2048 keys).
_APEX_SOFTMAX_MAX_KEYS = 2048


def kernels_for(kind: str) -> KernelSet:
    if kind in ("auto", "fused"):
        return _checked_kernels(strict=kind == "fused")
    if kind == "compile":
        return _compiled_kernels()
    if kind == "apex":
        return _apex_kernels()
    raise ValueError(f"no dispatch for kernels={kind!r}; expected 'auto', 'fused', 'compile' or 'apex'")


@functools.cache
def _checked_kernels(strict: bool) -> KernelSet:
    """Each op asks the self-check (run on its first call per device type and dtype) whether its fused kernel serves."""

    def layer_norm(x, weight, bias, eps):
        if use_fused("layer_norm", x, strict=strict):
            return fused_layer_norm(x, weight, bias, eps)
        return layer_norm_reference(x, weight, bias, eps)

    def bias_gelu(x, bias):
        return fused_bias_gelu(x, bias) if use_fused("bias_gelu", x, strict=strict) else bias_gelu_reference(x, bias)

    def alibi_softmax(scores, slopes, scale, mask=None):
        if use_fused("alibi_softmax", scores, strict=strict):
            return fused_alibi_softmax(scores, slopes, scale, mask)
        return alibi_softmax_reference(scores, slopes, scale, mask)

    def attention(q, k, v, slopes, scale, mask=None, dropout_p=0.0, head_offset=0):
        # CUDA: the flash kernel (dropout inside, KV-cache steps too). Elsewhere, and for a padding mask, the
        # block path; calls outside it (a KV-cache step, a padding mask) use this set's softmax, fused or not.
        # head_offset (the model's index of q's first head) keys the dropout mask on every path.
        if q.is_cuda and use_flash(q, k, v, slopes, mask, strict=strict):
            return flash_attention(q, k, v, slopes, scale, dropout_p, head_offset=head_offset)
        if use_fused("attention", q, strict=strict):
            return fused_causal_attention(q, k, v, slopes, scale, mask, dropout_p, softmax=alibi_softmax,
                                          head_offset=head_offset)
        return attention_reference(q, k, v, slopes, scale, mask, dropout_p, softmax=alibi_softmax,
                                   head_offset=head_offset)

    return KernelSet("fused" if strict else "auto", layer_norm, bias_gelu, alibi_softmax, attention)


@functools.cache
def _compiled_kernels() -> KernelSet:
    # One compiled wrapper per process: recompiles are keyed on shapes/dtypes inside torch.compile.
    return KernelSet(
        "compile",
        torch.compile(layer_norm_reference),
        torch.compile(bias_gelu_reference),
        torch.compile(alibi_softmax_reference),
    )


@functools.cache
def _apex_kernels() -> KernelSet:
    try:
        from apex.normalization import fused_layer_norm as apex_ln  # noqa: PLC0415
    except ImportError as exc:
        log_fallback("apex", f"apex is not importable ({exc}); using kernels='fused'")
        return KernelSet("apex->fused", fused_layer_norm, fused_bias_gelu, fused_alibi_softmax,
                         fused_causal_attention)
    try:
        from apex.transformer.functional.fused_softmax import (  # noqa: PLC0415
            ScaledUpperTriangMaskedSoftmax,
        )
    except ImportError:
        ScaledUpperTriangMaskedSoftmax = None  # noqa: N806

    def layer_norm(x, weight, bias, eps):
        if not x.is_cuda:
            log_fallback("apex layer_norm", "apex runs on CUDA only; using the fused kernel")
            return fused_layer_norm(x, weight, bias, eps)
        if weight.dtype == x.dtype:
            return apex_ln.fused_layer_norm_affine(x, weight, bias, x.shape[-1:], eps)
        # Mixed precision: apex returns weight.dtype; the contract is x.dtype.
        return apex_ln.mixed_dtype_fused_layer_norm_affine(x, weight, bias, x.shape[-1:], eps).to(x.dtype)

    def alibi_softmax(scores, slopes, scale, mask=None):
        b, nh, sq, sk = scores.shape
        supported = (ScaledUpperTriangMaskedSoftmax is not None and scores.is_cuda and mask is None
                     and scores.dtype in (torch.float16, torch.bfloat16) and sq == sk
                     and 16 < sk <= _APEX_SOFTMAX_MAX_KEYS)
        if not supported:
            log_fallback("apex alibi_softmax", "apex needs CUDA fp16/bf16, sq == sk in (16, 2048] and no "
                         "padding mask; using the fused kernel")
            return fused_alibi_softmax(scores, slopes, scale, mask)
        alibi = (slopes.float().view(nh, 1) * torch.arange(sk, device=scores.device)).to(scores.dtype)
        x = torch.addcmul(alibi.view(1, nh, 1, sk), scores, torch.tensor(scale, dtype=scores.dtype,
                                                                         device=scores.device))
        return ScaledUpperTriangMaskedSoftmax.apply(x.view(b * nh, sq, sk), 1.0).view(b, nh, sq, sk)

    log_fallback("apex bias_gelu", "apex has no bias-GeLU kernel; using the fused kernel")
    return KernelSet("apex", layer_norm, fused_bias_gelu, alibi_softmax)


__all__ = ["kernels_for", "alibi_softmax_reference", "bias_gelu_reference", "layer_norm_reference"]
