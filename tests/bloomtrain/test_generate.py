"""Generation: greedy decoding equals transformers' ``generate``; top-k/top-p sampling obeys its filters."""

from __future__ import annotations

import torch

from bloomtrain.cli import main as cli
from bloomtrain.generate import Sampling, _filter_logits, generate, load_model


def _saved_hf(tmp_path, hf_bloom, tokenizer_dir):
    hf = hf_bloom(n_head=6, n_layer=2)
    hf.save_pretrained(tmp_path / "hf")
    for f in tokenizer_dir.iterdir():
        (tmp_path / "hf" / f.name).write_bytes(f.read_bytes())
    return hf, tmp_path / "hf"


def test_greedy_equals_transformers_generate(tmp_path, hf_bloom, tiny_tokenizer_dir):
    hf, path = _saved_hf(tmp_path, hf_bloom, tiny_tokenizer_dir)
    ours = load_model(path)
    ids = torch.randint(4, 250, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding, as for batched prompts
    ids[1, :3] = 3
    expected = hf.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=3,
                           eos_token_id=None)
    got = generate(ours, ids, Sampling(max_new_tokens=10, greedy=True), attention_mask=mask)
    assert torch.equal(got, expected)


def test_top_k_and_top_p_filters():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0, -1.0]])
    assert torch.isfinite(_filter_logits(logits, 2, None)).tolist() == [[False, True, True, False, False]]
    probs = logits.softmax(-1)[0]  # sorted mass: 0.64, 0.24, 0.09, ...
    kept = torch.isfinite(_filter_logits(logits, None, float(probs[1] + 0.01))).tolist()
    assert kept == [[False, True, True, False, False]]
    assert torch.isfinite(_filter_logits(logits, None, 0.01)).sum() == 1  # the top token always stays


def test_sampling_is_seeded_and_stays_in_top_k(tmp_path, hf_bloom, tiny_tokenizer_dir):
    _, path = _saved_hf(tmp_path, hf_bloom, tiny_tokenizer_dir)
    model = load_model(path)
    ids = torch.randint(4, 250, (3, 5), generator=torch.Generator().manual_seed(1))

    def sample(seed):
        return generate(model, ids, Sampling(max_new_tokens=8, top_k=3, temperature=2.0),
                        generator=torch.Generator().manual_seed(seed))

    out = sample(5)
    assert torch.equal(out, sample(5)) and not torch.equal(out, sample(6))
    with torch.no_grad():
        logits = model(out[:, :-1])[:, 4:]  # the distribution each new token was drawn from
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == out[:, 5:, None]).any(-1).all()
    greedy = generate(model, ids, Sampling(max_new_tokens=8, greedy=True))
    assert torch.equal(generate(model, ids, Sampling(max_new_tokens=8, top_k=1), generator=torch.Generator()), greedy)


def test_cli_generates_from_checkpoint_and_export(tmp_path, hf_bloom, tiny_tokenizer_dir, capsys):
    _, path = _saved_hf(tmp_path, hf_bloom, tiny_tokenizer_dir)
    assert cli(["import", str(path), "--out", str(tmp_path / "ckpt"), "--tp", "2"]) == 0
    capsys.readouterr()
    args = ["--prompt", "hello world", "--prompt", "the fox", "--max-new-tokens", "6", "--greedy"]
    assert cli(["generate", "--model", str(tmp_path / "ckpt"), *args]) == 0
    from_ckpt = capsys.readouterr().out.splitlines()
    assert cli(["generate", "--model", str(path), *args]) == 0
    from_hf = capsys.readouterr().out.splitlines()
    assert from_ckpt == from_hf and len(from_hf) == 2
    assert from_hf[0].startswith("hello world") and from_hf[1].startswith("the fox")
    assert cli(["generate", "--model", str(path), "--prompt", "hi", "--top-k", "5", "--top-p", "0.9",
                "--seed", "3", "--max-new-tokens", "4"]) == 0
