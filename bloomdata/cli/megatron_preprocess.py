"""`bloomdata megatron-preprocess`: Megatron-LM's ``tools/preprocess_data.py`` command line, verbatim, on the build.

    bloomdata megatron-preprocess --input flows/demo_corpus/en.jsonl.gz --output-prefix data/my-gpt --json-keys text \\
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model tok/ --append-eod --workers 2

writes ``data/my-gpt_text_document.bin/.idx``, byte-identical to what preprocess_data.py writes for the same
command (docs/megatron-data.md), through ``bloomdata build`` (``bloomdata.build.megatron_preprocess``). Flags are
parsed as preprocess_data.py parses them; ``--partitions`` (with ``--keep-sequential-samples``, or 1),
``--log-interval`` and ``--legacy-tokenizer`` are accepted and change nothing in the output (the build has its own
parallelism and progress bar). ``--split-sentences`` (with ``--lang``, ``--keep-newlines``) writes
``PREFIX_<key>_sentence.bin/.idx`` where NLTK and its punkt_tab data are installed, else is one line naming the
install (``bloomdata.build.megatron_sentences``). A flag of preprocess_data.py we do not implement, or any other, is one
line naming it (exit 2).
"""

from __future__ import annotations

import argparse
import sys

from bloomdata.build.megatron_preprocess import (
    TOKENIZER_TYPES,
    MegatronArgs,
    describe,
    preprocess,
    preprocess_sentences,
)
from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.encoder import ENCODER_HELP


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bloomdata megatron-preprocess", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--input", required=True, help="input file, directory, glob or URL (JSON lines)")
    p.add_argument("--json-keys", nargs="+", default=["text"], help="keys to extract from the json (one output each)")
    p.add_argument("--split-sentences", action="store_true", help="one sequence per sentence (NLTK's Punkt, its "
                   "punkt_tab data installed): writes PREFIX_<key>_sentence.bin/.idx")
    p.add_argument("--keep-newlines", action="store_true", help="with --split-sentences: newlines stay in the "
                   "sentences")
    p.add_argument("--append-eod", action="store_true", help="append the eod token to every document")
    p.add_argument("--lang", default="english", help="NLTK's sentence-splitting language (with --split-sentences)")
    p.add_argument("--output-prefix", required=True, help="PREFIX: writes PREFIX_<key>_document.bin/.idx")
    p.add_argument("--workers", type=int, required=True, help="worker processes (the build's --workers)")
    p.add_argument("--partitions", type=int, default=1, help="accepted with --keep-sequential-samples (or 1)")
    p.add_argument("--keep-sequential-samples", action="store_true", help="file order (always, here)")
    p.add_argument("--log-interval", type=int, default=1000, help="accepted; a progress bar shows the progress")
    p.add_argument("--tokenizer-type", required=True, help=f"one of {', '.join(TOKENIZER_TYPES)}")
    p.add_argument("--tokenizer-model", help="HuggingFaceTokenizer: a tokenizer directory (tokenizer.json)")
    p.add_argument("--vocab-file", help="GPT2BPETokenizer: vocab.json")
    p.add_argument("--merge-file", help="GPT2BPETokenizer: merges.txt")
    p.add_argument("--legacy-tokenizer", action="store_true", help="accepted; the same ids either way")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--encoder", choices=("auto", "hf"), default="auto",
                   help=f"not a preprocess_data.py flag: {ENCODER_HELP}")
    return p


def _refuse(args: argparse.Namespace, unknown: list[str]) -> None:
    """One line for what we do not do, naming the flag."""
    flags = [u for u in unknown if u.startswith("-")] or unknown
    if flags:
        raise BloomstackError(f"{flags[0]}: not supported by bloomdata megatron-preprocess (it takes preprocess_data"
                              ".py's --input, --output-prefix, --json-keys, --tokenizer-type, --tokenizer-model, "
                              "--vocab-file, --merge-file, --append-eod, --workers, --partitions, --log-interval)")
    if args.partitions > 1 and not args.keep_sequential_samples:
        raise BloomstackError(f"--partitions {args.partitions} without --keep-sequential-samples: preprocess_data.py "
                              "deals the lines out to the partitions in turn, reordering the documents; add "
                              "--keep-sequential-samples (file order, the same bytes) or drop --partitions")
    if args.workers < 0:
        raise BloomstackError(f"--workers {args.workers}: give 0 (in this process) or more")


def main(argv: list[str]) -> int:
    args, unknown = parser().parse_known_args(argv)
    _refuse(args, unknown)
    margs = MegatronArgs(
        input=args.input, output_prefix=args.output_prefix, workers=args.workers, tokenizer_type=args.tokenizer_type,
        json_keys=args.json_keys, tokenizer_model=args.tokenizer_model, vocab_file=args.vocab_file,
        merge_file=args.merge_file, append_eod=args.append_eod, progress=args.progress,
        encoder=args.encoder, split_sentences=args.split_sentences, keep_newlines=args.keep_newlines, lang=args.lang)
    if margs.split_sentences:
        print(preprocess_sentences(margs))
    else:
        print(describe(preprocess(margs), args.output_prefix))
    return 0


if __name__ == "__main__":
    from bloomdata.cli import main as dispatch

    sys.exit(dispatch(["megatron-preprocess", *sys.argv[1:]]))
