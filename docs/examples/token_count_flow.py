"""A flow stage of your own: the tokens of every dataset in a directory of Megatron .bin/.idx files, counted once
and skipped on the next run when nothing changed (docs/extending.md).

    python docs/examples/token_count_flow.py DATA_DIR [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prefect import flow
from pydantic import BaseModel

from bloomdata.megatron.indexed import IndexedDataset
from flows.failures import user_errors
from flows.stages import Stage, stage_key


class TokenCounts(BaseModel):
    tokens: dict[str, int]  # dataset name -> tokens


@flow(name="bloom-token-counts")
@user_errors
def token_count_flow(data_dir: str, out_dir: str = "runs/token-counts") -> TokenCounts:
    out, idx_files = Path(out_dir).resolve(), sorted(Path(data_dir).glob("*.idx"))
    stage = Stage("token-counts", out, stage_key({"data_dir": data_dir}, inputs=idx_files), TokenCounts)

    def work() -> TokenCounts:
        counts = {p.stem: int(IndexedDataset(p.with_suffix("")).sizes.sum()) for p in idx_files}
        out.mkdir(parents=True, exist_ok=True)
        (out / "counts.json").write_text(json.dumps(counts, indent=1))
        return TokenCounts(tokens=counts)

    return stage.run(work, outputs=lambda _: {"counts": out / "counts.json"}).result


if __name__ == "__main__":
    print(token_count_flow(*sys.argv[1:]).tokens)
