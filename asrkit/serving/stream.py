"""Streaming transcription: ``asrkit transcribe --stream``'s work.

Audio comes in pieces (a file read at its own pace or in real time, raw PCM on standard input,
a microphone); a streaming model's run turns them into words as they come:

::

    samples -> FeatureStream -> EncoderStream -> the utterance's output frames
                 (features as        (the model,       -> partial: the objective's greedy
                  the whole           chunk by chunk,       decoder on the utterance so far
                  recording's)        with its state)  -> final, at an endpoint: the chosen
                                                            decoder on the utterance

**Utterances and endpoints.** The model's state runs through the whole stream; its output frames
are gathered into an utterance, which ends (an *endpoint*, WeNet's and Kaldi's rules) when no
word has grown for ``endpoint_seconds`` after one was heard, or when the utterance reaches
``max_utterance_seconds`` (then it is cut in the longest pause between its words, the rest
carried into the next). Frames with no word in them are not kept beyond ``endpoint_seconds``.
So memory holds one chunk of audio and features, the model's state, and at most one utterance
of output frames, whatever the recording's length; and a recording that is one utterance gets
the final transcript ``asrkit evaluate`` scores for it, since the final decoding reads the same
frames the whole-utterance model gives (:class:`asrkit.types.StreamingModel`).

**Partial results** are the objective's ``greedy_decoder`` on the utterance so far, sent when
their text changes; the final one is the run's decoder (or ``--decoder``: a beam search, a
language model) on the whole utterance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from asrkit import plugins
from asrkit.config.decoding import try_decoder
from asrkit.config.overrides import DecoderChoice
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE, frame_seconds
from asrkit.evaluation.restore import restore_networks
from asrkit.runs.chunks import chunk_ms_of, with_chunk
from asrkit.runs.run import load_run
from asrkit.serving.encoder_stream import EncoderStream
from asrkit.serving.export import ExportedModel, is_export
from asrkit.serving.export_stream import ExportStream
from asrkit.serving.stream_features import FeatureStream
from asrkit.serving.transcribe import (
    ExportRecognizer,
    Word,
    as_float,
    resolve_decoder,
    window_words,
)
from asrkit.types import Decoder

if TYPE_CHECKING:
    from asrkit.core.labels import Labels


@dataclass(frozen=True)
class Endpoints:
    """When an utterance of a stream ends."""

    #: Seconds without a new word, after a word, that end an utterance.
    endpoint_seconds: float = 0.8
    #: The longest utterance: a longer one is cut at its longest pause.
    max_utterance_seconds: float = 20.0


@dataclass
class Update:
    """What a stream knows after a piece of audio: a ``partial`` transcript of the utterance so
    far (it may still change) or its ``final`` one."""

    kind: str
    words: list[Word]
    #: The utterance's span in the stream, seconds.
    start: float
    end: float
    #: Seconds of audio heard when this was known: the audio pushed so far, of which a
    #: model that looks ahead has decoded less.
    heard: float

    @property
    def text(self) -> str:
        return " ".join(w.word for w in self.words)

    def to_json(self) -> dict[str, object]:
        return {"type": self.kind, "text": self.text, "start": round(self.start, 3),
                "end": round(self.end, 3), "heard": round(self.heard, 3),
                "words": [w.to_json() for w in self.words]}

    def json_line(self) -> str:
        return json.dumps(self.to_json())


class StreamingModel:
    """A streaming run's checkpoint, ready to open streams (:meth:`open`)."""

    def __init__(self, folder: str | Path, checkpoint: str = "best",
                 chunk_ms: float | None = None) -> None:
        run = with_chunk(load_run(folder), chunk_ms)
        shape = run.spec.streaming(run.model_config)
        if shape is None:
            chunk = chunk_ms_of(run)
            raise AsrkitError(
                f"{folder}'s model ({run.spec.name}) does not stream: train one with -o "
                "model.streaming=true" if chunk is None else
                f"--stream needs a chunk: {folder} decodes whole utterances by default; give "
                "--chunk-ms")
        FeatureStream(run.extractor, run.feature_config, run.pipeline.context)  # streams?
        self.run = run
        self.model, self._head, state = restore_networks(run, checkpoint)
        self.labels: Labels = run.labels
        self.frame_seconds = frame_seconds(run.feature_config, run.spec, run.model_config)
        self.chunk_ms = chunk_ms_of(run)
        self.name = (f"{run.folder} ({run.spec.name}, step {state.get('global_step', '?')}, "
                     f"chunks of {self.chunk_ms:g} ms)")
        self.default_decoder = run.train.decoder
        self.greedy_decoder: Decoder = plugins.get("decoder", run.objective.greedy_decoder)

    def choose_decoder(self, choice: DecoderChoice) -> tuple[Decoder, str | None]:
        """The final results' decoder: the run's, or the one ``choice`` names (no warning)."""
        decoder = self.run.choose_decoder(choice)
        try_decoder(decoder, self.labels)
        return decoder, None

    def decoder_inputs(self, outputs: np.ndarray) -> Any:
        """What the decoders read of an utterance's output frames ``[frames, width]``."""
        return self.run.objective.decoder_inputs(self.run.objective_config, self._head,
                                                 outputs[np.newaxis])

    def open(self) -> tuple[FeatureStream, EncoderStream]:
        """A new stream's feature front end and encoder."""
        run = self.run
        features = FeatureStream(run.extractor, run.feature_config, run.pipeline.context)
        encoder = EncoderStream(self.model, run.spec, run.model_config, run.num_features())
        return features, encoder


class ExportStreamingModel:
    """A streaming export (its ``stream_step``: :mod:`asrkit.serving.export_stream`), ready to
    open streams as :class:`StreamingModel` does: its features are computed in its graph."""

    def __init__(self, path: str | Path, chunk_ms: float | None = None) -> None:
        self._export = ExportedModel(path)
        self.chunk_ms = float(self._export.stream_geometry["chunk_ms"])
        if chunk_ms is not None and chunk_ms != self.chunk_ms:
            raise AsrkitError(f"{path} streams in chunks of {self.chunk_ms:g} ms, fixed when it "
                              f"was exported: export the run again with --chunk-ms {chunk_ms:g}")
        self._recognizer = ExportRecognizer(self._export)
        self.labels = self._recognizer.labels
        self.frame_seconds = self._recognizer.frame_seconds
        self.greedy_decoder: Decoder = plugins.get("decoder", "greedy")
        self.name = f"{path} ({self._export.format}, chunks of {self.chunk_ms:g} ms)"

    def choose_decoder(self, choice: DecoderChoice) -> tuple[Decoder, str | None]:
        """The final results' decoder as ``asrkit transcribe`` chooses it for an export
        (:func:`asrkit.serving.transcribe.resolve_decoder`: the run's, greedy with a warning
        when that is not installed, or the one ``choice`` names), and the warning."""
        decoder, warning = resolve_decoder(choice, self._recognizer)
        try_decoder(decoder, self.labels)
        return decoder, warning

    def decoder_inputs(self, outputs: np.ndarray) -> np.ndarray:
        return outputs[np.newaxis]

    def open(self) -> tuple[_Samples, ExportStream]:
        """The audio goes to the export's step as it is: its features are in its graph."""
        return _Samples(), self._export.stream()


class _Samples:
    """The feature stage of an export's stream: the samples themselves."""

    def push(self, samples: np.ndarray) -> np.ndarray:
        return samples

    def finish(self) -> np.ndarray:
        return np.zeros(0, np.float32)


def load_streaming_model(path: str | Path, checkpoint: str = "best",
                         chunk_ms: float | None = None
                         ) -> StreamingModel | ExportStreamingModel:
    """A run folder's checkpoint or a streaming export, whichever ``path`` is."""
    if is_export(path):
        return ExportStreamingModel(path, chunk_ms)
    return StreamingModel(path, checkpoint, chunk_ms)


@dataclass
class _Utterance:
    """The output frames of the utterance being heard, from ``start`` (a frame number)."""

    start: int = 0
    frames: list[np.ndarray] = field(default_factory=list)
    count: int = 0
    partial: str = ""

    def joined(self) -> np.ndarray:
        if len(self.frames) > 1:
            self.frames = [np.concatenate(self.frames)]
        return self.frames[0]

    def drop(self, count: int) -> None:
        """Forget the first ``count`` frames."""
        if count:
            self.frames = [self.joined()[count:]]
            self.start += count
            self.count -= count


class StreamTranscriber:
    """One stream through a :class:`StreamingModel`: :meth:`push` audio as it comes, then
    :meth:`finish`; each returns the :class:`Update` s it made known."""

    def __init__(self, model: StreamingModel | ExportStreamingModel, decoder: Decoder,
                 endpoints: Endpoints = Endpoints()) -> None:
        self.model, self.decoder, self.endpoints = model, decoder, endpoints
        self._features, self._encoder = model.open()
        self._utterance = _Utterance()
        self._frames_out = 0
        self._samples_in = 0
        self._finished = False
        #: Whether the user stopped the stream (:func:`transcribe_stream`).
        self.interrupted = False

    @property
    def heard(self) -> float:
        """Seconds of audio pushed so far."""
        return self._samples_in / SAMPLE_RATE

    def push(self, samples: np.ndarray) -> list[Update]:
        """Audio ``[n]``, float in [-1, 1] or int16, 16 kHz mono: the updates it brings."""
        if self._finished:
            raise ValueError("the stream has finished")
        samples = np.asarray(samples)
        self._samples_in += len(samples)
        outputs = self._encoder.push(self._features.push(as_float(samples)))
        return self._take(outputs, final=False)

    def finish(self) -> list[Update]:
        """The end of the stream: the rest of the audio decoded, the last utterance final."""
        if self._finished:
            return []
        outputs = self._encoder.push(self._features.finish())
        tail = self._encoder.finish()
        self._finished = True
        if len(tail):
            outputs = np.concatenate([outputs, tail]) if len(outputs) else tail
        return self._take(outputs, final=True)

    def _take(self, outputs: np.ndarray, final: bool) -> list[Update]:
        utterance = self._utterance
        if len(outputs):
            utterance.frames.append(outputs)
            utterance.count += len(outputs)
            self._frames_out += len(outputs)
        if final:
            return self._final(utterance.count)
        if not len(outputs) or not utterance.count:
            return []
        words = self._words(self.model.greedy_decoder, utterance.count)
        updates: list[Update] = []
        text = " ".join(w.word for w in words)
        if text != utterance.partial:
            utterance.partial = text
            updates.append(self._update("partial", words, utterance.count))
        endpoint = self.endpoints
        seconds = self.model.frame_seconds
        if not words:  # silence: keep only what a word starting now could need
            keep = int(np.ceil(endpoint.endpoint_seconds / seconds))
            utterance.drop(max(0, utterance.count - keep))
        elif self._frames_out * seconds - words[-1].end >= endpoint.endpoint_seconds:
            updates += self._final(utterance.count)
        elif utterance.count * seconds >= endpoint.max_utterance_seconds:
            updates += self._final(self._cut(words))
        return updates

    def _cut(self, words: list[Word]) -> int:
        """Frames up to the middle of the longest pause between words (all, for one word)."""
        if len(words) < 2:
            return self._utterance.count
        gaps = [(b.start - a.end, (a.end + b.start) / 2) for a, b in pairwise(words)]
        middle = max(gaps)[1]
        return max(1, round(middle / self.model.frame_seconds) - self._utterance.start)

    def _final(self, count: int) -> list[Update]:
        """The utterance's first ``count`` frames decoded by the chosen decoder, dropped."""
        utterance = self._utterance
        if not count:
            return []
        words = self._words(self.decoder, count)
        update = self._update("final", words, count)
        utterance.drop(count)
        utterance.partial = ""
        return [update] if words else []

    def _words(self, decoder: Decoder, count: int) -> list[Word]:
        utterance = self._utterance
        frames = utterance.joined()[:count]
        seconds = self.model.frame_seconds
        return list(window_words(frames, decoder, self.model.labels, utterance.start * seconds,
                                 seconds, self.model.decoder_inputs(frames)))

    def _update(self, kind: str, words: list[Word], count: int) -> Update:
        seconds = self.model.frame_seconds
        start = self._utterance.start * seconds
        return Update(kind, words, start, start + count * seconds, self.heard)


def transcribe_stream(blocks: Iterable[np.ndarray], transcriber: StreamTranscriber
                      ) -> Iterator[Update]:
    """The updates of a stream of audio blocks, as they come. The last utterance is made final
    when the blocks end, whether they run out (the end of a file, a closed pipe) or the user
    interrupts (Ctrl-C): what was heard is kept, and :attr:`StreamTranscriber.interrupted`
    says which."""
    try:
        for block in blocks:
            yield from transcriber.push(block)
    except KeyboardInterrupt:
        transcriber.interrupted = True
    yield from transcriber.finish()
