"""`bloomtrain generate --model DIR --prompt TEXT [...]`: greedy or top-k / top-p sampling from a checkpoint or
an exported model (``bloomtrain.generate``), with the model's tokenizer.json (or ``--tokenizer``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomtrain.cli import torch_dtype
from bloomtrain.config import Dtype


class GenerateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="checkpoint dir (holds `latest`) or transformers BLOOM dir",
                       json_schema_extra=cli_option(metavar="DIR"))
    prompts: list[str] = Field(min_length=1, description="a prompt to continue (repeat for a batch)",
                               json_schema_extra=cli_option("--prompt", metavar="TEXT"))
    tokenizer: str | None = Field(default=None, description="dir with tokenizer.json (default: --model)",
                                  json_schema_extra=cli_option(metavar="DIR"))
    max_new_tokens: int = Field(default=32, ge=1, description="tokens to generate per prompt at most")
    greedy: bool = Field(default=False, description="argmax decoding (ignores the sampling flags)")
    temperature: float = Field(default=1.0, gt=0, description="sampling temperature")
    top_k: int | None = Field(default=None, ge=1, description="sample among the k most likely tokens")
    top_p: float | None = Field(default=None, gt=0, le=1, description="sample in the smallest set holding this mass")
    seed: int = Field(default=0, description="sampling seed")
    dtype: Dtype = Field(default="float32", description="dtype the model runs in")


def parser() -> ConfigParser[GenerateConfig]:
    return ConfigParser(GenerateConfig, "bloomtrain generate", __doc__.split("\n\n")[0])


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    import torch  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415

    from bloomtrain.generate import Sampling, generate, load_model  # noqa: PLC0415

    tok_path = Path(config.tokenizer or config.model) / "tokenizer.json"
    if not tok_path.is_file():
        raise BloomstackError(f"{tok_path} not found; pass --tokenizer DIR with the model's tokenizer.json")
    tokenizer = Tokenizer.from_file(str(tok_path))
    model = load_model(Path(config.model), torch_dtype(config.dtype))
    eos = tokenizer.token_to_id("</s>")
    encoded = [tokenizer.encode(p, add_special_tokens=False).ids for p in config.prompts]
    if not all(encoded):
        raise BloomstackError("--prompt: every prompt must encode to at least one token")
    width = max(len(e) for e in encoded)
    pad = tokenizer.token_to_id("<pad>") or 0
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])  # left padding
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    sampling = Sampling(max_new_tokens=config.max_new_tokens, greedy=config.greedy, temperature=config.temperature,
                        top_k=config.top_k, top_p=config.top_p, eos_token_id=eos,
                        vocab_limit=tokenizer.get_vocab_size())
    out = generate(model, ids, sampling, attention_mask=mask, generator=torch.Generator().manual_seed(config.seed))
    for prompt, row in zip(config.prompts, out[:, width:].tolist()):
        if eos is not None and eos in row:
            row = row[: row.index(eos)]
        print(prompt + tokenizer.decode(row))
    return 0
