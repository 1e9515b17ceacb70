"""The contracts between asrkit's core and its plugins.

Each kind of plugin object subclasses one of the abstract classes here. The core validates every
registered object against them, so a plugin that registers something malformed is reported at load
time instead of failing in the middle of a training run.

**The CTC blank convention, stated once:** for labels of ``N`` symbols (an alphabet's characters
or a tokenizer's pieces, :mod:`asrkit.core.labels`), a model outputs ``N + 1`` classes; classes
``0 .. N-1`` are the symbols in order (an alphabet file's order) and the blank is
the *last* class, index ``N`` (as in DeepSpeech and ``tf.nn.ctc_loss(blank_index=-1)``).
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE, Framing
from asrkit.core.settings import setting, validate

if TYPE_CHECKING:
    import click

#: Names of registered objects: what a user types after ``asrkit import`` or ``--model``.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

#: What CTC decoders read and CTC objectives output: logits ``[batch, frames, labels + 1]``, the
#: blank last (:attr:`Decoder.reads`, :attr:`Objective.outputs`).
CTC_LOGITS = "ctc-logits"

#: Dataset names (folder names under ``$ASRKIT_HOME/datasets``) and split names.
DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(text: str, fallback: str) -> str:
    """``text`` made usable as a dataset or split name (other characters become ``_``), or
    ``fallback`` when nothing is left."""
    return _NOT_IN_NAMES.sub("_", text).strip("._") or fallback


@dataclass(frozen=True)
class Resource:
    """A file an importer reads: published at ``url`` or already at a local ``path``.

    ``size`` and ``sha256`` are the published values; the downloader verifies both before anything
    is read. ``path`` is for sources the user supplies (a folder, an archive on disk).
    """

    filename: str
    url: str | None = None
    size: int | None = None
    sha256: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Utterance:
    """One utterance as a corpus describes it, before conversion and normalisation.

    ``audio`` names the audio file as a member path of the importer's sources (the path inside the
    archive, or relative to the folder). ``start``/``end`` (seconds) cut a segment out of a long
    recording; ``None`` means the whole file.
    """

    id: str
    split: str
    audio: str
    transcript: str
    speaker: str = ""
    start: float | None = None
    end: float | None = None


class Importer(ABC):
    """A speech corpus: where it comes from and how to read its transcripts.

    The core owns everything corpora share (download, verification, safe reading of archives,
    conversion to 16 kHz mono 16-bit, normalisation, filtering, manifests, shards, progress and
    resumption). A subclass holds only what is specific to its corpus.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    homepage: ClassVar[str] = ""
    license: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = ("train", "dev", "test")
    #: Largest transcript or listing member read, in bytes; a larger one is refused by name.
    max_metadata_bytes: ClassVar[int] = 16 << 20

    def options(self) -> list[click.Parameter]:
        """Extra command-line parameters of ``asrkit import <name>`` (e.g. ``--release``)."""
        return []

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        """The name of the imported dataset's folder; options that change the content go in it."""
        return self.name

    @abstractmethod
    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        """The files to fetch (or the user's files to read), in a fixed order."""

    def is_metadata(self, member: str) -> bool:
        """Whether a source member is a transcript or listing, read before any audio."""
        return member.endswith((".txt", ".tsv", ".csv", ".stm", ".transcription", ".fileids"))

    @abstractmethod
    def prepare(
        self, metadata: Mapping[str, bytes], members: Sequence[str], options: Mapping[str, Any]
    ) -> Iterator[Utterance]:
        """Yield the corpus's utterances from its metadata members (name -> content) and the
        list of all member names."""

    def normalize(self, text: str) -> str:
        """Corpus-specific clean-up (noise tokens, markup) applied before the core normalises
        case, punctuation and clitics. The default keeps the text as it is."""
        return text


class AcousticModel(Protocol):
    """What :meth:`ModelSpec.build` returns: a ``keras.Model`` (checkpoints track its
    variables, exports read them), called by the engine, ``asrkit evaluate``, ``asrkit
    transcribe`` and ``asrkit export`` exactly as::

        logits = model((features, lengths), training=training)

    - ``features``: float32 ``[batch, time, num_features]``, the utterances padded to the
      batch's longest. Frames at or past an utterance's length may hold anything (zeros from
      the pipeline, noise in the contract checks): the model must not let them reach that
      utterance's logits, so that its logits alone (``asrkit transcribe``) and in any padded
      batch (``asrkit evaluate``, training) are the same.
    - ``lengths``: int32 ``[batch]``, each utterance's frames (at least 1).
    - ``training``: a Python bool; dropout and batch statistics only when true.
    - ``logits``: ``[batch, time', num_classes]`` with ``time' = output_length(time)``, float32
      (float16 under mixed precision; callers cast), unnormalised (CTC applies the softmax).
      Utterance ``i``'s valid logits are its first ``output_length(lengths[i])`` frames; the
      rest are ignored.

    The logits' lengths are not returned: callers compute them with
    :meth:`ModelSpec.output_length`. ``asrkit.testing.check_model`` checks all of this.
    """

    def __call__(self, inputs: tuple[Any, Any], training: bool = False) -> Any: ...


class StreamingModel(AcousticModel, Protocol):
    """An :class:`AcousticModel` that also runs chunk by chunk, carrying its state: what a
    streaming model's :meth:`ModelSpec.build` returns (:meth:`ModelSpec.streaming` says it is
    one, and how it steps). ``asrkit transcribe --stream`` and the streaming exports call it as::

        state = model.initial_state(batch_size)
        outputs, state = model.step(features, lengths, state)   # once a chunk

    - ``features``: float32 ``[batch, input_frames, num_features]``, the next
      :attr:`StreamShape.input_frames` feature frames of each stream, zero-padded past
      ``lengths`` (int32 ``[batch]``): every chunk is whole except a stream's last.
    - ``state``: a list of tensors, each of a shape fixed by the batch size, so that a
      SavedModel or TFLite signature can pass it in and out.
    - ``outputs``: ``[batch, input_frames / time_stride, width]``, what the whole-utterance call
      gives for those frames, :attr:`StreamShape.delay` output frames late: the stream's first
      ``delay`` outputs are not frames of the utterance, and a stream ends with steps of length
      0 until every frame is out.

    The contract is exactness: for any utterance, the outputs of its chunks, the first
    ``delay`` dropped and cut at ``output_length``, equal the whole-utterance call's to float
    tolerance (``asrkit.testing.check_streaming_model`` checks it). So evaluation scores
    exactly what a stream transcribes, and a streaming model is trained as any other.
    """

    def initial_state(self, batch_size: int) -> list[Any]: ...

    def step(self, features: Any, lengths: Any, state: list[Any]) -> tuple[Any, list[Any]]: ...


@dataclass(frozen=True)
class StreamShape:
    """How a streaming model steps (:meth:`ModelSpec.streaming`)."""

    #: Feature frames a step reads (a multiple of the model's time stride).
    input_frames: int
    #: Output frames the step's outputs lag behind its input (look-ahead past the chunk).
    delay: int = 0


class ModelSpec(ABC):
    """A network architecture trainable with ``asrkit train --model <name>``.

    ``Config`` is a frozen dataclass holding every hyperparameter with its default.
    ``build(config, num_features, num_classes)`` returns an :class:`AcousticModel` (the call
    contract is there); ``time_stride(config)`` declares how many input frames make one logit
    frame, from which ``output_length`` follows.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type]
    #: The registered feature extractor this model reads by default.
    features: ClassVar[str] = "mfcc"
    #: Named presets: settings keyed as ``-o`` names them, valued as the command line writes
    #: them or typed (``{"cpu": {"model.n_hidden": 256, "train.learning_rate": "0.002"}}``),
    #: applied before the user's own settings, which win. ``asrkit train`` picks ``full`` where
    #: GPUs are visible and ``cpu`` where not (:mod:`asrkit.config.presets`); a model without
    #: presets trains on its ``Config`` defaults.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Pretraining by growth (``-o grow_epochs=...``, :mod:`asrkit.train.growth`): the name of
    #: the ``Config`` field (an int) that counts the layers training may add, e.g. ``rnn_layers``;
    #: "" = the model cannot grow. A model that declares one builds layer ``i`` under the same
    #: name whatever the count, and adds layers without reshaping the others, so that a smaller
    #: model's weights are the bigger one's of the same names.
    growable: ClassVar[str] = ""

    @abstractmethod
    def build(self, config: Any, num_features: int, num_classes: int) -> AcousticModel:
        """Return an uncompiled Keras model with its variables created, keeping the
        :class:`AcousticModel` contract; ``num_classes`` includes the blank (the last)."""

    def time_stride(self, config: Any) -> int:
        """Input frames per logit frame (the model's subsampling of time): 1 unless the model
        subsamples. Exports derive seconds per logit frame from it."""
        return 1

    def output_length(self, config: Any, length: Any) -> Any:
        """Logit frames for ``length`` feature frames (a Python int or an int32 tensor):
        ``ceil(length / time_stride)``, the CTC lengths of training and evaluation. A model
        declares its ``time_stride`` and produces that many frames; it does not override this."""
        stride = self.time_stride(config)
        return length if stride == 1 else (length + stride - 1) // stride

    def streaming(self, config: Any) -> StreamShape | None:
        """How the model built with ``config`` steps through a stream
        (:class:`StreamingModel`), or ``None`` (the default) when it needs the whole utterance.

        A streaming model's ``Config`` has ``chunk_frames``, the output frames of a chunk (0:
        the whole utterance): commands that decode at another chunk size (``asrkit transcribe
        --chunk-ms``, ``asrkit evaluate --chunk-ms``) replace it, and a model whose
        whole-utterance output depends on the chunk (chunked attention) computes that output
        for its ``chunk_frames``. ``trained_chunks(config)`` says which sizes it learned."""
        return None

    def streams(self, config: Any) -> bool:
        """Whether the model built with ``config`` streams, at its chunk or another."""
        return self.streaming(config) is not None or self.trained_chunks(config) is not None

    def trained_chunks(self, config: Any) -> tuple[int, int] | None:
        """The range ``(lo, hi)`` of ``chunk_frames`` the model was trained to decode (``None``:
        any size decodes the same, as a forward-only recurrence does). 0 in ``config``'s
        ``chunk_frames`` (the whole utterance) is always allowed."""
        return None


@dataclass(frozen=True)
class NoSettings:
    """The ``Config`` of a decoder that has no settings."""


T = TypeVar("T")


class Decoded(list[T]):
    """What a decoder may return from ``decode``: the list of transcripts (or of what the
    method returns, one item per utterance) that also names the utterances whose best
    hypothesis was cut at the decoder's length limit.

    A decoder that writes labels until it decides to stop (an attention decoder) stops a
    hypothesis that reaches its limit without ending it: a decoder repeating itself, or a limit
    set too low for the labels. Its transcript is then incomplete or looping; ``asrkit
    evaluate`` and ``asrkit transcribe`` name those utterances, with the setting to change. A
    plain list says none was cut."""

    #: The positions in the batch of the utterances whose returned transcript was cut.
    hit_length_limit: list[int]

    def __init__(self, items: Iterable[T] = (), hit_length_limit: Iterable[int] = ()) -> None:
        super().__init__(items)
        self.hit_length_limit = list(hit_length_limit)


class Decoder(ABC):
    """Turns logits into text: ``decode(logits, lengths, labels) -> list[str]``.

    The contract the core uses, and nothing else (``asrkit evaluate``, ``asrkit train``,
    ``asrkit transcribe``, ``asrkit plugins --settings``):

    - ``Config``: a frozen dataclass of the decoder's settings with their defaults, declared
      with :func:`asrkit.core.settings.setting` (``NoSettings`` when there are none). The command
      line sets its fields with ``-o decoder.KEY=VALUE``, typed by :mod:`asrkit.core.settings`.
    - ``decoder.config``: this decoder's settings, a ``Config``.
    - ``decoder.with_config(config)``: a new decoder of the same kind using ``config`` (a
      ``Config``); the registered instance keeps its defaults. ``with_config(**changes)``
      replaces single fields of this decoder's config.
    - ``decode(logits, lengths, labels)``: one transcript per utterance of the batch;
      ``labels`` are the run's :class:`asrkit.core.labels.Labels` (characters or subword pieces).
      A decoder with a length limit returns a :class:`Decoded` list naming the utterances it
      cut.
    - ``takes_hotwords`` and ``with_hotwords(hotwords)``: a decoder that can favour hot words
      (the beam searches) says so; ``with_hotwords`` gives a new decoder that boosts them
      (:class:`asrkit.config.hotwords.Hotwords`, read by ``decoder.hotwords``), and
      ``with_config`` keeps them.

    The defaults here serve a decoder whose ``__init__`` takes only ``config``: it stores it
    (``None``: the defaults). A decoder with another ``__init__`` overrides ``with_config``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type] = NoSettings
    #: What ``decode`` reads: CTC logits (:data:`CTC_LOGITS`, every CTC decoder's), or the
    #: outputs of the objectives that declare these :attr:`Objective.outputs` (``"transducer"``:
    #: :class:`asrkit.decoders.transducer.TransducerOutputs`, the frames with the run's
    #: networks). A decoder decodes the runs of every objective whose outputs it reads, the
    #: bundled ones and a plugin's alike (a transducer decoder with a language model).
    reads: ClassVar[str] = CTC_LOGITS
    #: Whether :meth:`with_hotwords` is allowed: the decoder boosts hot words in its search
    #: (``--hotword`` on the command line; :mod:`asrkit.decoders.context`).
    takes_hotwords: ClassVar[bool] = False

    def __init__(self, config: Any = None) -> None:
        self.config = self.Config() if config is None else config

    @property
    def config(self) -> Any:
        """This decoder's settings (the ``Config`` defaults if its ``__init__`` set none)."""
        config = self.__dict__.get("_config")
        return self.Config() if config is None else config

    @config.setter
    def config(self, config: Any) -> None:
        self.__dict__["_config"] = self._checked(config)

    def _checked(self, config: Any) -> Any:
        if not isinstance(config, self.Config):
            raise AsrkitError(f"the {self.name} decoder takes a {self.Config.__qualname__}, "
                              f"not {type(config).__name__}")
        return config

    def with_config(self, config: Any = None, /, **changes: Any) -> Decoder:
        """A new decoder with ``config`` (default: this decoder's) and the fields in
        ``changes`` replaced; an unknown field or a value not allowed is an
        :class:`~asrkit.core.errors.AsrkitError`."""
        base = self._checked(self.config if config is None else config)
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise AsrkitError(
                f"unknown option(s) {', '.join(unknown)} for the {self.name} decoder; "
                f"known: {', '.join(sorted(known)) or 'none'}"
            )
        changed = dataclasses.replace(base, **changes)
        validate(changed)
        decoder = type(self)(changed)
        if self.hotwords is not None:
            decoder.__dict__["_hotwords"] = self.hotwords
        return decoder

    @property
    def hotwords(self) -> Any:
        """The hot words this decoder boosts (an :class:`asrkit.config.hotwords.Hotwords`);
        ``None``: none."""
        return self.__dict__.get("_hotwords")

    def with_hotwords(self, hotwords: Any) -> Decoder:
        """A new decoder with these settings that boosts ``hotwords`` (``None``: none); a
        decoder whose ``takes_hotwords`` is false refuses them in one line."""
        if hotwords is not None and not self.takes_hotwords:
            raise AsrkitError(f"the {self.name} decoder does not boost hot words: choose a "
                              "beam search decoder")
        decoder = self.with_config()
        decoder.__dict__["_hotwords"] = hotwords
        return decoder

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    @abstractmethod
    def decode(self, logits: Any, lengths: Any, labels: Any) -> list[str]:
        """Decode a batch of logits ``[batch, time, classes]`` (unnormalised; the blank last)
        with valid ``lengths`` (``None``: every frame) into one string per utterance."""


class Objective(ABC):
    """A training objective: what a model's output frames are trained to be, and how.

    Models (``brnn``, ``ds2``, ``conformer``, a plugin's) are encoders: audio features in, one
    vector a frame out (the :class:`AcousticModel` call). The objective owns everything on top
    of those frames: the width of the model's output layer, any further trainable network (its
    *head*), the loss, which utterances it can align, and what decodes its outputs. ``asrkit
    train -o objective=NAME`` chooses it (``ctc`` by default) and ``-o objective.KEY=VALUE`` sets
    its ``Config``; a run records both (``train.objective`` and the ``objective`` section of
    ``config.json``) and keeps them when resumed. ``asrkit.testing.check_objective`` checks the
    contract.

    The methods take the objective's ``config`` first, as :class:`ModelSpec`'s do: the
    registered object holds no state, so one instance serves every run.

    - ``encoder_width(config, labels) -> int``: the width the model's output layer is built
      with (``ModelSpec.build``'s ``num_classes``). CTC's is ``labels.num_classes`` (the labels
      and the blank), exactly what models were always built with, so its runs, checkpoints and
      exports are those of before objectives. A transducer asks for its encoder dimension.
    - ``build(config, encoder_width, labels) -> keras.Model | None``: the objective's own
      trainable network on top of the encoder frames (a transducer's prediction and joint
      networks), its variables created; ``None`` (the default, CTC's) for none. It is built in
      the same ``tf.distribute`` scope and precision policy as the model; its trainable
      variables follow the model's everywhere the engine gathers them (the optimiser, the
      towers' gradients, accumulation, the moving average, ``asrkit average``, growth) and it is
      saved in checkpoints as ``head``, beside ``model``: a run without a head keeps the exact
      checkpoint structure of before.
    - ``losses(config, head, encoder_out, out_lengths, label_ids, label_lengths, training)``:
      the per-utterance loss and which utterances the objective can align at all, for a batch:
      ``encoder_out`` float32 ``[batch, frames, encoder_width]`` (the model's output, cast),
      ``out_lengths`` int32 ``[batch]`` (``ModelSpec.output_length`` of the feature frames),
      ``label_ids`` int32 ``[batch, max_labels]`` zero-padded with ``label_lengths`` int32
      ``[batch]``; ``head`` is what ``build`` returned, ``training`` a Python bool (dropout in
      the head). Returns ``(loss float32 [batch], feasible bool [batch])``: finite and
      non-negative losses; an utterance that is not feasible (too few frames for its labels)
      has a finite loss (0 by convention) that the engine leaves out of the mean and the
      gradient, and names. It runs inside ``tf.function`` on every tower, in training, gradient
      accumulation and evaluation (``asrkit evaluate``'s loss): TensorFlow operations only.
    - ``frames_needed(config, label_ids) -> int``: the fewest output frames an utterance of
      these labels needs (CTC: one a label, one more between equal neighbours). ``asrkit train``
      warns before the first step of the utterances of the training split that have fewer.

    **Decoding.** An objective whose model output *is* CTC logits (``[batch, frames, labels +
    1]``, the blank last: CTC and its variants, label smoothing, regularisers, auxiliary losses)
    keeps ``outputs`` at :data:`CTC_LOGITS`: then its ``encoder_width`` must be
    ``labels.num_classes``, and its runs are decoded, scored, transcribed and exported exactly
    as any run, by any of the CTC decoders (``greedy``, ``beam``, a language model's). An
    objective whose outputs need its head to be read (a transducer) names what they are in
    ``outputs`` (``"transducer"``), its runs' decoder in ``default_decoder``, and hands the
    decoders that read those outputs (:attr:`Decoder.reads`: the bundled ones and any plugin's)
    what they read with ``decoder_inputs(config, head, encoder_out)``: the model's output of a
    batch (numpy) with the head, e.g. :class:`asrkit.decoders.transducer.TransducerOutputs`.
    ``asrkit train``'s dev scoring, ``evaluate``, ``evaluate --watch`` and ``transcribe``
    decode such runs; ``export`` writes the greedy search of a ``"transducer"`` objective (its
    head meets :class:`asrkit.decoders.transducer.TransducerNetworks`) into the graph
    (:mod:`asrkit.serving.export_transducer`) and refuses other such objectives in one line
    before any work (:mod:`asrkit.config.objectives`). The declaration is on the class, not
    found out by calling a method, so that refusals come before anything is built.

    **Presets.** ``presets`` maps a model preset's name (``full``, ``cpu``, ...) to the
    objective's settings for it (``{"objective.joint_dim": "128"}``), applied after the
    model's preset and before the user's ``-o``: a transducer's networks shrink with the
    encoder on a CPU. ``train`` settings may be among them (an attention run's ``cpu`` preset
    scores its dev evaluations greedily: ``{"train.dev_decoder": "attention-greedy"}``).

    Why a separate kind, and not a part of each model: the objective is a choice orthogonal to
    the architecture (any encoder with any objective), and it holds what must stay consistent
    across training, evaluation and serving (the loss, the alignment check, the decoders), so
    that asrkit's engine calls one contract where it called CTC directly.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    #: A frozen dataclass of the objective's settings with their defaults (``NoSettings``: none),
    #: declared with :func:`asrkit.core.settings.setting`; ``-o objective.KEY=VALUE`` sets them.
    Config: ClassVar[type] = NoSettings
    #: What its runs' model outputs are, for the decoders (:attr:`Decoder.reads`):
    #: :data:`CTC_LOGITS`, or the name of what :meth:`decoder_inputs` hands the decoders that
    #: read it (``"transducer"``: :class:`asrkit.decoders.transducer.TransducerOutputs`).
    outputs: ClassVar[str] = CTC_LOGITS
    #: The decoder of its runs when none is named; it reads ``outputs``.
    default_decoder: ClassVar[str] = "greedy"
    #: Its fastest decoder, which ``asrkit transcribe --stream`` shows partial results with as
    #: the audio comes (the final ones are the chosen decoder's); it reads ``outputs``.
    greedy_decoder: ClassVar[str] = "greedy"
    #: The objective's settings under each model preset (see the class docstring).
    presets: ClassVar[dict[str, dict[str, str]]] = {}

    @abstractmethod
    def encoder_width(self, config: Any, labels: Any) -> int:
        """The width of the model's output frames for ``labels`` (an
        :class:`asrkit.core.labels.Labels`): ``labels.num_classes`` for CTC logits."""

    def build(self, config: Any, encoder_width: int, labels: Any) -> Any:
        """The objective's trainable network on top of the encoder frames, a ``keras.Model``
        with its variables created, or ``None`` (the default) when it has none."""
        return None

    @abstractmethod
    def losses(self, config: Any, head: Any, encoder_out: Any, out_lengths: Any,
               label_ids: Any, label_lengths: Any, training: bool = False) -> tuple[Any, Any]:
        """``(loss float32 [batch], feasible bool [batch])`` of a batch (see the class
        docstring): finite, non-negative, and 0 where the utterance cannot be aligned."""

    @abstractmethod
    def frames_needed(self, config: Any, label_ids: Sequence[int]) -> int:
        """The fewest output frames an utterance of ``label_ids`` needs to be aligned."""

    def decoder_inputs(self, config: Any, head: Any, encoder_out: Any) -> Any:
        """What the objective's decoders read of a batch's model output ``encoder_out``
        (numpy, ``[batch, frames, encoder_width]``): the output itself (the default: CTC
        logits), or it with the ``head`` that reads it."""
        return encoder_out

    @property
    def ctc_outputs(self) -> bool:
        """Whether the model's output is CTC logits."""
        return self.outputs == CTC_LOGITS

    def decodes_with(self, decoder: Decoder) -> bool:
        """Whether ``decoder`` reads this objective's outputs."""
        return decoder.reads == self.outputs


@dataclass(frozen=True)
class FeatureConfig:
    """What every feature extractor's ``Config`` declares: how it frames audio.

    An extractor's ``Config`` subclasses this (adding its own settings, all with defaults), so
    that the core can count frames without running it (:mod:`asrkit.core.frames`): the importer's
    and the engine's check that a transcript fits its audio, the seconds a batch holds, word
    times in transcripts, an export's ``frame_seconds``. Window and step are rounded half up to
    whole samples.
    """

    #: The rate of the audio ``extract`` reads, in Hz; asrkit's audio is always 16 kHz (at
    #: most 192 kHz).
    sample_rate: int = setting(SAMPLE_RATE, min=1, max=192_000)
    #: The analysis window, in milliseconds (at most a second).
    window_ms: float = setting(25.0, above=0, max=1000)
    #: The hop from one frame to the next, in milliseconds: the features' time resolution.
    step_ms: float = setting(10.0, above=0, max=1000)

    @property
    def centred_frames(self) -> bool:
        """Whether audio is framed as Kaldi frames it with ``snip_edges=false`` (frames centred
        on multiples of the step, :func:`asrkit.core.frames.count_frames`) instead of as
        python_speech_features does; a ``Config`` whose settings choose Kaldi's framing
        (``logmel``'s ``kaldi``) says so here."""
        return False

    def __post_init__(self) -> None:
        validate(self)


class FeatureExtractor(ABC):
    """Computes features from 16 kHz audio inside the TensorFlow graph (``tf.signal``), so that
    they run in ``tf.data`` and on the accelerator.

    The contract (``asrkit.testing.features.check_extractor`` checks it):

    - ``Config`` is a frozen dataclass subclassing :class:`FeatureConfig`: every setting has a
      default, and ``sample_rate``, ``window_ms`` and ``step_ms`` say how audio is framed (the
      core reads those three; a ``Config`` without them is a one-line error at ``train``).
    - ``extract(audio, config)`` takes float32 audio ``[samples]`` in [-1, 1] (``samples >= 1``)
      and returns float32 ``[frames, num_features(config)]``, finite, with
      ``frames = asrkit.core.frames.Framing.of(config).frames(samples)``: one frame for anything up
      to a window, else ``1 + ceil((samples - window) / step)`` (the last frame zero-padded).
      Per-utterance normalisation, if any, is part of it.
    - ``extract_batch(audio, lengths, config)`` takes a zero-padded batch ``[batch, samples]``
      with the valid ``lengths`` and returns ``(features [batch, frames, num_features],
      frame_lengths [batch])``: each utterance's first ``frame_lengths[i]`` frames equal
      ``extract`` of its own samples alone (whatever the padding), ``frames`` is the largest
      length, and frames past an utterance's end are zero. The default runs ``extract`` on each
      utterance; an extractor overrides it when it can do the batch at once.

    Both run inside ``tf.data`` and ``tf.function``: TensorFlow operations only, shapes that may
    be unknown until run time, and no Python side effects.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type[FeatureConfig]]

    @abstractmethod
    def num_features(self, config: Any) -> int:
        """Width of one feature frame."""

    @abstractmethod
    def extract(self, audio: Any, config: Any) -> Any:
        """Features ``[frames, num_features]`` float32 of float32 audio ``[samples]`` in
        [-1, 1]; ``frames`` as the config's framing counts them (see the class docstring)."""

    def num_frames(self, num_samples: Any, config: Any) -> Any:
        """Frames out for ``num_samples`` samples in (a Python int or an integer tensor)."""
        return Framing.of(config).frames(num_samples)

    def extract_batch(self, audio: Any, lengths: Any, config: Any) -> tuple[Any, Any]:
        """Features of a zero-padded batch ``[batch, samples]`` with ``lengths`` (samples):
        ``([batch, frames, num_features], frame_lengths [batch])``, each utterance's frames
        as ``extract`` gives them alone, zeros past its end."""
        import tensorflow as tf

        audio = tf.convert_to_tensor(audio, tf.float32)
        lengths = tf.cast(lengths, tf.int32)
        frame_lengths = self.num_frames(lengths, config)
        frames = tf.reduce_max(frame_lengths)
        width = self.num_features(config)

        def one(index: Any) -> Any:
            features = tf.cast(self.extract(audio[index, : lengths[index]], config), tf.float32)
            return tf.pad(features, [[0, frames - tf.shape(features)[0]], [0, 0]])

        features = tf.map_fn(one, tf.range(tf.shape(audio)[0]),
                             fn_output_signature=tf.TensorSpec([None, width], tf.float32))
        return features, frame_lengths


class Tokenizer(ABC):
    """Makes the labels a model is trained on: characters (``chars``, the default) or subword
    pieces, chosen per run with ``-o tokenizer=FILE`` (a file this tokenizer built).

    The contract (``asrkit.testing.check_tokenizer`` checks it):

    - ``suffix``: the end of the file names :meth:`build` writes (``".model"``); ``-o
      tokenizer=FILE`` finds the tokenizer by it, so two installed tokenizers must not share
      one.
    - ``Config``: a frozen dataclass of the build settings with their defaults (``vocab_size``,
      ...), set by ``asrkit tokenizer build -o KEY=VALUE``.
    - ``build(texts, config, path)``: learn a vocabulary from normalised transcripts (lower
      case, single spaces, the dataset's alphabet) and write it to ``path``. It must be able to
      spell every transcript it was built from.
    - ``load(path)``: the :class:`asrkit.core.labels.Labels` the file describes: ``symbols`` (the
      model's classes before the blank, in order), ``word_marker`` (how a symbol says it starts
      a word) and ``encode``. Decoding, word times and exports read only ``symbols`` and
      ``word_marker``; ``encode`` serves training and forced alignment. ``load`` of what
      ``build`` wrote gives labels whose ``decode(encode(text)) == text``.

    ``build`` may import heavy libraries (it runs in ``asrkit tokenizer build``); ``load`` runs
    in every command that reads the run.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type] = NoSettings
    suffix: ClassVar[str]

    @abstractmethod
    def build(self, texts: Sequence[str], config: Any, path: Any) -> None:
        """Learn a vocabulary from ``texts`` (normalised transcripts) and write it to ``path``
        (a :class:`pathlib.Path` ending in ``suffix``)."""

    @abstractmethod
    def load(self, path: Any) -> Any:
        """The :class:`asrkit.core.labels.Labels` of a file :meth:`build` wrote; an
        :class:`~asrkit.core.errors.AsrkitError` in one line when the file is not one."""


#: What each ``register_*`` hook accepts, by registry kind.
KINDS: dict[str, type] = {
    "importer": Importer,
    "model": ModelSpec,
    "decoder": Decoder,
    "feature": FeatureExtractor,
    "tokenizer": Tokenizer,
    "objective": Objective,
}
