"""Triton kernels of BLOOM's causal ALiBi attention, flash-style, with attention dropout inside.

Shapes: q ``[b, np, sq, hd]``, k and v ``[b, np, sk, hd]`` (any strides, the last one 1), ``sq <= sk``;
query row i sits at key position ``sk - sq + i`` (a KV-cache step of sq = 1 sees every key). Per head h the
score of (i, j) is ``scale * q_i . k_j + slope_h * (j - pos_i)`` for ``j <= pos_i``: BLOOM's bias
``slope_h * j`` shifted by a constant per row, which softmax ignores. The shifted form is 0 on the diagonal, so
no large bias is added to a score in fp32 (``slope * 2047`` would cost ~7 bits of a score's precision).

Forward (FlashAttention-2's loop): one program per (query block, head, batch entry); it walks the key blocks left
of the diagonal without a mask, then the diagonal blocks with the causal mask, keeping a running max ``m`` and sum
``l`` per row (base-2 exponentials: scores are pre-multiplied by log2(e)). It writes the output and the row's
log-sum-exp ``lse = m + log2(l)`` (fp32, base 2, ``[b * np, sq]``): no ``[sq, sk]`` tensor exists.

Backward: two kernels that recompute ``P`` from ``lse``. First one program per query block computes its rows'
``delta_i = sum_d dO_i O_i`` (fp32, written to ``[b * np, sq]``) from the O and dO tiles it loads, then accumulates
dQ over its keys; then one program per key block accumulates dK and dV over the query blocks that see it, reading
delta. No fp32 copy of O or dO exists, and neither kernel uses atomics, so gradients are deterministic (bit-exact
reruns).
With dropout (``O = (P * Z / (1 - p)) V``, Z the keep mask), ``delta`` is unchanged
(``sum_j P_ij dP_ij = dO_i . O_i``), and dP gets the same mask and scale as P.

Dropout mask: Philox4x32-10 (``tl.randint4x``), keyed by a 64-bit seed that the caller draws from the device's
torch generator (so a checkpoint's RNG state replays it), counted per *global* head: ``HEAD0`` is the model's
index of this call's first head (a TP rank's offset), so TP ranks drop what TP 1 drops for the same heads.
bloomtrain.kernels.dropout_mask defines the counter and holds the same mask in torch; forward, both backward
kernels and ``keep_mask_kernel`` (tests) rebuild it whatever their block sizes.

Grid: ``(tiles, np, b)``, so any batch x heads launches (a grid's second and third dimensions stop at 65,535 each;
batch x heads in one of them did not). Offsets: every term that can pass 2^31 elements (batch, head, and a tile's
first row or key times its stride) is formed in 64 bits on the tile's scalar base pointer; the offsets inside a
tile (``BLOCK x stride``) stay 32-bit, since registers are what these kernels run short of.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from bloomtrain.kernels.dropout_mask import RNG_GROUP, RNG_RANGE, dropout_scale, dropout_threshold

LOG2E = 1.4426950408889634
__all__ = ["LOG2E", "RNG_GROUP", "RNG_RANGE", "OutOfResources", "dropout_scale", "dropout_threshold"]


@triton.jit
def _keep(seed, stream, rows, start_n, SQ, SK, threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keep mask ``[BLOCK_M, BLOCK_N]`` of rows ``rows`` x keys ``[start_n, start_n + BLOCK_N)`` of Philox stream
    ``stream`` (global head x batch + batch entry, int64); start_n % 8 == 0."""
    groups = (SK + 7) // 8
    g = start_n // 8 + tl.arange(0, BLOCK_N // 8)
    counter = (stream * SQ + rows.to(tl.int64)[:, None]) * groups + g.to(tl.int64)[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, counter)
    words = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), [BLOCK_M, BLOCK_N // 2])
    halves = tl.reshape(tl.join(words & 0xFFFF, words >> 16), [BLOCK_M, BLOCK_N])
    return halves >= threshold


@triton.jit
def _mma(a, b, acc, DOT_MODE: tl.constexpr):
    """``a @ b (+ acc)`` in fp32. DOT_MODE: "ieee" (fp32 inputs, no TF32), "tf32" (fp16/bf16 inputs: the mode is
    ignored), "upcast" (bf16 in Triton's CPU interpreter, whose bf16 dot is wrong: the inputs widened to fp32 give
    the same exact products a tensor core forms)."""
    if DOT_MODE == "upcast":
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        out = tl.dot(a, b, acc, input_precision=DOT_MODE)
    return out


@triton.jit
def _tile(ptrs, idx, bound, d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CHECK: tl.constexpr):
    """Load a ``[len(idx), BLOCK_D]`` tile, masking only what can be out of range: rows/keys ``idx >= bound`` when
    CHECK, head-dim columns when the head dim is padded. An unmasked tile loads as wide vectors; a mask the compiler
    cannot prove all-true would make it load element by element."""
    if CHECK:
        if HEAD_DIM == BLOCK_D:
            x = tl.load(ptrs, mask=(idx < bound)[:, None], other=0.0)
        else:
            x = tl.load(ptrs, mask=(idx < bound)[:, None] & (d < HEAD_DIM)[None, :], other=0.0)
    else:
        if HEAD_DIM == BLOCK_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=(d < HEAD_DIM)[None, :], other=0.0)
    return x


@triton.jit
def _row(ptr, idx, bound, other, CHECK: tl.constexpr):
    if CHECK:
        x = tl.load(ptr, mask=idx < bound, other=other)
    else:
        x = tl.load(ptr)
    return x


@triton.jit
def _store(ptrs, x, idx, bound, d, HEAD_DIM: tl.constexpr):
    tl.store(ptrs, x, mask=(idx < bound)[:, None] & (d < HEAD_DIM)[None, :])


@triton.jit
def _program(Slopes, Seed, HEAD0, DROPOUT: tl.constexpr):
    """This program's row of lse/delta ``bh = b * np + h``, batch entry b and local head h (int64), its base-2 ALiBi
    slope, its dropout key (0 without dropout) and Philox stream ``(HEAD0 + h) * B + b`` (global head, batch)."""
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    bh = b * tl.num_programs(1) + h
    stream = (HEAD0 + h) * tl.num_programs(2) + b
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    return bh, b, h, tl.load(Slopes + h) * 1.4426950408889634, seed, stream


@triton.jit
def _at(P, b, h, start, stride_b, stride_h, stride_s):
    """Pointer to element ``[b, h, start, 0]``: 64-bit, whatever the sizes (b and h are int64)."""
    return P + b * stride_b + h * stride_h + tl.cast(start, tl.int64) * stride_s


@triton.jit
def _scores(q, k, rows, cols, slope2, qk_scale2, POS0, CAUSAL: tl.constexpr, DOT_MODE: tl.constexpr):
    """Base-2 scores ``[BLOCK_M, BLOCK_N]`` of q ``[BLOCK_M, D]`` against k ``[BLOCK_N, D]``, -inf where masked."""
    s = _mma(q, tl.trans(k), None, DOT_MODE) * qk_scale2
    rel = cols[None, :] - (rows[:, None] + POS0)  # key position minus the query's position, <= 0 where allowed
    s += slope2 * rel.to(tl.float32)
    if CAUSAL:
        s = tl.where(rel <= 0, s, float("-inf"))
    return s


@triton.jit
def _fwd_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, lo, hi, stream, seed, slope2,
               qk_scale2, POS0, SQ, SK, threshold, d, CAUSAL: tl.constexpr, CHECK_N: tl.constexpr,
               DROPOUT: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr, DOT_MODE: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = _tile(k_ptrs + tl.cast(start_n, tl.int64) * stride_kn, cols, SK, d, HEAD_DIM, BLOCK_D, CHECK_N)
        s = _scores(q, k, rows, cols, slope2, qk_scale2, POS0, CAUSAL, DOT_MODE)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        if DROPOUT:
            p = tl.where(_keep(seed, stream, rows, start_n, SQ, SK, threshold, BLOCK_M, BLOCK_N), p, 0.0)
        v = _tile(v_ptrs + tl.cast(start_n, tl.int64) * stride_vn, cols, SK, d, HEAD_DIM, BLOCK_D, CHECK_N)
        acc = _mma(p.to(v.dtype), v, acc, DOT_MODE)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def attention_fwd_kernel(Q, K, V, Slopes, Seed, Out, Lse,
                         stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                         HEAD0, SQ, SK, qk_scale2, threshold, keep_scale, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                         EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, DROPOUT: tl.constexpr, DOT_MODE: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh, b, h, slope2, seed, stream = _program(Slopes, Seed, HEAD0, DROPOUT)
    POS0 = SK - SQ  # row i of the queries sits at key POS0 + i
    rows = start_m + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    m_tile = tl.arange(0, BLOCK_M)[:, None]
    q = _tile(_at(Q, b, h, start_m, stride_qb, stride_qh, stride_qm) + m_tile * stride_qm + d[None, :], rows, SQ, d,
              HEAD_DIM, BLOCK_D, not EVEN_M)
    n_tile = tl.arange(0, BLOCK_N)[:, None]
    k_ptrs = _at(K, b, h, 0, stride_kb, stride_kh, stride_kn) + n_tile * stride_kn + d[None, :]
    v_ptrs = _at(V, b, h, 0, stride_vb, stride_vh, stride_vn) + n_tile * stride_vn + d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Keys [0, diag) lie left of every row's diagonal (in range, no mask); [diag, hi) need the causal mask, and
    # their last tile may run past sk.
    diag = (start_m + POS0) // BLOCK_N * BLOCK_N
    hi = tl.minimum(SK, start_m + BLOCK_M + POS0)
    acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, 0, diag, stream, seed,
                               slope2, qk_scale2, POS0, SQ, SK, threshold, d, False, False, DROPOUT, HEAD_DIM,
                               BLOCK_M, BLOCK_N, BLOCK_D, DOT_MODE)
    acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, diag, hi, stream, seed,
                               slope2, qk_scale2, POS0, SQ, SK, threshold, d, True, not EVEN_N, DROPOUT, HEAD_DIM,
                               BLOCK_M, BLOCK_N, BLOCK_D, DOT_MODE)
    out = acc * (keep_scale / l_i)[:, None]
    _store(_at(Out, b, h, start_m, stride_ob, stride_oh, stride_om) + m_tile * stride_om + d[None, :],
           out.to(Out.dtype.element_ty), rows, SQ, d, HEAD_DIM)
    tl.store(Lse + bh * SQ + rows, m_i + tl.math.log2(l_i), mask=rows < SQ)


@triton.jit
def _dkdv_block(dk, dv, k, v, q_ptrs, do_ptrs, stride_qm, stride_dom, Lse, Delta, start_n, lo, hi, bh, stream, seed,
                slope2, qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, CAUSAL: tl.constexpr,
                CHECK_M: tl.constexpr, DROPOUT: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_MODE: tl.constexpr):
    cols = start_n + tl.arange(0, BLOCK_N)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = _tile(q_ptrs + tl.cast(start_m, tl.int64) * stride_qm, rows, SQ, d, HEAD_DIM, BLOCK_D, CHECK_M)
        do = _tile(do_ptrs + tl.cast(start_m, tl.int64) * stride_dom, rows, SQ, d, HEAD_DIM, BLOCK_D, CHECK_M)
        # Rows past sq get lse = +inf: their probabilities are 0, never inf * 0.
        lse = _row(Lse + bh * SQ + rows, rows, SQ, float("inf"), CHECK_M)
        delta = _row(Delta + bh * SQ + rows, rows, SQ, 0.0, CHECK_M)
        p = tl.math.exp2(_scores(q, k, rows, cols, slope2, qk_scale2, POS0, CAUSAL, DOT_MODE)
                         - lse[:, None])  # [BLOCK_M, BLOCK_N]
        dp = _mma(do, tl.trans(v), None, DOT_MODE)
        if DROPOUT:
            keep = _keep(seed, stream, rows, start_n, SQ, SK, threshold, BLOCK_M, BLOCK_N)
            p_dropped = tl.where(keep, p * keep_scale, 0.0)
            dp = tl.where(keep, dp * keep_scale, 0.0)
        else:
            p_dropped = p
        dv = _mma(tl.trans(p_dropped.to(do.dtype)), do, dv, DOT_MODE)
        ds = p * (dp - delta[:, None])
        dk = _mma(tl.trans(ds.to(q.dtype)), q, dk, DOT_MODE)
    return dk, dv


@triton.jit
def attention_bwd_dkdv_kernel(Q, K, V, DO, Slopes, Seed, Lse, Delta, DK, DV,
                              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                              stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                              stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
                              HEAD0, SQ, SK, qk_scale2, sm_scale, threshold, keep_scale, HEAD_DIM: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, DROPOUT: tl.constexpr,
                              DOT_MODE: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh, b, h, slope2, seed, stream = _program(Slopes, Seed, HEAD0, DROPOUT)
    POS0 = SK - SQ  # row i of the queries sits at key POS0 + i
    cols = start_n + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    n_tile = tl.arange(0, BLOCK_N)[:, None]
    k = _tile(_at(K, b, h, start_n, stride_kb, stride_kh, stride_kn) + n_tile * stride_kn + d[None, :], cols, SK, d,
              HEAD_DIM, BLOCK_D, not EVEN_N)
    v = _tile(_at(V, b, h, start_n, stride_vb, stride_vh, stride_vn) + n_tile * stride_vn + d[None, :], cols, SK, d,
              HEAD_DIM, BLOCK_D, not EVEN_N)
    m_tile = tl.arange(0, BLOCK_M)[:, None]
    q_ptrs = _at(Q, b, h, 0, stride_qb, stride_qh, stride_qm) + m_tile * stride_qm + d[None, :]
    do_ptrs = _at(DO, b, h, 0, stride_dob, stride_doh, stride_dom) + m_tile * stride_dom + d[None, :]
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # Query rows see key j from row j - POS0 on; rows at or past `full` see every key of this block.
    first = tl.maximum(start_n - POS0, 0) // BLOCK_M * BLOCK_M
    full = tl.minimum(tl.maximum(start_n + BLOCK_N - 1 - POS0, first), SQ)
    full = first + (full - first + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    dk, dv = _dkdv_block(dk, dv, k, v, q_ptrs, do_ptrs, stride_qm, stride_dom, Lse, Delta, start_n, first, full, bh,
                         stream, seed, slope2, qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, True, not EVEN_M,
                         DROPOUT, HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, DOT_MODE)
    dk, dv = _dkdv_block(dk, dv, k, v, q_ptrs, do_ptrs, stride_qm, stride_dom, Lse, Delta, start_n, full, SQ, bh,
                         stream, seed, slope2, qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, False, not EVEN_M,
                         DROPOUT, HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, DOT_MODE)
    _store(_at(DK, b, h, start_n, stride_dkb, stride_dkh, stride_dkn) + n_tile * stride_dkn + d[None, :],
           (dk * sm_scale).to(DK.dtype.element_ty), cols, SK, d, HEAD_DIM)
    _store(_at(DV, b, h, start_n, stride_dvb, stride_dvh, stride_dvn) + n_tile * stride_dvn + d[None, :],
           dv.to(DV.dtype.element_ty), cols, SK, d, HEAD_DIM)


@triton.jit
def _dq_block(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, lo, hi, stream, seed, slope2,
              qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, CAUSAL: tl.constexpr, CHECK_N: tl.constexpr,
              DROPOUT: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, DOT_MODE: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = _tile(k_ptrs + tl.cast(start_n, tl.int64) * stride_kn, cols, SK, d, HEAD_DIM, BLOCK_D, CHECK_N)
        v = _tile(v_ptrs + tl.cast(start_n, tl.int64) * stride_vn, cols, SK, d, HEAD_DIM, BLOCK_D, CHECK_N)
        p = tl.math.exp2(_scores(q, k, rows, cols, slope2, qk_scale2, POS0, CAUSAL, DOT_MODE)
                         - lse[:, None])
        dp = _mma(do, tl.trans(v), None, DOT_MODE)
        if DROPOUT:
            keep = _keep(seed, stream, rows, start_n, SQ, SK, threshold, BLOCK_M, BLOCK_N)
            dp = tl.where(keep, dp * keep_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq = _mma(ds.to(k.dtype), k, dq, DOT_MODE)
    return dq


@triton.jit
def attention_bwd_dq_kernel(Q, K, V, DO, Slopes, Seed, Lse, Delta, Out, DQ,
                            stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                            stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                            stride_ob, stride_oh, stride_om, stride_dqb, stride_dqh, stride_dqm,
                            HEAD0, SQ, SK, qk_scale2, sm_scale, threshold, keep_scale, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                            EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, DROPOUT: tl.constexpr,
                            DOT_MODE: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh, b, h, slope2, seed, stream = _program(Slopes, Seed, HEAD0, DROPOUT)
    POS0 = SK - SQ  # row i of the queries sits at key POS0 + i
    rows = start_m + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    m_tile = tl.arange(0, BLOCK_M)[:, None]
    q = _tile(_at(Q, b, h, start_m, stride_qb, stride_qh, stride_qm) + m_tile * stride_qm + d[None, :], rows, SQ, d,
              HEAD_DIM, BLOCK_D, not EVEN_M)
    do = _tile(_at(DO, b, h, start_m, stride_dob, stride_doh, stride_dom) + m_tile * stride_dom + d[None, :], rows,
               SQ, d, HEAD_DIM, BLOCK_D, not EVEN_M)
    lse = _row(Lse + bh * SQ + rows, rows, SQ, float("inf"), not EVEN_M)
    # delta = rowsum(dO * O) in fp32 (padded head-dim columns load as 0); the dK/dV kernel, launched next, reads it.
    o = _tile(_at(Out, b, h, start_m, stride_ob, stride_oh, stride_om) + m_tile * stride_om + d[None, :], rows, SQ,
              d, HEAD_DIM, BLOCK_D, not EVEN_M)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
    tl.store(Delta + bh * SQ + rows, delta, mask=rows < SQ)
    n_tile = tl.arange(0, BLOCK_N)[:, None]
    k_ptrs = _at(K, b, h, 0, stride_kb, stride_kh, stride_kn) + n_tile * stride_kn + d[None, :]
    v_ptrs = _at(V, b, h, 0, stride_vb, stride_vh, stride_vn) + n_tile * stride_vn + d[None, :]
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    diag = (start_m + POS0) // BLOCK_N * BLOCK_N
    hi = tl.minimum(SK, start_m + BLOCK_M + POS0)
    dq = _dq_block(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, 0, diag, stream, seed, slope2,
                   qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, False, False, DROPOUT, HEAD_DIM, BLOCK_M,
                   BLOCK_N, BLOCK_D, DOT_MODE)
    dq = _dq_block(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, rows, diag, hi, stream, seed, slope2,
                   qk_scale2, POS0, SQ, SK, threshold, keep_scale, d, True, not EVEN_N, DROPOUT, HEAD_DIM, BLOCK_M,
                   BLOCK_N, BLOCK_D, DOT_MODE)
    _store(_at(DQ, b, h, start_m, stride_dqb, stride_dqh, stride_dqm) + m_tile * stride_dqm + d[None, :],
           (dq * sm_scale).to(DQ.dtype.element_ty), rows, SQ, d, HEAD_DIM)


@triton.jit
def keep_mask_kernel(Seed, Out, HEAD0, SQ, SK, threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The dropout keep mask as int8 ``[b, np, sq, sk]`` (tests rebuild the kernels' mask with it); grid
    ``(row tiles, np, b)``, as the attention kernels'."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    stream = (HEAD0 + h) * tl.num_programs(2) + b
    seed = tl.load(Seed)
    row_ptrs = Out + ((b * tl.num_programs(1) + h) * SQ + rows.to(tl.int64)[:, None]) * SK
    for start_n in range(0, SK, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        keep = _keep(seed, stream, rows, start_n, SQ, SK, threshold, BLOCK_M, BLOCK_N)
        tl.store(row_ptrs + cols[None, :], keep.to(tl.int8), mask=(rows < SQ)[:, None] & (cols < SK)[None, :])
