"""Scoring a model on a split: run it over the batches, decode, score, and report; what the
dev evaluations of a training and ``asrkit evaluate`` share.

The report lists corpus WER and CER (sums of edit distances over sums of reference lengths)
with their bootstrap confidence intervals (:mod:`asrkit.core.bootstrap`), the mean loss (the
run's training objective's: CTC's by default), and the best, median and worst utterances with
reference and hypothesis, as the Deep Speech notebook and DeepSpeech's reports did; and, for a
CTC decoder, how well the words' confidences are calibrated (:mod:`asrkit.runs.calibration`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from asrkit.core.bootstrap import LEVEL, SAMPLES, SEED, Interval, rate_interval
from asrkit.core.confidence import WordEvidence
from asrkit.core.labels import Labels
from asrkit.core.metrics import Score, matched_words, score
from asrkit.core.settings import format_value, to_dict
from asrkit.core.storage import Location
from asrkit.core.viterbi import log_softmax, text_tokens, word_tokens
from asrkit.objectives.ctc import CTCObjective
from asrkit.runs.calibration import ConfidenceReport
from asrkit.types import CTC_LOGITS, AcousticModel, Decoder, ModelSpec, Objective

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf



@dataclass(frozen=True)
class Predict:
    """What :func:`make_predict` returns: ``predict(features, lengths, labels,
    label_lengths)`` -> ``(model output, output lengths, per-utterance loss)``, compiled; and
    ``decoder_inputs(output)``, what the run's decoders read of a batch's output (numpy): the
    output itself for CTC logits, or the output with the objective's head (a transducer's)."""

    function: Callable[..., tuple[Any, Any, Any]]
    decoder_inputs: Callable[[Any], Any]

    def __call__(self, features: tf.Tensor, lengths: tf.Tensor, labels: tf.Tensor,
                 label_lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        return self.function(features, lengths, labels, label_lengths)


@dataclass
class UtteranceResult:
    id: str
    reference: str
    hypothesis: str
    loss: float
    wer: float
    cer: float
    #: The counts behind ``wer`` and ``cer``, which the bootstrap intervals resample.
    word_errors: int = 0
    words: int = 0
    char_errors: int = 0
    chars: int = 0


@dataclass
class Evaluation:
    split: str
    decoder: str
    loss: float
    total: Score
    utterances: list[UtteranceResult] = field(default_factory=list)
    #: Which weights were scored, when known: ``{"kind": "best", "step": 1200, ...}``.
    checkpoint: dict[str, Any] | None = None
    #: The decoder's settings (its ``config`` as JSON), and those that differ from its defaults.
    decoder_settings: dict[str, Any] = field(default_factory=dict)
    decoder_changed: dict[str, Any] = field(default_factory=dict)
    #: The utterances whose transcript the decoder cut at its length limit
    #: (:class:`asrkit.types.Decoded`), by id.
    hit_length_limit: list[str] = field(default_factory=list)
    #: A streaming run's chunk in milliseconds (0: the whole utterance); None for the others.
    chunk_ms: float | None = None
    #: How well the words' confidences are calibrated (a CTC decoder's; None: not measured).
    word_confidence: ConfidenceReport | None = None
    #: The hot words the decoder boosted (``{"text", "boost"}``; boost None: the labels'
    #: default), if any.
    hotwords: list[dict[str, Any]] = field(default_factory=list)

    @property
    def wer(self) -> float:
        return self.total.wer

    @property
    def cer(self) -> float:
        return self.total.cer

    def intervals(self) -> dict[str, Interval]:
        """The 95 % bootstrap confidence intervals of the WER and the CER
        (:mod:`asrkit.core.bootstrap`: utterances resampled, a fixed seed)."""
        rows = self.utterances
        return {"wer": rate_interval([u.word_errors for u in rows], [u.words for u in rows]),
                "cer": rate_interval([u.char_errors for u in rows], [u.chars for u in rows])}

    def samples(self, count: int = 3) -> dict[str, list[UtteranceResult]]:
        """Best, median and worst utterances by WER (then loss), as in DeepSpeech's report."""
        ranked = sorted(self.utterances, key=lambda u: (u.wer, u.loss))
        middle = max(0, len(ranked) // 2 - count // 2)
        return {"best": ranked[:count], "median": ranked[middle:middle + count],
                "worst": ranked[-count:][::-1]}

    def to_json(self) -> dict[str, object]:
        def row(u: UtteranceResult) -> dict[str, object]:
            return {"id": u.id, "reference": u.reference, "hypothesis": u.hypothesis,
                    "loss": round(u.loss, 4), "wer": round(u.wer, 4), "cer": round(u.cer, 4)}

        intervals = self.intervals()
        return {
            **({"checkpoint": self.checkpoint} if self.checkpoint else {}),
            "split": self.split, "decoder": self.decoder,
            **({"chunk_ms": self.chunk_ms} if self.chunk_ms is not None else {}),
            "decoder_settings": self.decoder_settings,
            **({"hotwords": self.hotwords} if self.hotwords else {}),
            "utterances": len(self.utterances),
            "wer": self.wer, "cer": self.cer, "loss": self.loss,
            "intervals": {"level": LEVEL, "samples": SAMPLES, "seed": SEED,
                          **{k: v.to_json() for k, v in intervals.items()}},
            "word_errors": self.total.word_errors, "words": self.total.words,
            "word_substitutions": self.total.word_substitutions,
            "word_deletions": self.total.word_deletions,
            "word_insertions": self.total.word_insertions,
            "char_errors": self.total.char_errors, "chars": self.total.chars,
            "hit_length_limit": self.hit_length_limit,
            "word_confidence": (None if self.word_confidence is None
                                else self.word_confidence.to_json()),
            "samples": {k: [row(u) for u in v] for k, v in self.samples().items()},
            "results": [row(u) for u in self.utterances],
        }

    def text(self) -> str:
        intervals = self.intervals()
        lines = [f"{self.split}: {len(self.utterances)} utterances, WER {self.wer:.2%}, "
                 f"CER {self.cer:.2%}, loss {self.loss:.3f} ({self.decoder} decoder"
                 + "".join(f", {k}={v}" for k, v in self.decoder_changed.items())
                 + (f", {len(self.hotwords)} hot words" if self.hotwords else "") + ")"
                 + _chunk_words(self.chunk_ms),
                 f"  {LEVEL:.0%} bootstrap interval: WER {intervals['wer'].low:.2%} to "
                 f"{intervals['wer'].high:.2%}, CER {intervals['cer'].low:.2%} to "
                 f"{intervals['cer'].high:.2%}",
                 f"  word errors: {self.total.word_substitutions} substituted, "
                 f"{self.total.word_deletions} deleted, {self.total.word_insertions} inserted "
                 f"(of {self.total.words} words)"]
        if self.word_confidence is not None:
            lines.append(self.word_confidence.text())
        if self.hit_length_limit:
            lines.append(length_limit_line(self.hit_length_limit, self.decoder,
                                           self.decoder_settings))
        if self.checkpoint:
            chosen = self.checkpoint.get("best_by")
            lines.insert(0, f"checkpoint: {self.checkpoint['kind']} "
                            f"(step {self.checkpoint['step']}"
                            + (f", the lowest dev {chosen.upper()})" if chosen else ")"))
        for kind, rows in self.samples().items():
            lines.append(f"\n{kind}:")
            for u in rows:
                lines.append(f"  {u.id}  WER {u.wer:.2%}  loss {u.loss:.2f}")
                lines.append(f"    ref: {u.reference}")
                lines.append(f"    hyp: {u.hypothesis}")
        return "\n".join(lines)


def length_limit_line(ids: list[str], decoder: str, settings: Mapping[str, Any]) -> str:
    """One line naming the utterances a decoder cut at its length limit, and what to change."""
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    ratio = settings.get("max_length_ratio")
    fix = (f"raise -o decoder.max_length_ratio (now {ratio}) if their transcripts are longer"
           if ratio is not None else "raise the decoder's length limit")
    return (f"  {len(ids)} transcript(s) cut at the {decoder} decoder's length limit ({shown}): "
            f"the decoder did not end them (a loop, or a limit too low); {fix}")


def make_predict(model: AcousticModel, spec: ModelSpec, model_config: Any,
                 num_features: int, *, objective: Objective | None = None,
                 objective_config: Any = None, head: keras.Model | None = None) -> Predict:
    """A compiled function from a batch to (the model's output; output lengths; per-utterance
    loss of ``objective``, CTC when none is given: infinite for an utterance it cannot align,
    which the mean leaves out), with what the objective's decoders read of the output."""
    import tensorflow as tf

    if objective is None:
        objective = CTCObjective()
    if objective_config is None:
        objective_config = objective.Config()

    signature = [tf.TensorSpec([None, None, num_features], tf.float32),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, None], tf.int32),
                 tf.TensorSpec([None], tf.int32)]

    @tf.function(input_signature=signature)
    def predict(features: tf.Tensor, lengths: tf.Tensor, labels: tf.Tensor,
                label_lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        logits = tf.cast(model((features, lengths), training=False), tf.float32)
        out_lengths = spec.output_length(model_config, lengths)
        loss, feasible = objective.losses(objective_config, head, logits, out_lengths, labels,
                                          label_lengths, training=False)
        return logits, out_lengths, tf.where(feasible, tf.cast(loss, tf.float32), float("inf"))

    def decoder_inputs(output: Any) -> Any:
        return objective.decoder_inputs(objective_config, head, output)

    return Predict(predict, decoder_inputs)


@dataclass
class BatchOutputs:
    """A model's outputs on one batch: what a decoder reads, with what scoring needs."""

    ids: list[str]
    references: list[str]
    #: What the run's decoders read: CTC logits ``[batch, time, classes]``, or what the
    #: objective makes of its model's output (:meth:`asrkit.types.Objective.decoder_inputs`).
    logits: Any
    lengths: np.ndarray  # [batch]
    losses: np.ndarray  # [batch], the loss of each utterance (the objective's)


def model_outputs(predict: Predict, batches: tf.data.Dataset) -> Iterator[BatchOutputs]:
    """Run the model over ``batches`` (a pipeline with ``with_text=True``), one batch at a
    time; kept (``list(...)``) they can be decoded by several decoders without running the
    model again (:mod:`asrkit.evaluation.decoder_search`)."""
    for batch in batches:
        logits, out_lengths, losses = predict(batch["features"], batch["feature_lengths"],
                                              batch["labels"], batch["label_lengths"])
        yield BatchOutputs([i.decode() for i in batch["ids"].numpy()],
                           [t.decode() for t in batch["transcripts"].numpy()],
                           predict.decoder_inputs(logits.numpy()), out_lengths.numpy(),
                           losses.numpy())


def decode_outputs(outputs: Iterable[BatchOutputs], decoder: Decoder, alphabet: Labels, split: str,
                   progress: bool = True, evidence: WordEvidence | None = None) -> Evaluation:
    """Decode and score the model's outputs on every batch of a split; with ``evidence``, a
    CTC decoder's words are added to it (:func:`add_words`), to measure their confidences."""
    results = []
    cut: list[str] = []
    total = Score(0, 0, 0, 0)
    bar = tqdm(desc=f"evaluate {split}", unit="utt", disable=not progress, leave=False)
    for out in outputs:
        hypotheses = decoder.decode(out.logits, out.lengths, alphabet)
        cut += [out.ids[row] for row in getattr(hypotheses, "hit_length_limit", ())]
        for row, (uid, ref, hyp, loss) in enumerate(zip(out.ids, out.references, hypotheses,
                                                        out.losses, strict=True)):
            if evidence is not None and decoder.reads == CTC_LOGITS:
                add_words(evidence, out.logits[row, :int(out.lengths[row])], ref, hyp, alphabet)
            s = score(ref, hyp)
            total = total + s
            results.append(UtteranceResult(uid, ref, hyp, float(loss), s.wer, s.cer,
                                           s.word_errors, s.words, s.char_errors, s.chars))
        bar.update(len(out.ids))
    bar.close()
    results.sort(key=lambda u: u.id)
    finite = [u.loss for u in results if math.isfinite(u.loss)]
    settings, changed = describe_decoder(decoder)
    hotwords = [{"text": word.text, "boost": word.boost}
                for word in (decoder.hotwords.words if decoder.hotwords else ())]
    return Evaluation(split, decoder.name, sum(finite) / max(1, len(finite)), total, results,
                      decoder_settings=settings, decoder_changed=changed,
                      hit_length_limit=sorted(cut), hotwords=hotwords)


def add_words(evidence: WordEvidence, logits: np.ndarray, reference: str, hypothesis: str,
              labels: Labels) -> None:
    """Add one utterance's hypothesis words to ``evidence``: placed on its CTC logits as
    transcription places them (:func:`asrkit.core.viterbi.text_tokens`), each right when the WER
    alignment pairs it with an identical reference word. A text that cannot be aligned adds
    nothing (it does not happen with CTC decoders, whose texts are paths of the logits)."""
    tokens = text_tokens(logits, log_softmax(logits), hypothesis, labels)
    if tokens is None:
        return
    groups = word_tokens(tokens, labels)
    words = ["".join(labels.body(t.label) for t in group) for group in groups]
    evidence.add(logits, groups, matched_words(reference.split(), words))


def evaluate_dataset(predict: Predict, batches: tf.data.Dataset, decoder: Decoder,
                     alphabet: Labels, split: str, progress: bool = True) -> Evaluation:
    """Decode and score every batch of ``batches`` (a pipeline with ``with_text=True``)."""
    return decode_outputs(model_outputs(predict, batches), decoder, alphabet, split, progress)


def describe_decoder(decoder: Decoder) -> tuple[dict[str, Any], dict[str, str]]:
    """The decoder's settings as JSON, and those that differ from its defaults as the command
    line writes them (for the report's first line)."""
    config = to_dict(decoder.config)
    defaults = to_dict(type(decoder.config)())
    return config, {k: format_value(getattr(decoder.config, k)) for k, v in config.items()
                    if defaults.get(k) != v}


def write_report(evaluation: Evaluation, folder: Location, name: str = "report") -> None:
    """``<name>.json`` and ``<name>.txt`` (which checkpoint, when the evaluation knows it)."""
    (folder / f"{name}.json").write_text(json.dumps(evaluation.to_json(), indent=2) + "\n")
    (folder / f"{name}.txt").write_text(evaluation.text() + "\n")


def _chunk_words(chunk_ms: float | None) -> str:
    """How a streaming run was decoded, for the report's first line."""
    if chunk_ms is None:
        return ""
    return ", whole utterances" if chunk_ms == 0 else f", chunks of {chunk_ms:g} ms"
