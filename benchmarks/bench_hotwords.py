"""Hot words on a trained run: recall of rare words with and without boosting them, and the cost
to the sentences that hold none of them.

Why: a hot word (``--hotword``, docs/hotwords.md) is a word the model rarely or never heard in
training (a name, a product, a term) that the user knows will be said. So the words boosted here
are the *rare* words of the test sentences: those that occur at most ``--max-train-count`` times
in the training transcripts (the open-vocabulary corpus holds a tenth of its vocabulary out of
training entirely), ``--words`` of them drawn at random. For each test set and decoder (the beam
search alone, and with the run's word language model when ``--lm`` is given) it reports:

- **recall**: the share of the boosted words' occurrences in the references that the hypothesis
  holds exactly, at the same place of a word-level alignment (minimal edit distance);
- **false alarms**: boosted words in hypotheses where the reference has none;
- **WER of the other sentences**: those whose reference holds none of the boosted words, where a
  boost can only do harm.

Targets (docs/benchmarks.md, "Hot words"): boosting at least doubles the recall, and costs the
other sentences at most 0.5 points of WER.

``--boosts`` sweeps boosts a label on the dev split first (its own rare words), which is how the
default boost for characters was chosen; the test sets are then decoded at ``--boost`` (default:
the labels' default).

    python benchmarks/bench_hotwords.py --run RUN [--lm lm.arpa] [--splits test,test-unseen]
        [--words 100] [--boosts 0.5,1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "asrkit-decoder-kenlm"))  # the plugin, from source

from tqdm import tqdm  # noqa: E402

from asrkit import plugins  # noqa: E402
from asrkit.config.hotwords import Hotword, Hotwords  # noqa: E402
from asrkit.core.metrics import corpus_score  # noqa: E402
from asrkit.dataset.manifest import read_csv  # noqa: E402
from asrkit.evaluation.evaluate import load_split_model  # noqa: E402
from asrkit.runs.run import Run, load_run  # noqa: E402
from asrkit.runs.scoring import BatchOutputs  # noqa: E402
from asrkit.types import Decoder  # noqa: E402


def matched(reference: Sequence[str], hypothesis: Sequence[str]) -> set[int]:
    """The positions of ``reference`` that a minimal word alignment pairs with an equal word of
    ``hypothesis``."""
    rows, cols = len(reference), len(hypothesis)
    cost = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        cost[i][0] = i
    for j in range(cols + 1):
        cost[0][j] = j
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1,
                             cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]))
    found, i, j = set(), rows, cols
    while i and j:
        same = reference[i - 1] == hypothesis[j - 1]
        if cost[i][j] == cost[i - 1][j - 1] + (not same):
            if same:
                found.add(i - 1)
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return found


def rare_words(references: Sequence[str], train_counts: Counter, count: int, max_train: int,
               seed: int) -> list[str]:
    """``count`` words (at least 3 letters) of ``references`` seen at most ``max_train`` times
    in training, drawn at random (all of them if there are fewer)."""
    candidates = sorted({word for text in references for word in text.split()
                         if len(word) >= 3 and train_counts[word] <= max_train})
    return sorted(random.Random(seed).sample(candidates, min(count, len(candidates))))


def measure(references: Sequence[str], hypotheses: Sequence[str],
            words: set[str]) -> dict[str, Any]:
    """Recall and false alarms of ``words``, and the WER of the sentences without them."""
    occurrences = found = false_alarms = 0
    others_ref, others_hyp = [], []
    for reference, hypothesis in zip(references, hypotheses, strict=True):
        ref, hyp = reference.split(), hypothesis.split()
        hits = matched(ref, hyp)
        wanted = [i for i, word in enumerate(ref) if word in words]
        occurrences += len(wanted)
        found += sum(i in hits for i in wanted)
        false_alarms += max(0, sum(w in words for w in hyp) - sum(i in hits for i in wanted))
        if not wanted:
            others_ref.append(reference)
            others_hyp.append(hypothesis)
    everything = corpus_score(references, hypotheses)
    others = corpus_score(others_ref, others_hyp)
    return {"recall": round(found / max(1, occurrences), 4), "occurrences": occurrences,
            "found": found, "false_alarms": false_alarms,
            "other_sentences": len(others_ref), "wer_others": round(others.wer, 4),
            "wer": round(everything.wer, 4)}


def decode(decoder: Decoder, outputs: Sequence[BatchOutputs], run: Run, what: str) -> list[str]:
    texts = []
    for batch in tqdm(outputs, desc=what, unit="batch", leave=False):
        texts += list(decoder.decode(batch.logits, batch.lengths, run.labels))
    return texts


def decoders(lm: Path | None, beam_width: int) -> dict[str, Decoder]:
    """The beam search, and with ``lm`` the kenlm decoder at its default weights (as
    bench_learning's "word 3-gram" rows)."""
    chosen = {"beam": plugins.get("decoder", "beam").with_config(beam_width=beam_width)}
    if lm is not None:
        chosen["kenlm"] = plugins.get("decoder", "kenlm").with_config(lm=str(lm),
                                                                      beam_width=beam_width)
    return chosen


def boosted(decoder: Decoder, words: Sequence[str], boost: float | None) -> Decoder:
    return decoder.with_hotwords(Hotwords(tuple(Hotword(word, boost) for word in words)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--lm", type=Path, help="A word LM (ARPA): also decode with kenlm.")
    parser.add_argument("--splits", default="test", help="Test sets, comma-separated.")
    parser.add_argument("--dev", default="dev", help="The split the --boosts sweep runs on.")
    parser.add_argument("--boosts", default="", help="Boosts a label to sweep on dev, "
                        "comma-separated (each decoder); none: no sweep.")
    parser.add_argument("--boost", type=float, default=None,
                        help="The boost a label on the test sets [default: the labels'].")
    parser.add_argument("--words", type=int, default=100, help="Rare words to boost a split.")
    parser.add_argument("--max-train-count", type=int, default=1)
    parser.add_argument("--beam-width", type=int, default=100)
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args()

    run = load_run(args.run)
    train_counts = Counter(word for row in read_csv(run.dataset / "train.csv")
                           for word in row.transcript.split())
    searches = decoders(args.lm, args.beam_width)
    report: dict[str, Any] = {"run": str(args.run), "beam_width": args.beam_width,
                              "max_train_count": args.max_train_count, "splits": {}}

    def split_outputs(split: str) -> list[BatchOutputs]:
        return list(load_split_model(run, split, args.checkpoint).outputs())

    def compare(split: str, outputs: list[BatchOutputs], names: Sequence[str],
                boosts: Sequence[float | None]) -> dict[str, Any]:
        references = [ref for batch in outputs for ref in batch.references]
        words = rare_words(references, train_counts, args.words, args.max_train_count,
                           args.seed)
        result: dict[str, Any] = {"utterances": len(references), "boosted_words": words}
        for name in names:
            base = searches[name]
            began = time.monotonic()
            plain = measure(references, decode(base, outputs, run, f"{split} {name}"),
                            set(words))
            plain["seconds"] = round(time.monotonic() - began, 1)
            result[name] = plain
            for boost in boosts:
                began = time.monotonic()
                texts = decode(boosted(base, words, boost), outputs, run,
                               f"{split} {name} boost {boost}")
                found = measure(references, texts, set(words))
                found["seconds"] = round(time.monotonic() - began, 1)
                result[f"{name}+hotwords" + (f"@{boost:g}" if boost is not None else "")] = found
        return result

    if args.boosts:
        sweep = [float(b) for b in args.boosts.split(",")]
        report["dev_sweep"] = compare(args.dev, split_outputs(args.dev), list(searches), sweep)
    report["boost"] = args.boost
    for split in args.splits.split(","):
        report["splits"][split] = compare(split, split_outputs(split), list(searches),
                                          [args.boost])
    if args.json:
        print(json.dumps(report, indent=2))
        return
    sections = ([("dev sweep " + args.dev, report["dev_sweep"])] if args.boosts else []) + [
        (split, result) for split, result in report["splits"].items()]
    for title, result in sections:
        print(f"{title}: {result['utterances']} utterances, "
              f"{len(result['boosted_words'])} boosted words")
        for name, row in result.items():
            if isinstance(row, dict):
                print(f"  {name:22} recall {row['recall']:6.1%} ({row['found']}/"
                      f"{row['occurrences']})  false alarms {row['false_alarms']:3}  "
                      f"WER others {row['wer_others']:6.2%} ({row['other_sentences']} "
                      f"sentences)  WER {row['wer']:6.2%}  {row['seconds']:.0f} s")


if __name__ == "__main__":
    main()
