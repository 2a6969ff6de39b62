"""ROOTS's parameters as bloomdata clean settings: how configs/clean/roots.yaml was written from
bloomdata/clean/roots_data/parameters_filtering.json (the record of ROOTS's parameters_filtering.py), and what
test_clean_roots checks it against. A mapping of names, not ROOTS's code."""

from __future__ import annotations

from typing import Any


def roots_language_settings(p: dict[str, Any]) -> dict[str, Any]:
    """One ROOTS parameter block as a ``Thresholds`` dict (a check whose ``cond_*`` is off is null)."""

    def on(cond: str, value: Any) -> Any:
        return value if p[cond] else None

    return {
        "min_words": on("cond_check_number_words", p["number_words_min_cutoff"]),
        "max_words": on("cond_check_number_words", p["number_words_max_cutoff"]),
        "min_chars": None, "max_chars": None,
        "char_repetition_n": p["character_repetition_length"],
        "max_char_repetition": on("cond_check_character_repetition_removal", p["character_repetition_max_cutoff"]),
        "word_repetition_n": p["word_repetition_length"],
        "max_word_repetition": on("cond_check_word_repetition_removal", p["word_repetition_max_cutoff"]),
        "max_special_chars": on("cond_check_special_characters", p["special_characters_max_cutoff"]),
        "min_closed_class": on("cond_check_stopwords", p["stopwords_min_cutoff"]),
        "max_flagged": on("cond_check_flagged_words", p["flagged_words_max_cutoff"]),
        "min_lang_id_score": on("cond_check_lang_id", p["lang_id_min_cutoff"]),
        "max_perplexity": on("cond_check_perplexity", p["perplexity_max_cutoff"]),
        "remove_words_containing": on("cond_remove_words_with_incorrect_substrings", p["incorrect_word_substrings"]),
        "max_word_length": on("cond_remove_long_words", p["length_word_max_cutoff"]),
        "sentencepiece_words": p["tokenization"],
        "word_augmentation": p["words_augmentation_group_sizes"] if p["cond_words_augmentation"] else [],
        "augmentation_join": p["words_augmentation_join_char"],
        "min_bytes": None, "min_space_words": None,  # the catalogue's small-document filters: not in OSCAR's
    }
