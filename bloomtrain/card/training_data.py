"""The training data section of a model card: the blend the run trained on (a table and ``languages.png``), the
cleaning that produced its documents (clean_summary.json), and the tokenizer with its fertility per language."""

from __future__ import annotations

import re
from pathlib import Path

from bloomdata.blend.spec import BlendSpec
from bloomdata.clean.summary import CleanSummary, LangCounts
from bloomtrain.card.images import LANGUAGES_PNG, languages_pie
from bloomtrain.card.markdown import fmt, note, pct, table
from bloomtrain.card.records import CardRecords

# A dataset named by a language code (en, zh-Hans, pt_br): its primary subtag is the card's language.
_LANGUAGE_NAME = re.compile(r"([a-z]{2,3})(?:[-_][A-Za-z0-9]{2,8})*")
_NOT_LANGUAGES = frozenset({"und", "mul", "zxx"})  # ISO 639 "undetermined", "multiple", "no linguistic content"
REDACTED = {"emails": "e-mails", "ips": "IPs", "keys": "keys", "users": "user names"}


def languages(blend: BlendSpec | None) -> list[str]:
    """ISO 639 codes of the blend's datasets, in blend order (datasets not named by a language code, such as
    ``code``, are left out)."""
    codes: list[str] = []
    for d in blend.datasets if blend else []:
        m = _LANGUAGE_NAME.fullmatch(d.name)
        if m and m.group(1) not in _NOT_LANGUAGES:
            codes.append(m.group(1))
    return list(dict.fromkeys(codes))


def blend_part(r: CardRecords, out_dir: Path) -> str:
    blend = r.blend
    if blend is None:
        return note("training data", r.notes.get("blend", "the checkpoint holds no training record"))
    how = f"the ratios of `{blend.mixture}`" if blend.mixture else \
        f"alpha {blend.alpha}" + (f" for a budget of {blend.token_budget:,} tokens" if blend.token_budget else "")
    rows = [(d.name, f"{100 * d.weight:.2f}%", fmt(d.tokens, ","), fmt(d.tokens_drawn, ","), fmt(d.epochs, ".2f"))
            for d in blend.datasets]
    languages_pie(blend, out_dir)
    return "\n\n".join([
        f"The run trained on the blend `{r.blend_path}`: {len(blend.datasets)} datasets, weighted by {how}. "
        "Tokens available count the training split; tokens drawn and epochs are the blend's plan for its budget.",
        table(["dataset", "share of samples", "tokens available", "tokens drawn", "epochs"], rows),
        f"![Share of each language in the training blend]({LANGUAGES_PNG})"])


def cleaning_part(r: CardRecords) -> str:
    c = r.clean
    if c is None:
        return note("cleaning", "no `clean_summary` was given (the data was not cleaned by `bloomdata clean`, or its "
                                "clean_summary.json was not passed)")
    reasons = c.reasons_seen()
    # e-mail and IP addresses always (the default PII step), API keys and user names when a run redacted any
    kinds = ["emails", "ips", *(k for k in ("keys", "users") if getattr(c, f"{k}_redacted"))]
    counts: list[tuple[str, LangCounts | CleanSummary]] = [*c.languages.items(), ("total", c)]
    rows = [[name, f"{x.documents_in:,}", pct(x.documents_kept, x.documents_in), pct(x.bytes_kept, x.bytes_in),
             *(pct(x.removed.get(reason, 0), x.documents_in) for reason in reasons),
             *(getattr(x, f"{k}_redacted") for k in kinds)] for name, x in counts]
    head = f"`bloomdata clean` with the {c.settings_name} settings kept {c.documents_kept:,} of " \
           f"{c.documents_in:,} documents ({pct(c.documents_kept, c.documents_in)}). Removal rates are shares of " \
           "each language's documents; bytes kept are after normalization and redaction."
    header = ["language", "documents in", "kept", "bytes kept", *(f"removed: {x}" for x in reasons),
              *(f"{REDACTED[k]} redacted" for k in kinds)]
    return "\n\n".join(["### Cleaning", head, table(header, rows)])


def tokenizer_part(r: CardRecords) -> str:
    if r.tokenizer_dir is None:
        return note("the tokenizer", "neither the run nor the export named one")
    rep = r.tokenizer_report
    what = f"{r.provenance.model.vocab_size:,} tokens (the model's vocabulary; no training_report.json beside it)" \
        if rep is None else f"{rep.vocab_size:,} tokens, trained on {rep.total_bytes_drawn:,} bytes sampled with " \
                            f"alpha {rep.alpha} from {len(rep.languages)} languages"
    parts = ["### Tokenizer", f"Byte-level BPE with BLOOM's pre-tokenizer and no normalization (`{r.tokenizer_dir}`): "
                              f"{what}."]
    if r.fertility is None:
        parts.append(note("fertility per language", "no `fertility` table was given (write one with `bloomdata "
                          "fertility --json`)"))
    else:
        rows = [(f.lang, f"{f.docs:,}", fmt(f.tokens_per_word, ".3f"), f"{f.tokens_per_char:.4f}") for f in r.fertility]
        parts += ["Fertility (tokens per whitespace word, '-' for scripts written without spaces; tokens per "
                  "character):", table(["language", "documents", "tokens per word", "tokens per character"], rows)]
    return "\n\n".join(parts)


def training_data(r: CardRecords, out_dir: Path) -> str:
    return "\n\n".join(["## Training data", blend_part(r, out_dir), cleaning_part(r), tokenizer_part(r)])
