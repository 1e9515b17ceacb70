"""Transcribing recordings of any format, rate, channel count and length.

Audio
    A file is read as a stream (:mod:`asrkit.serving.audio_stream`): 16 kHz mono PCM in-process,
    anything else (8 kHz, 44.1 kHz stereo, FLAC, Ogg, Opus, MP3, ...) through a sox process
    piping 16 kHz mono 16-bit PCM, which mixes channels down and resamples, so the model hears
    exactly what it was trained on (the samples :func:`asrkit.dataset.audio.decode` gives). A
    recording that fits in one window is read once and kept; a longer one is read twice, first
    to count its samples (windows are planned from its length) and then window by window, so
    that memory holds one window, not the recording: a 10-hour 48 kHz stereo file would
    otherwise be gigabytes of bytes and samples at once. A sox that hangs on a damaged file
    (no output for :data:`asrkit.dataset.audio.SOX_STALL_SECONDS` while it is awaited) is
    stopped, and that file fails with one line naming it.

Models
    :func:`load_recognizer` takes a run folder (its ``best`` or ``latest`` checkpoint) or an
    export of :mod:`asrkit.serving.export` (a SavedModel folder, a TFLite export folder or
    ``.tflite`` file). Both compute audio -> logits with the same graph
    (:func:`asrkit.serving.graph.make_logits_fn`), so a run and its export transcribe alike.
    A transducer run's export holds its greedy search too
    (:mod:`asrkit.serving.export_transducer`): it is decoded by that search, which emits what
    the run's ``transducer-greedy`` decoder emits, each label at its frame. An attention run's
    export holds its decoder's steps (:mod:`asrkit.serving.export_attention`), which the
    attention decoders call as they call the run's head.

Long recordings
    A bidirectional model reads a whole utterance at once, and memory and latency grow with it,
    so a long recording is decoded in windows. Each window has a *core* of at most
    ``chunk_seconds`` and ``overlap_seconds`` more on each side, so a word cut by a window's edge
    is seen whole by its neighbour. The cores' boundaries are moved to the quietest 100 ms near
    their nominal places (an energy voice-activity criterion: cut in a pause, not in a word).
    Windows are then stitched at *seams*: near each boundary, a moment that lies between words
    in both neighbouring windows' alignments (the nearest such gap; the boundary itself when
    there is none). Every word is taken from the one window whose seams enclose its centre, so a
    word in an overlap is neither dropped nor doubled, provided the overlap is longer than the
    word: the window that keeps a word then hears all of it.
    A window is at most :data:`MAX_CHUNK_SECONDS` plus twice :data:`MAX_OVERLAP_SECONDS` long,
    because what a beam or language-model decoder's text costs to align grows with the square
    of a window's length (:func:`check_window_seconds`).

Words, times and confidence
    The decoder gives each window's text. Word times come from the CTC alignment of that text:
    the greedy path itself when the text is the greedy text, else a Viterbi forced alignment of
    the text on the logits (beam or language-model decoders). A word spans its first character's
    first frame to its last character's last frame, in output frames of
    :func:`asrkit.core.frames.frame_seconds` (10 ms for ``brnn``, 20 ms for ``ds2``). Its
    confidence is the geometric mean over its characters of each character's softmax probability
    (averaged over the frames that emit it): a geometric mean, so that one unsure character makes
    the word unsure, and per character, so that a long confident vowel cannot hide it.

    A model with subword labels (SentencePiece pieces) is read the same way with pieces for
    characters: a piece that starts a word (``"▁the"``) begins it, so the word spans its pieces'
    frames and its confidence is the geometric mean over its pieces.

    A run calibrated by ``asrkit evaluate --calibrate`` (``RUN/calibration.json``,
    :mod:`asrkit.runs.calibration`) has its logits divided by the fitted temperature before
    the softmax of the confidences (not of the alignment, which a temperature does not change).

N-best
    With ``nbest``, each window's beam decoder returns its ``nbest`` best distinct transcripts
    with their scores (:class:`Candidate`): an N-best list is a window's, over the whole window (its
    overlaps included), and its best hypothesis is the window's text before stitching. A
    recording of one window (up to ``chunk_seconds`` plus an overlap) has one list, the
    utterance's. A longer one has a list per window: hypotheses of neighbouring windows overlap,
    and stitching chooses words, not hypotheses, so there is no N-best of a whole long recording
    (its lists would multiply).
"""

from __future__ import annotations

import itertools
import math
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit import plugins
from asrkit.config.decoding import check_hotwords, choose_decoder
from asrkit.config.objectives import check_decodes, require_ctc_outputs
from asrkit.config.overrides import DecoderChoice
from asrkit.core.confidence import nbest_probabilities
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE, frame_seconds
from asrkit.core.storage import Location, location
from asrkit.core.viterbi import (
    Token,
    geometric_mean,
    log_softmax,
    text_tokens,
    token_probability,
    word_tokens,
)
from asrkit.dataset.audio import SOX_TYPES, AudioError, decode
from asrkit.decoders.attention import ATTENTION_OUTPUTS, AttentionOutputs
from asrkit.decoders.scoring import Hypothesis
from asrkit.evaluation.restore import restore_networks
from asrkit.objectives.ctc import CTCObjective
from asrkit.plugins import one_line
from asrkit.runs.calibration import Calibration, load_calibration, stale_warning
from asrkit.runs.chunks import with_chunk
from asrkit.runs.run import load_run
from asrkit.serving.audio_stream import AudioStream, measure_audio
from asrkit.serving.export import ExportedModel, is_export
from asrkit.serving.export_transducer import DECODER as TRANSDUCER_GREEDY
from asrkit.serving.graph import make_logits_fn
from asrkit.types import CTC_LOGITS, Decoder, Objective

if TYPE_CHECKING:
    import numpy as np
    from tqdm import tqdm

    from asrkit.core.labels import Labels

#: Defaults of ``asrkit transcribe``: 20 s cores keep a bidirectional model's memory and latency
#: small, and 2 s each side is longer than nearly any word, so overlapping words are seen whole.
DEFAULT_CHUNK_SECONDS = 20.0
DEFAULT_OVERLAP_SECONDS = 2.0
#: Longest core and overlap ``transcribe`` accepts. A decoder whose text is not the greedy path
#: (beam search, a language model) has it aligned by :func:`ctc_align`, which takes a step per
#: output frame and alignment state: frames x (2 x characters + 1), the square of a window's
#: length (about 3000 x seconds² steps at 10 ms frames and 15 characters a second of speech).
#: 300 s (windows of 6 minutes at most) is seconds a window; an hour would be many minutes. A
#: conformer's attention grows with the square too; and no model is trained on utterances of
#: minutes, so longer windows add cost, not context.
MAX_CHUNK_SECONDS = 300.0
#: ... an overlap need only be longer than a word.
MAX_OVERLAP_SECONDS = 30.0
#: Energy of the audio is measured over this much around each candidate cut (a pause is longer
#: than a stop consonant's closure, which is shorter than 100 ms).
ENERGY_WINDOW_SECONDS = 0.1
#: ... at this resolution.
ENERGY_HOP_SECONDS = 0.01
#: Files a directory is searched for: the audio formats sox reads by extension.
AUDIO_EXTENSIONS = frozenset(set(SOX_TYPES) - {".raw"} | {".oga", ".wv", ".caf", ".w64"})
#: int16 PCM to [-1, 1): the training pipeline's scale.
PCM_SCALE = 32768.0


class WindowSizeError(AsrkitError):
    """A chunk or overlap length outside what transcription accepts."""


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    """A word with its start and end in seconds from the start of the recording."""

    word: str
    start: float
    end: float
    #: In [0, 1]; ``None`` when the text could not be aligned to the logits.
    confidence: float | None

    @property
    def centre(self) -> float:
        return (self.start + self.end) / 2

    def to_json(self) -> dict[str, object]:
        confidence = None if self.confidence is None else round(self.confidence, 4)
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3),
                "confidence": confidence}


@dataclass(frozen=True)
class Candidate:
    """One hypothesis of a window's N-best list: its text, the decoder's total log score with
    its acoustic and language-model parts (``None`` for a decoder without scores: greedy),
    and its share of the list's probability (:func:`asrkit.core.confidence.
    nbest_probabilities`)."""

    text: str
    score: float | None
    acoustic: float | None
    lm: float | None
    probability: float

    def to_json(self, rank: int) -> dict[str, object]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        return {"rank": rank, "text": self.text, "score": rounded(self.score),
                "acoustic": rounded(self.acoustic), "lm": rounded(self.lm),
                "probability": round(self.probability, 4)}


def candidates(hypotheses: Sequence[Hypothesis], count: int) -> list[Candidate]:
    """The ``count`` best distinct transcripts of a decoder's hypotheses (best first), each with
    its probability in the list. Spaces are collapsed, and a transcript that several label
    sequences spell (``"a b"``, ``"a b "``: a CTC beam keeps both) is listed once, with the
    best score, as the kenlm decoder lists its own."""
    distinct: dict[str, Hypothesis] = {}
    for h in hypotheses:
        distinct.setdefault(" ".join(h.text.split()), h)
        if len(distinct) == count:
            break
    shares = nbest_probabilities([h.score for h in distinct.values()])
    return [Candidate(text, h.score, h.acoustic, h.lm, p)
            for (text, h), p in zip(distinct.items(), shares, strict=True)]


@dataclass(frozen=True)
class WindowNBest:
    """A window's N-best list; ``start``/``end``: the seconds of the recording it decoded."""

    start: float
    end: float
    hypotheses: list[Candidate]

    def to_json(self) -> dict[str, object]:
        return {"start": round(self.start, 3), "end": round(self.end, 3),
                "hypotheses": [c.to_json(rank) for rank, c in enumerate(self.hypotheses, 1)]}


class WindowWords(list[Word]):
    """One window's words, with what else its decoding gave: the utterances the decoder cut
    at its length limit (:class:`asrkit.types.Decoded`) and, when asked, its N-best list."""

    def __init__(self, words: Iterable[Word] = (), hit_length_limit: Iterable[int] = (),
                 hypotheses: list[Candidate] | None = None) -> None:
        super().__init__(words)
        self.hit_length_limit = list(hit_length_limit)
        self.hypotheses = hypotheses


@dataclass
class Transcript:
    """One recording's transcription."""

    path: str
    duration: float
    words: list[Word]
    windows: int = 1
    model: str = ""
    decoder: str = ""
    #: The windows (start and end, seconds) whose transcript the decoder cut at its length
    #: limit (:class:`asrkit.types.Decoded`): their words are incomplete or looping.
    cut_windows: list[tuple[float, float]] = field(default_factory=list)
    #: Each window's N-best list, when one was asked for (``None``: not asked).
    nbest: list[WindowNBest] | None = None
    #: The temperature of the words' confidences, and the run's calibration it comes from.
    temperature: float = 1.0
    calibration: Calibration | None = None

    @property
    def text(self) -> str:
        return " ".join(w.word for w in self.words)

    @property
    def confidence(self) -> float | None:
        """The mean of the words' confidences (``None`` without words)."""
        known = [w.confidence for w in self.words if w.confidence is not None]
        return sum(known) / len(known) if known else None

    def to_json(self) -> dict[str, object]:
        confidence = self.confidence
        return {"file": self.path, "duration": round(self.duration, 3), "text": self.text,
                "confidence": None if confidence is None else round(confidence, 4),
                "model": self.model, "decoder": self.decoder, "windows": self.windows,
                "cut_at_length_limit": [[round(a, 3), round(b, 3)] for a, b in self.cut_windows],
                "temperature": round(self.temperature, 4),
                "calibration": None if self.calibration is None else self.calibration.to_json(),
                "words": [w.to_json() for w in self.words],
                **({} if self.nbest is None else {"nbest": [w.to_json() for w in self.nbest]})}

    def nbest_lines(self) -> list[str]:
        """The N-best lists as text: each hypothesis numbered, with its probability in the list
        and its score; each window's under its seconds when there are several."""
        lines = []
        for window in self.nbest or []:
            if len(self.nbest or []) > 1:
                lines.append(f"[{window.start:.2f}-{window.end:.2f} s]")
            for rank, c in enumerate(window.hypotheses, 1):
                score = "" if c.score is None else f", score {c.score:.2f}"
                lines.append(f"{rank}. {c.text}  (p {c.probability:.3f}{score})")
        return lines

    def cut_warning(self) -> str | None:
        """One line when a window's transcript was cut at the decoder's length limit."""
        if not self.cut_windows:
            return None
        spans = ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in self.cut_windows[:3])
        more = f" and {len(self.cut_windows) - 3} more" if len(self.cut_windows) > 3 else ""
        return (f"{self.path}: the {self.decoder} decoder's transcript of {spans}{more} was cut "
                "at its length limit (a loop, or a limit too low): raise -o "
                "decoder.max_length_ratio, or try another decoder")


@dataclass(frozen=True)
class Window:
    """Samples ``start..end`` are decoded; ``core_start..core_end`` is the part it owns."""

    start: int
    end: int
    core_start: int
    core_end: int


# -- models -------------------------------------------------------------------------------------


class Recognizer(ABC):
    """Audio to logits, with what it takes to read them."""

    #: What the model's classes mean (characters or subword pieces).
    labels: Labels
    #: Seconds per output frame.
    frame_seconds: float
    #: The decoder to use unless told otherwise (the run's), and its settings (a run's; None:
    #: the decoder's defaults).
    default_decoder: str = "greedy"
    default_decoder_config: Any = None
    #: What the model is, for reports.
    name: str = ""
    #: The run's training objective, whose outputs the decoder must read (``None``: CTC logits).
    objective: Objective | None = None
    #: The logits are divided by this before the confidences' softmax, and the run's
    #: calibration it comes from (``None``: the model's own confidences, temperature 1).
    temperature: float = 1.0
    calibration: Calibration | None = None
    #: One line when the calibration was fitted at another checkpoint step.
    calibration_warning: str | None = None

    @abstractmethod
    def logits(self, audio: np.ndarray) -> np.ndarray:
        """The model's output ``[frames', width]`` of float32 audio ``[samples]`` in [-1, 1] at
        16 kHz: CTC logits, or a transducer's encoder frames."""

    def decoder_inputs(self, outputs: np.ndarray) -> Any:
        """What the decoders read of one window's ``outputs`` ``[1, frames', width]``: the
        CTC logits themselves, or them with the objective's networks (a transducer's)."""
        return outputs

    def check_decoder(self, decoder: Decoder) -> None:
        """One line when ``decoder`` cannot decode this model's outputs (said before any audio
        is read)."""
        check_decodes(self.objective or CTCObjective(), decoder.name)

    def check_ctc(self, what: str) -> None:
        """One line when this model's outputs are not CTC logits, which ``what`` reads."""
        require_ctc_outputs(self.objective or CTCObjective(), what)

    def words(self, audio: np.ndarray, decoder: Decoder, offset: float,
              nbest: int = 0) -> list[Word]:
        """One window's words, timed from ``offset`` seconds: the model's output of ``audio``
        decoded by ``decoder`` (:func:`window_words`), with its ``nbest`` best hypotheses."""
        import numpy as np

        logits = self.logits(audio)
        return window_words(logits, decoder, self.labels, offset, self.frame_seconds,
                            self.decoder_inputs(logits[np.newaxis]), nbest, self.temperature)


class CheckpointRecognizer(Recognizer):
    """A run's model restored from its ``best`` checkpoint (``latest`` when there is no best
    yet), or from ``latest`` when asked."""

    def __init__(self, folder: str | Location, checkpoint: str = "best",
                 chunk_ms: float | None = None, calibrated: bool = True) -> None:
        import tensorflow as tf

        run = with_chunk(load_run(folder), chunk_ms)  # a streaming run at another chunk
        self.calibration = load_calibration(run.folder) if calibrated else None
        model, self._head, state = restore_networks(run, checkpoint)
        if self.calibration is not None:
            self.temperature = self.calibration.temperature
            self.calibration_warning = stale_warning(self.calibration,
                                                     state.get("global_step"), run.folder)
        self.objective = run.objective
        self._objective_config = run.objective_config
        self.labels = run.labels
        self.frame_seconds = frame_seconds(run.feature_config, run.spec, run.model_config)
        self.default_decoder = run.train.decoder
        self.default_decoder_config = run.config.decoder
        self.name = f"{run.folder} ({run.spec.name}, step {state.get('global_step', '?')})"
        self._model = model  # keeps the variables the function reads alive
        self._fn = tf.function(make_logits_fn(run, model),
                               input_signature=[tf.TensorSpec([None], tf.float32)])

    def logits(self, audio: np.ndarray) -> np.ndarray:
        return self._fn(audio).numpy()

    def decoder_inputs(self, outputs: np.ndarray) -> Any:
        assert self.objective is not None
        return self.objective.decoder_inputs(self._objective_config, self._head, outputs)


class ExportRecognizer(Recognizer):
    """An exported SavedModel, TFLite or ONNX model
    (:class:`asrkit.serving.export.ExportedModel`).

    A CTC export's logits are decoded by any CTC decoder. A transducer export holds its own
    greedy search, with its ``max_symbols``, and no networks asrkit's decoders could call: it
    is decoded by that search alone (its ``transcribe``), as the ``transducer-greedy``
    decoder; another decoder, or other settings, is refused in one line.

    An attention export holds its decoder's steps
    (:mod:`asrkit.serving.export_attention`): its encoder frames are handed to the attention
    decoders (``attention-beam``, ``attention-greedy``; by default its run's) with those steps
    as the networks they call, so they decode the export as they decode the run."""

    def __init__(self, path: str | Location | ExportedModel) -> None:
        self._export = path if isinstance(path, ExportedModel) else ExportedModel(path)
        path = self._export.path
        self._networks: Any = None
        meta = self._export.metadata
        self.labels = self._export.labels
        self.frame_seconds = float(meta["frame_seconds"])
        self.default_decoder = meta.get("decoder", "greedy")
        self.name = f"{path} ({self._export.format}, {meta.get('model', 'unknown model')})"
        if self._export.is_transducer:
            self.default_decoder = TRANSDUCER_GREEDY
            self.default_decoder_config = {"max_symbols": int(meta["max_symbols"])}
        if self._export.is_attention:
            self._networks = self._export.attention_networks()

    def logits(self, audio: np.ndarray) -> np.ndarray:
        """A CTC export's logits, or a transducer's or an attention export's encoder frames."""
        if self._export.is_transducer or self._export.is_attention:
            return self._export.encode(audio)
        return self._export.logits(audio)

    def decoder_inputs(self, outputs: np.ndarray) -> Any:
        if self._export.is_attention:
            return AttentionOutputs(outputs, self._networks)
        return outputs

    def check_ctc(self, what: str) -> None:
        if self._export.is_transducer or self._export.is_attention:
            kind = "a transducer" if self._export.is_transducer else "an attention"
            raise AsrkitError(f"{what} reads a model's outputs as CTC logits; "
                              f"{self._export.path} is {kind} export, which has none")

    def check_decoder(self, decoder: Decoder) -> None:
        if self._export.is_attention:
            if decoder.reads != ATTENTION_OUTPUTS:
                raise AsrkitError(f"{self._export.path} is an attention export, decoded by the "
                                  f"attention decoders, not by the {decoder.name} decoder "
                                  f"(it reads {decoder.reads})")
            return
        if not self._export.is_transducer:
            super().check_decoder(decoder)
            return
        if decoder.name != TRANSDUCER_GREEDY:
            raise AsrkitError(f"{self._export.path} is a transducer export, decoded by its own "
                              f"greedy search ({TRANSDUCER_GREEDY}), not by the {decoder.name} "
                              "decoder: transcribe with the run folder to use another")
        wanted = self.default_decoder_config["max_symbols"]
        if getattr(decoder.config, "max_symbols", wanted) != wanted:
            raise AsrkitError(f"{self._export.path} searches with max_symbols={wanted}, fixed "
                              "when it was exported: export the run again with another")

    def words(self, audio: np.ndarray, decoder: Decoder, offset: float,
              nbest: int = 0) -> list[Word]:
        if not self._export.is_transducer:
            return super().words(audio, decoder, offset, nbest)
        labels, frames = self._export.transcribe_tokens(audio)
        tokens = [Token(int(label), int(frame), int(frame))
                  for label, frame in zip(labels, frames, strict=True)]
        return words_from_tokens(tokens, None, self.labels, offset, self.frame_seconds)


def load_recognizer(path: str | Location, checkpoint: str = "best",
                    calibrated: bool = True) -> Recognizer:
    """A run folder's checkpoint (its word confidences at its calibrated temperature, unless
    ``calibrated`` is false) or an export, whichever ``path`` (a folder or URL) is."""
    path = location(path)
    if is_export(path):
        return ExportRecognizer(path)
    if (path / "config.json").exists():
        return CheckpointRecognizer(path, checkpoint, calibrated=calibrated)
    raise AsrkitError(f"{path} is neither a run folder (config.json) nor an exported model "
                      "(asrkit export)")


def resolve_decoder(choice: DecoderChoice, recognizer: Recognizer) -> tuple[Decoder, str | None]:
    """The decoder ``choice`` names, else the recognizer's own with its settings, with
    ``choice``'s settings applied (:func:`asrkit.config.decoding.choose_decoder`). An own
    decoder that is not installed (an export's run used a plugin this machine lacks) falls back
    to greedy with a warning."""
    default, config = recognizer.default_decoder, recognizer.default_decoder_config
    warning = None
    if choice.name is None and default not in plugins.get_plugins().registry.names("decoder"):
        warning = f"the model's decoder {default!r} is not installed; using greedy"
        default, config = "greedy", None
    decoder = choose_decoder(choice, default, config)
    recognizer.check_decoder(decoder)
    check_hotwords(decoder, recognizer.labels)
    return decoder, warning


def check_nbest(decoder: Decoder, count: int) -> None:
    """One line when ``decoder`` cannot give ``count`` hypotheses: only beam decoders keep
    several (``decode_nbest``); naming those that read what ``decoder`` reads."""
    if count < 2 or hasattr(decoder, "decode_nbest"):
        return
    names = plugins.get_plugins().registry.names("decoder")
    beams = sorted(n for n in names if hasattr(plugins.get("decoder", n), "decode_nbest")
                   and plugins.get("decoder", n).reads == decoder.reads)
    hint = f": --decoder {' or '.join(beams)}" if beams else ""
    raise AsrkitError(f"--nbest {count} needs a beam decoder; the {decoder.name} decoder finds "
                      f"one transcript{hint}")


# -- windows ------------------------------------------------------------------------------------


def check_window_seconds(chunk_seconds: float, overlap_seconds: float) -> None:
    """A one-line :class:`WindowSizeError` when a chunk or overlap is out of bounds (see
    :data:`MAX_CHUNK_SECONDS`), before any audio is read or model loaded."""
    if not 0 < chunk_seconds <= MAX_CHUNK_SECONDS:
        raise WindowSizeError(
            f"--chunk-seconds {chunk_seconds:g} is outside 0 < S <= {MAX_CHUNK_SECONDS:g} (the "
            "alignment of a window grows with the square of its length); choose at most "
            f"{MAX_CHUNK_SECONDS:g}: longer recordings are cut and stitched anyway")
    if not 0 <= overlap_seconds <= MAX_OVERLAP_SECONDS:
        raise WindowSizeError(
            f"--overlap-seconds {overlap_seconds:g} is outside 0 <= S <= "
            f"{MAX_OVERLAP_SECONDS:g}; choose at most {MAX_OVERLAP_SECONDS:g} (longer than the "
            "longest word is enough)")


def energy_width(rate: int = SAMPLE_RATE) -> int:
    """Samples of :data:`ENERGY_WINDOW_SECONDS`: a cut is searched this much beyond its
    radius on each side (half of it), which a stream must have read first."""
    return max(1, int(ENERGY_WINDOW_SECONDS * rate))


def quietest_point(samples: np.ndarray, centre: int, radius: int,
                   rate: int = SAMPLE_RATE, offset: int = 0) -> int:
    """The sample within ``radius`` of ``centre`` at the middle of the quietest
    :data:`ENERGY_WINDOW_SECONDS` (nearest ``centre`` among equals).

    ``samples`` start at sample ``offset`` of the recording: a stream passes the stretch it has
    read, which must hold all of ``centre`` ± (``radius`` + half an energy window) that the
    recording has, and gets the cut the whole recording would give."""
    import numpy as np

    width = energy_width(rate)
    hop = max(1, int(ENERGY_HOP_SECONDS * rate))
    lo = max(offset, centre - radius - width // 2)
    hi = min(offset + len(samples), centre + radius + width // 2)
    if hi - lo <= width:
        return centre
    signal = samples[lo - offset:hi - offset].astype(np.float64)
    cumulative = np.concatenate([[0.0], np.cumsum(signal * signal)])
    starts = np.arange(0, hi - lo - width + 1, hop)
    energy = cumulative[starts + width] - cumulative[starts]
    positions = lo + starts + width // 2
    order = np.lexsort((np.abs(positions - centre), energy))
    return int(positions[order[0]])


@dataclass(frozen=True)
class Cuts:
    """Where a recording of ``total`` samples is cut, before looking at it: the cores' nominal
    boundaries (none: one window), how far each may move to a pause, and the overlap."""

    total: int
    nominal: list[int]
    radius: int
    overlap: int

    def window(self, lo: int, hi: int) -> Window:
        """The window of the core ``lo..hi``: the core and an overlap each side."""
        return Window(max(0, lo - self.overlap), min(self.total, hi + self.overlap), lo, hi)


def single_window_samples(chunk_seconds: float, overlap_seconds: float,
                          rate: int = SAMPLE_RATE) -> int:
    """The longest recording decoded as one window: a chunk plus an overlap."""
    return max(1, int(chunk_seconds * rate)) + max(0, int(overlap_seconds * rate))


def plan_cuts(total: int, chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
              overlap_seconds: float = DEFAULT_OVERLAP_SECONDS, rate: int = SAMPLE_RATE) -> Cuts:
    """One window if ``total`` fits in a chunk plus an overlap, else cores of equal nominal
    length (at most ``chunk_seconds``) whose boundaries may move within half an overlap."""
    overlap = max(0, int(overlap_seconds * rate))
    if total <= single_window_samples(chunk_seconds, overlap_seconds, rate):
        return Cuts(total, [], 0, overlap)
    chunk = max(1, int(chunk_seconds * rate))
    count = math.ceil(total / chunk)
    core = total / count
    # A boundary moves at most a quarter of a core, so cores never cross or vanish.
    radius = min(overlap // 2, int(core // 4))
    return Cuts(total, [round(k * core) for k in range(1, count)], radius, overlap)


def plan_windows(samples: np.ndarray, chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                 overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                 rate: int = SAMPLE_RATE) -> list[Window]:
    """Windows covering ``samples`` (:func:`plan_cuts`), each boundary moved to the quietest
    spot within its radius, each core widened by ``overlap_seconds`` each side."""
    cuts = plan_cuts(len(samples), chunk_seconds, overlap_seconds, rate)
    boundaries = [quietest_point(samples, nominal, cuts.radius, rate) for nominal in cuts.nominal]
    edges = [0, *boundaries, cuts.total]
    return [cuts.window(lo, hi) for lo, hi in itertools.pairwise(edges)]


class SampleBuffer:
    """The samples of a stream from ``start`` on, read only as far as asked: a window and the
    stretch searched for the next cut, never the whole recording. The stream must hold
    ``total`` samples, as its first reading counted; anything else is a file that changed."""

    def __init__(self, blocks: Iterator[np.ndarray], total: int) -> None:
        import numpy as np

        self._blocks = blocks
        self.total = total
        self.start = 0
        self.samples = np.empty(0, np.int16)

    def fill(self, end: int) -> None:
        """Read until the buffer reaches sample ``end`` (at most ``total``)."""
        import numpy as np

        end = min(end, self.total)
        have = self.start + len(self.samples)
        parts = [self.samples]
        while have < end:
            block = next(self._blocks, None)
            if block is None:
                raise _changed()
            parts.append(block)
            have += len(block)
        if len(parts) > 1:
            self.samples = np.concatenate(parts)

    def take(self, lo: int, hi: int) -> np.ndarray:
        """Samples ``lo..hi`` of the recording (``lo`` not yet dropped)."""
        self.fill(hi)
        return self.samples[lo - self.start:hi - self.start]

    def drop(self, before: int) -> None:
        """Forget the samples before ``before``: no window or cut needs them any more."""
        if before > self.start:
            self.samples = self.samples[before - self.start:].copy()
            self.start = before

    def finish(self) -> None:
        """Read the stream to its end (which reports a decoder's failure); more samples than
        counted is a changed file too."""
        extra = sum(len(block) for block in self._blocks)
        if self.start + len(self.samples) + extra > self.total:
            raise _changed()


def _changed() -> AudioError:
    return AudioError("the file changed while it was being transcribed; transcribe it again")


def stream_windows(buffer: SampleBuffer, cuts: Cuts,
                   rate: int = SAMPLE_RATE) -> Iterator[tuple[Window, np.ndarray]]:
    """The windows :func:`plan_windows` gives for the whole recording, with their samples, read
    from a stream as they are needed: each cut is placed once the stretch around it is read,
    and what lies before the next window and the next cut's search is forgotten."""
    reach = cuts.radius + energy_width(rate) // 2
    lo = 0
    for k, nominal in enumerate([*cuts.nominal, None]):
        if nominal is None:
            hi = cuts.total
        else:
            buffer.fill(nominal + reach)
            hi = quietest_point(buffer.samples, nominal, cuts.radius, rate, buffer.start)
        window = cuts.window(lo, hi)
        yield window, buffer.take(window.start, window.end)
        following = cuts.nominal[k + 1] - reach if k + 1 < len(cuts.nominal) else hi
        buffer.drop(max(0, min(hi - cuts.overlap, following)))
        lo = hi
    buffer.finish()


# -- alignment ----------------------------------------------------------------------------------


def words_from_tokens(tokens: Sequence[Token], log_probs: np.ndarray | None, labels: Labels,
                      offset: float, frame_seconds: float) -> list[Word]:
    """Words with times (``offset`` + frames x frame seconds) and confidence: the geometric mean
    over the word's tokens of each token's mean probability over the frames that emit it
    (``None`` without CTC ``log_probs``).

    Words are split as :class:`~asrkit.core.labels.Labels` splits them: a token that starts a word
    (``labels.starts_word``) ends the word before it; its body (``"▁the"``: "the") begins the
    next one, and an empty body (the space among characters) is a pure separator. A word's text
    is the body of its first token and the symbols of the others."""
    words = []
    for group in word_tokens(tokens, labels):
        text = "".join(labels.body(t.label) for t in group)
        confidence = None
        if log_probs is not None:
            confidence = geometric_mean([token_probability(log_probs, t) for t in group])
        start = offset + group[0].first * frame_seconds
        end = offset + (group[-1].last + 1) * frame_seconds
        words.append(Word(text, start, end, confidence))
    return words


def spread_words(text: str, start: float, end: float) -> list[Word]:
    """Words of a text that cannot be aligned, spread evenly over ``start..end``, without a
    confidence. (It does not happen with CTC decoders, whose texts are paths of the logits.)"""
    pieces = text.split()
    step = (end - start) / max(1, len(pieces))
    return [Word(w, start + i * step, start + (i + 1) * step, None)
            for i, w in enumerate(pieces)]


def window_words(logits: np.ndarray, decoder: Decoder, labels: Labels, offset: float,
                 frame_seconds: float, inputs: Any = None, nbest: int = 0,
                 temperature: float = 1.0) -> WindowWords:
    """Decode one window's logits and place its words in time: on the greedy path's tokens when
    the decoder's text is the greedy one, else on the forced alignment of the text's labels
    (``labels.encode``; for subword pieces one valid segmentation of it). The confidences are
    read with the logits divided by ``temperature``.

    A decoder of another objective's outputs (a transducer's) reads ``inputs`` (the window's
    output as the recognizer hands it to decoders) and places each label at the frame it
    emitted it (``decode_tokens``), without a confidence.

    With ``nbest`` and a beam decoder (``decode_nbest``), the result holds the window's
    ``nbest`` best transcripts (:func:`candidates`, of the whole final beam); a CTC decoder's
    best hypothesis is then the text, found in one search."""
    import numpy as np

    lengths = np.array([len(logits)])
    hypotheses = best = None
    if nbest and hasattr(decoder, "decode_nbest"):
        found = decoder.decode_nbest(logits[np.newaxis] if decoder.reads == CTC_LOGITS
                                     else inputs, lengths, labels)[0]
        hypotheses = candidates(found, nbest)
        best = found[0].text if found else ""
    if decoder.reads != CTC_LOGITS:
        decode_tokens = getattr(decoder, "decode_tokens", None)
        if decode_tokens is None:  # times unknown
            texts = decoder.decode(inputs, lengths, labels)
            return WindowWords(spread_words(texts[0], offset,
                                            offset + len(logits) * frame_seconds),
                               getattr(texts, "hit_length_limit", ()), hypotheses)
        decoded = decode_tokens(inputs, lengths, labels)
        return WindowWords(words_from_tokens([Token(label, frame, frame)
                                              for label, frame in decoded[0]],
                                             None, labels, offset, frame_seconds),
                           getattr(decoded, "hit_length_limit", ()), hypotheses)
    text = best if best is not None else decoder.decode(logits[np.newaxis], lengths, labels)[0]
    log_probs = log_softmax(logits)
    tokens = text_tokens(logits, log_probs, text, labels)
    if tokens is None:
        return WindowWords(spread_words(text, offset, offset + len(logits) * frame_seconds),
                           (), hypotheses)
    if temperature != 1.0:  # the path is the same at any temperature; the confidences are not
        log_probs = log_softmax(logits / temperature)
    return WindowWords(words_from_tokens(tokens, log_probs, labels, offset, frame_seconds), (),
                       hypotheses)


# -- stitching ----------------------------------------------------------------------------------


def find_seam(left: Sequence[Word], right: Sequence[Word], nominal: float, lo: float,
              hi: float) -> float:
    """A moment in ``lo..hi`` (around ``nominal``) that falls inside no word of either window:
    ``nominal`` itself if it is free, else the middle of the nearest free stretch; ``nominal``
    when the whole stretch is covered by words."""
    spans = sorted((w.start, w.end) for w in (*left, *right) if w.end > lo and w.start < hi)
    gaps = []
    cursor = lo
    for start, end in spans:
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < hi:
        gaps.append((cursor, hi))
    if not gaps:
        return nominal
    for start, end in gaps:
        if start <= nominal <= end:
            return nominal
    start, end = min(gaps, key=lambda g: min(abs(g[0] - nominal), abs(g[1] - nominal)))
    return (start + end) / 2


def stitch(windows: Sequence[Window], words: Sequence[Sequence[Word]], overlap_seconds: float,
           rate: int = SAMPLE_RATE) -> list[Word]:
    """One word list from the windows' (times absolute): each word from the window whose seams
    enclose its centre. A seam is searched within half an overlap of its core boundary, where
    both windows hear the audio with at least half an overlap of context, and between the
    previous seam and the next boundary, so that seams keep their order."""
    boundaries = [w.core_end / rate for w in windows[:-1]]
    seams = [-math.inf]
    for i, nominal in enumerate(boundaries):
        lo = max(nominal - overlap_seconds / 2, seams[-1])
        following = boundaries[i + 1] if i + 1 < len(boundaries) else math.inf
        hi = min(nominal + overlap_seconds / 2, following)
        seams.append(find_seam(words[i], words[i + 1], nominal, lo, hi))
    seams.append(math.inf)
    return [w for i, found in enumerate(words) for w in found
            if seams[i] <= w.centre < seams[i + 1]]


# -- recordings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """A recording of ``total`` samples as ``count`` windows, each with its samples, read as
    they are needed (:func:`read_windows`)."""

    total: int
    count: int
    pieces: Iterable[tuple[Window, np.ndarray]]


def samples_windows(samples: np.ndarray, chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                    overlap_seconds: float = DEFAULT_OVERLAP_SECONDS) -> Recording:
    """Samples in memory as windows (:func:`plan_windows`)."""
    windows = plan_windows(samples, chunk_seconds, overlap_seconds)
    return Recording(len(samples), len(windows),
                     ((window, samples[window.start:window.end]) for window in windows))


@contextmanager
def read_windows(path: Path, chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                 overlap_seconds: float = DEFAULT_OVERLAP_SECONDS) -> Iterator[Recording]:
    """A file of any format and length as windows, holding one window of it at a time: the
    windows :func:`samples_windows` gives of its decoded samples.

    A file that fits in one window is read once; a longer one is read once to count its
    samples, then again window by window. A path that is not a regular file (a pipe) can be
    read only once, so it is decoded whole (:func:`load_audio`). Error messages do not repeat
    the path: the caller prefixes it."""
    check_window_seconds(chunk_seconds, overlap_seconds)
    if not _is_regular_file(path):
        yield samples_windows(load_audio(path), chunk_seconds, overlap_seconds)
        return
    measured = measure_audio(path, single_window_samples(chunk_seconds, overlap_seconds))
    if measured.samples == 0:
        raise AudioError("the file holds no audio")
    if measured.kept is not None:
        yield samples_windows(measured.kept, chunk_seconds, overlap_seconds)
        return
    cuts = plan_cuts(measured.samples, chunk_seconds, overlap_seconds)
    with AudioStream(path, measured.decoder) as blocks:
        yield Recording(measured.samples, len(cuts.nominal) + 1,
                        stream_windows(SampleBuffer(blocks, measured.samples), cuts))


def transcribe_samples(samples: np.ndarray, recognizer: Recognizer, decoder: Decoder,
                       chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                       overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                       on_window: Callable[[int, int], None] | None = None,
                       path: str = "", nbest: int = 0) -> Transcript:
    """Transcribe 16 kHz mono samples (int16, or float in [-1, 1]) of any length; with
    ``nbest``, each window's N-best list too.

    ``on_window(done, total)`` is called after each window (progress bars)."""
    check_window_seconds(chunk_seconds, overlap_seconds)
    recording = samples_windows(samples, chunk_seconds, overlap_seconds)
    return _transcribe_windows(recording, recognizer, decoder, overlap_seconds, on_window, path,
                               nbest)


def transcribe_file(path: Path, recognizer: Recognizer, decoder: Decoder,
                    chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                    overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                    on_window: Callable[[int, int], None] | None = None,
                    nbest: int = 0) -> Transcript:
    """Transcribe a file of any format and length, holding one window of it at a time
    (:func:`read_windows`): the same transcript as :func:`transcribe_samples` of its decoded
    samples. Error messages do not repeat the path: the caller prefixes it."""
    with read_windows(path, chunk_seconds, overlap_seconds) as recording:
        return _transcribe_windows(recording, recognizer, decoder, overlap_seconds, on_window,
                                   str(path), nbest)


def _is_regular_file(path: Path) -> bool:
    """Whether ``path`` is a non-empty regular file that can be read (twice); an
    :class:`AudioError` worded as :func:`load_audio`'s when it is unreadable or empty."""
    try:
        with path.open("rb") as f:
            status = os.fstat(f.fileno())
    except OSError as error:
        raise AudioError(f"cannot read it: {error.strerror or error}") from None
    if not stat.S_ISREG(status.st_mode):
        return False
    if status.st_size == 0:
        raise AudioError("the file is empty")
    return True


def _transcribe_windows(recording: Recording, recognizer: Recognizer, decoder: Decoder,
                        overlap_seconds: float, on_window: Callable[[int, int], None] | None,
                        path: str, nbest: int = 0) -> Transcript:
    """Decode a recording's windows as they come, then stitch their words: only the words (and
    the N-best lists) are kept, never more than one window's samples."""
    windows: list[Window] = []
    found: list[list[Word]] = []
    cut: list[tuple[float, float]] = []
    lists: list[WindowNBest] = []
    for number, (window, piece) in enumerate(recording.pieces, 1):
        windows.append(window)
        start, end = window.start / SAMPLE_RATE, window.end / SAMPLE_RATE
        words = recognizer.words(as_float(piece), decoder, start, nbest)
        if getattr(words, "hit_length_limit", None):
            cut.append((start, end))
        if nbest:
            hypotheses = getattr(words, "hypotheses", None)
            if hypotheses is None:  # a decoder of one transcript, without scores
                hypotheses = [Candidate(" ".join(w.word for w in words), None, None, None, 1.0)]
            lists.append(WindowNBest(start, end, hypotheses))
        found.append(words)
        if on_window is not None:
            on_window(number, recording.count)
    duration = recording.total / SAMPLE_RATE
    words = [_clip(w, duration) for w in stitch(windows, found, overlap_seconds)]
    return Transcript(path, duration, words, len(windows), recognizer.name,
                      getattr(decoder, "name", ""), cut, lists if nbest else None,
                      recognizer.temperature, recognizer.calibration)


def as_float(samples: np.ndarray) -> np.ndarray:
    """int16 PCM, or floats, as the float32 in [-1, 1) a model reads."""
    import numpy as np

    if samples.dtype == np.int16:
        return samples.astype(np.float32) / PCM_SCALE
    return samples.astype(np.float32)


def _clip(word: Word, duration: float) -> Word:
    """Output frames can reach a little past the end of the audio (the last frame is padded)."""
    end = min(word.end, duration)
    return Word(word.word, min(word.start, end), end, word.confidence)


def load_audio(path: str | Path) -> np.ndarray:
    """A file's samples as 16 kHz mono int16, whatever its format, decoded whole in memory (short
    clips, and a pipe, which can be read only once; :func:`transcribe_file` streams the rest).
    Error messages do not repeat the path: the caller prefixes it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise AudioError(f"cannot read it: {error.strerror or error}") from None
    if not data:
        raise AudioError("the file is empty")
    samples = decode(data, path.name)
    if len(samples) == 0:
        raise AudioError("the file holds no audio")
    return samples


def audio_files(inputs: Iterable[str | Path]) -> Iterator[Path]:
    """The inputs in order, each directory replaced by the audio files under it (sorted, by
    extension: :data:`AUDIO_EXTENSIONS`). A file named explicitly is taken whatever its name."""
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*")
                              if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS)
        else:
            yield path


@dataclass
class Failure:
    """A file that could not be transcribed, with a one-line reason."""

    path: str
    message: str


@dataclass
class Options:
    """What ``transcribe_files`` is told (how to cut recordings, whether to show progress) and
    what it reports besides the transcripts (the files that failed)."""

    chunk_seconds: float = DEFAULT_CHUNK_SECONDS
    overlap_seconds: float = DEFAULT_OVERLAP_SECONDS
    progress: bool = False
    #: Hypotheses in each window's N-best list (0: none).
    nbest: int = 0
    failures: list[Failure] = field(default_factory=list)


def transcribe_files(files: Sequence[Path], recognizer: Recognizer, decoder: Decoder,
                     options: Options) -> Iterator[Transcript]:
    """Transcribe each file, yielding as they finish; a file that fails is recorded in
    ``options.failures`` and the others go on. A progress bar counts files (several) or windows
    (one long file) on stderr."""
    from tqdm import tqdm

    bar = tqdm(total=len(files), unit="file", desc="transcribe", leave=False,
               disable=not options.progress or len(files) < 2)
    windows = WindowBar(options.progress and len(files) == 1)
    for path in files:
        try:
            yield transcribe_file(path, recognizer, decoder, options.chunk_seconds,
                                  options.overlap_seconds, windows.update, options.nbest)
        except AsrkitError as error:
            options.failures.append(Failure(str(path), " ".join(str(error).split())))
        except Exception as error:  # one bad file must not end a directory's transcription
            options.failures.append(Failure(str(path), one_line(error)))
        finally:
            windows.close()
        bar.update(1)
    bar.close()


class WindowBar:
    """A progress bar of one long recording's windows, shown only when there are several
    (``update`` is an ``on_window`` callback)."""

    def __init__(self, enabled: bool, desc: str = "transcribe") -> None:
        self.enabled = enabled
        self.desc = desc
        self.bar: tqdm | None = None

    def update(self, done: int, total: int) -> None:
        if self.bar is None and self.enabled and total > 2:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="window", desc=self.desc, leave=False)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
