"""Functions stay short and calls stay narrow (the developers' guide): no function of bloomdata, bloomtrain or
flows over 60 lines, none taking more than 6 values (``self``/``cls`` aside; ``*args``/``**kwargs`` count as
none); more values go in a parameter object (a dataclass or a pydantic model). The allowlist names the few
signatures that mirror an outside API on purpose, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bloomdata", "bloomtrain", "flows")
MAX_LINES = 60  # from `def` to the last line of the body, docstring included
MAX_PARAMS = 6

# "path:qualified name": why it may be wider
ALLOWED = {
    # the fused kernels keep the signature of the PyTorch op they replace (q, k, v, slopes, scale, mask, dropout)
    "bloomtrain/kernels/attention.py:attention_reference": "the attention op's signature",
    "bloomtrain/kernels/attention.py:fused_causal_attention": "the attention op's signature",
    "bloomtrain/kernels/attention.py:BlockCausalAttentionFunction.forward": "autograd.Function.forward of that op",
    "bloomtrain/kernels/dispatch.py:_checked_kernels.attention": "the attention op's signature",
    "bloomtrain/kernels/flash_attention.py:flash_attention": "the attention op's signature (plus the dropout seed)",
    "bloomtrain/model/compiled.py:reference_attention": "the attention op's signature, traced in the block's graph",
    "bloomtrain/model/compiled.py:flash_or_reference": "the attention op's signature, traced in the block's graph",
    # a torch.library op's schema takes tensors and scalars only, no parameter object
    "bloomtrain/kernels/flash_attention.py:_attention_op": "a torch.library op's schema",
    "bloomtrain/kernels/flash_attention.py:_attention_backward_op": "a torch.library op's schema",
    # torch.nn.Linear's arguments (in, out, bias, dtype, device) plus Megatron's (state, gather/input, skip_bias_add)
    "bloomtrain/parallel/layers.py:ColumnParallelLinear.__init__": "Megatron's ColumnParallelLinear arguments",
    "bloomtrain/parallel/layers.py:RowParallelLinear.__init__": "Megatron's RowParallelLinear arguments",
}


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(``path:qualified name``, node) of every function: ``Class.method``, ``outer.inner``."""
    found = []

    def visit(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{rel}:{prefix}{child.name}", child))
                visit(child, rel, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, rel, f"{prefix}{child.name}.")
            else:
                visit(child, rel, prefix)

    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            visit(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(ROOT).as_posix(), "")
    return found


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    return len([p for p in [*a.posonlyargs, *a.args, *a.kwonlyargs] if p.arg not in ("self", "cls")])


def _is_triton_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``@triton.jit`` code takes pointers, sizes, strides and constexprs only (Triton passes no objects), so its
    width is the kernel's; its length is still bounded."""
    jit = any(ast.unparse(d) == "triton.jit" for d in node.decorator_list)
    return jit and node.end_lineno - node.lineno + 1 <= MAX_LINES


def test_no_function_is_longer_than_60_lines_or_takes_more_than_6_values():
    functions = _functions()
    assert len(functions) > 1000  # the walk found the packages
    over = []
    for name, node in functions:
        if _is_triton_kernel(node):
            continue
        lines = node.end_lineno - node.lineno + 1
        params = _params(node)
        if (lines > MAX_LINES or params > MAX_PARAMS) and name not in ALLOWED:
            over.append(f"{name} (line {node.lineno}): {lines} lines, {params} parameters")
    assert not over, "split these functions or give them a parameter object:\n" + "\n".join(over)


def test_the_allowlist_names_functions_that_exist_and_are_over():
    functions = dict(_functions())
    assert set(ALLOWED) <= set(functions), set(ALLOWED) - set(functions)
    assert all(_params(functions[name]) > MAX_PARAMS for name in ALLOWED)  # no stale entry
