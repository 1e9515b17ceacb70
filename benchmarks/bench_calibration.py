"""How well a trained run's word confidences are calibrated, before and after the temperature
``asrkit evaluate --calibrate`` fits on dev; and the oracle WER of its N-best lists.

Why: a word confidence is only useful if it means what it says (of the words at 0.8, about 80 %
right). This scores the run's dev split and its test splits once (the model runs once a split;
its outputs are decoded by each decoder), and reports for each decoder and split:

- the expected calibration error (10 equal-width bins) and Brier score of the word confidences
  at temperature 1, and at the temperature fitted on dev's words
  (:func:`asrkit.core.confidence.fit_temperature`, what ``--calibrate`` saves), with the mean
  confidence against the share of words right;
- for comparison, the ECE at the temperature that instead minimises the negative
  log-likelihood of dev's frames' labels on the forced alignment of their references (a
  frame-level fit: what ``--calibrate`` does not do, and why);
- the oracle WER of the beam decoder's N-best lists for N = 1, 5, 10 (distinct transcripts, as
  ``asrkit transcribe --nbest`` lists them): each utterance scored by the hypothesis of its N
  best nearest to the reference. The room a rescoring of the lists has.

Nothing is written into the run folder: the temperature is fitted in memory, as ``--calibrate``
fits it.

Usage::

    ASRKIT_HOME=... python benchmarks/bench_calibration.py --run RUN \\
        [--splits test test-unseen test-flite] [--decoders greedy beam] [--lm LM.arpa] \\
        [--nbest 1 5 10] [--beam-width 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "asrkit-decoder-kenlm"))  # the plugin, from source

from asrkit import plugins  # noqa: E402
from asrkit.config.decoding import try_decoder  # noqa: E402
from asrkit.core.confidence import (  # noqa: E402
    HIGHEST_TEMPERATURE,
    LOWEST_TEMPERATURE,
    WordEvidence,
    fit_temperature,
)
from asrkit.core.metrics import edit_distance  # noqa: E402
from asrkit.core.viterbi import ctc_align, log_softmax  # noqa: E402
from asrkit.evaluation.evaluate import load_split_model  # noqa: E402
from asrkit.runs.calibration import confidence_report  # noqa: E402
from asrkit.runs.run import load_run  # noqa: E402
from asrkit.runs.scoring import decode_outputs  # noqa: E402
from asrkit.serving.transcribe import candidates  # noqa: E402


def oracle_wer(outputs: list, decoder, labels, counts: list[int]) -> dict[int, float]:
    """Each N's WER when every utterance is scored by its best of the N best hypotheses."""
    errors = dict.fromkeys(counts, 0)
    words = 0
    for out in outputs:
        for reference, found in zip(out.references,
                                    decoder.decode_nbest(out.logits, out.lengths, labels),
                                    strict=True):
            ref = reference.split()
            words += len(ref)
            best = candidates(found, max(counts))  # distinct transcripts, as --nbest lists them
            distances = [edit_distance(ref, c.text.split()) for c in best] or [len(ref)]
            for n in counts:
                errors[n] += min(distances[:n])
    return {n: errors[n] / max(1, words) for n in counts}


def frame_temperature(outputs: list, labels) -> float:
    """The temperature minimising the mean negative log-likelihood of each frame's label on
    the Viterbi alignment of its utterance's reference (the blank between the reference's
    labels): a frame-level calibration, for comparison."""
    import numpy as np

    rows, targets = [], []
    for out in outputs:
        for row, reference in enumerate(out.references):
            logits = np.asarray(out.logits[row, :int(out.lengths[row])], np.float32)
            tokens = ctc_align(log_softmax(logits), labels.encode(reference), labels.blank)
            if tokens is None:
                continue
            target = np.full(len(logits), labels.blank)
            for t in tokens:
                target[t.first:t.last + 1] = t.label
            rows.append(logits)
            targets.append(target)
    logits, target = np.concatenate(rows), np.concatenate(targets)
    grid = np.exp(np.linspace(np.log(LOWEST_TEMPERATURE), np.log(HIGHEST_TEMPERATURE), 200))
    losses = [-log_softmax(logits / t)[np.arange(len(target)), target].mean() for t in grid]
    return float(grid[int(np.argmin(losses))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a trained CTC run folder")
    parser.add_argument("--fit-split", default="dev", help="the split the temperature is fitted on")
    parser.add_argument("--splits", nargs="+", default=["test", "test-unseen", "test-flite"])
    parser.add_argument("--decoders", nargs="+", default=["greedy", "beam"],
                        help="decoders whose word confidences are measured (kenlm needs --lm)")
    parser.add_argument("--lm", type=Path, default=None, help="an ARPA model for kenlm")
    parser.add_argument("--nbest", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--beam-width", type=int, default=16)
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    run = load_run(args.run)
    decoders = {}
    for name in args.decoders:
        changes = {"beam_width": args.beam_width} if name != "greedy" else {}
        if name == "kenlm":
            changes["lm"] = str(args.lm)
        decoders[name] = plugins.get("decoder", name).with_config(**changes)
        try_decoder(decoders[name], run.labels)
    outputs = {}
    for split in [args.fit_split, *args.splits]:
        loaded = load_split_model(run, split, args.checkpoint)
        outputs[split] = list(loaded.outputs())
        print(f"scored {split}: {sum(len(o.ids) for o in outputs[split])} utterances",
              file=sys.stderr)

    frame_t = frame_temperature(outputs[args.fit_split], run.labels)
    results: dict = {"run": str(args.run), "fit_split": args.fit_split,
                     "frame_fitted_temperature": round(frame_t, 4), "decoders": {},
                     "oracle_wer": {}}
    for name, decoder in decoders.items():
        evidence = {}
        wer = {}
        for split, found in outputs.items():
            evidence[split] = WordEvidence()
            evaluation = decode_outputs(found, decoder, run.labels, split, progress=False,
                                        evidence=evidence[split])
            wer[split] = evaluation.wer
        temperature = fit_temperature(evidence[args.fit_split])
        rows = {}
        for split in outputs:
            before = confidence_report(evidence[split], 1.0)
            after = confidence_report(evidence[split], temperature)
            frame = confidence_report(evidence[split], frame_t)
            rows[split] = {"words": before.words, "wer": round(wer[split], 4),
                           "accuracy": round(before.accuracy, 4),
                           "before": {"ece": round(before.ece, 4),
                                      "brier": round(before.brier, 4),
                                      "mean_confidence": round(before.confidence, 4)},
                           "after": {"ece": round(after.ece, 4), "brier": round(after.brier, 4),
                                     "mean_confidence": round(after.confidence, 4)},
                           "frame_fitted": {"ece": round(frame.ece, 4),
                                            "brier": round(frame.brier, 4)}}
        results["decoders"][name] = {"temperature": round(temperature, 4), "splits": rows}
    beam = decoders.get("beam") or plugins.get("decoder", "beam").with_config(
        beam_width=args.beam_width)
    for split in args.splits:
        results["oracle_wer"][split] = {str(n): round(w, 4) for n, w in
                                        oracle_wer(outputs[split], beam, run.labels,
                                                   args.nbest).items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, found in results["decoders"].items():
        print(f"{name}: temperature {found['temperature']:.3g} fitted on {args.fit_split}'s "
              f"words (frame-level fit: {frame_t:.3g})")
        print(f"  {'split':12} {'words':>6} {'WER':>7} {'right':>7} {'conf':>7} {'ECE':>7} "
              f"{'Brier':>6} -> {'conf':>7} {'ECE':>7} {'Brier':>6} | frame-fit ECE")
        for split, row in found["splits"].items():
            b, a = row["before"], row["after"]
            print(f"  {split:12} {row['words']:6d} {row['wer']:7.2%} {row['accuracy']:7.2%} "
                  f"{b['mean_confidence']:7.2%} {b['ece']:7.2%} {b['brier']:6.3f} -> "
                  f"{a['mean_confidence']:7.2%} {a['ece']:7.2%} {a['brier']:6.3f} | "
                  f"{row['frame_fitted']['ece']:.2%}")
    print(f"oracle WER of the beam's N best (beam_width {args.beam_width}):")
    for split, found in results["oracle_wer"].items():
        print(f"  {split:12} " + "  ".join(f"N={n}: {w:.2%}" for n, w in found.items()))


if __name__ == "__main__":
    main()
