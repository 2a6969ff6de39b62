"""Memory-bound operations of the BLOOM block, each with a PyTorch reference and optional fused paths.

The model calls four operations through a ``KernelSet``:

- ``layer_norm(x, weight, bias, eps)``: LayerNorm over the last dim, statistics in fp32, output in x.dtype.
- ``bias_gelu(x, bias)``: tanh-GeLU(x + bias), BLOOM's GeLU (the tanh approximation, not erf).
- ``alibi_softmax(scores, slopes, scale, mask=None)``: softmax over the last dim, computed in fp32, of
  ``scale * scores + slopes[h] * j`` with the causal mask applied; ``scores`` is ``[b, np, sq, sk]`` (raw
  Q @ K^T in the model dtype), ``slopes`` is ``[np]`` fp32, query row i sits at key position
  ``sk - sq + i`` (so a KV-cache step of sq=1 sees every key). ``mask`` is an optional bool
  ``[b, 1, sq, sk]`` padding mask, True where masked. Output dtype = scores.dtype.
- ``attention(q, k, v, slopes, scale, mask=None, dropout_p=0.0, head_offset=0)``: ``softmax(q @ k^T) @ v``
  around that softmax, q/k/v ``[b, np, s, hd]``; the dropout mask is keyed by the global head (``head_offset``:
  the model's index of q's first head; bloomtrain.kernels.dropout_mask). On CUDA the auto and fused sets run the
  Triton flash kernel (bloomtrain.kernels.flash_attention: no [s, s] tensor, dropout inside); on the CPU the fused
  set computes it block-causally (only the lower triangle of the causal square is multiplied); the others over the
  full square (bloomtrain.kernels.attention). The model calls ``model_attention``: the same op, hidden from
  torch.compile unless the set is ``traceable`` (a compiled block's).

``get_kernels(kind)`` returns the set for ``kind`` in ``{"auto", "torch", "fused", "compile", "apex"}``:

- ``auto`` (ModelConfig's default): each fused kernel where it passes a self-check against its reference on
  first use per device type and dtype (bloomtrain.kernels.selfcheck), PyTorch where it fails or the extension
  does not build, with one warning line naming the kernel and the reason.
- ``fused``: the fused kernels, and a BloomstackError where the build or the self-check fails.
- ``torch``: the PyTorch references (no build, no check); ``compile`` and ``apex``: bloomtrain.kernels.dispatch.

Fused paths still run the reference, with one log line per reason, for calls they do not support (a padding
mask, a KV-cache step, a device type or dtype the extension does not serve). ``selfcheck_report()`` lists the
checks this process ran, as JSON-able dicts.
"""

from __future__ import annotations

from bloomtrain.kernels.reference import KernelSet, reference_kernels
from bloomtrain.kernels.selfcheck import selfcheck_report

KERNEL_KINDS = ("auto", "torch", "fused", "compile", "apex")


def get_kernels(kind: str = "torch") -> KernelSet:
    """The kernel set for ``kind``; see the module docstring for the operations and the kinds."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"kernels must be one of {KERNEL_KINDS}, got {kind!r}")
    if kind == "torch":
        return reference_kernels()
    # Auto, fused, compiled and apex paths are provided by bloomtrain.kernels.dispatch.
    from bloomtrain.kernels import dispatch  # noqa: PLC0415

    return dispatch.kernels_for(kind)


__all__ = ["KERNEL_KINDS", "KernelSet", "get_kernels", "reference_kernels", "selfcheck_report"]
