"""The input pipeline: TFRecord shards to padded, length-bucketed batches, entirely in ``tf.data``.

Why this shape: a CPU (or the host of a GPU) must keep the model fed, and Python loops cannot.
Every step below is a TensorFlow op, so ``tf.data`` runs it in parallel threads ahead of the
model::

    shard files (shuffled, split across workers)
      -> records (interleaved) -> parse -> labels (alphabet lookup, in the graph)
      -> [speed, pitch, VTLP, formants, reverb, noise]
      -> features (in-graph MFCC / log-mel) -> [cache]
      -> shuffle (seeded) -> [SpecAugment]
      -> length buckets -> padded batches -> [context windows] -> prefetch

Each batch is a dict::

    features          float32 [batch, frames, features]   zero past each utterance's end
    feature_lengths   int32   [batch]
    labels            int32   [batch, max label length]   padded with the blank class
    label_lengths     int32   [batch]
    ids, transcripts  string  [batch]                     only with ``with_text=True``

Guarantees: each utterance of the split appears exactly once an epoch (nothing is dropped:
partial batches are kept); shuffling is seeded and differs between epochs; with
``deterministic=True`` two runs with the same seed yield the same batches; under
``tf.distribute`` each input pipeline reads its own share of the shard files (or of the records,
when there are fewer files than pipelines).

With ``config.service`` (a tf.data service's dispatcher), the steps from the shard files to
the features and SpecAugment run on the service's workers (:func:`_service_utterances`), and
only shuffling and batching here: see :mod:`asrkit.pipeline.service`.

Bucketing groups utterances of similar length so that padded frames, which cost as much compute
as real ones, are few; :func:`padding_fraction` measures it. ``batch_seconds`` sizes each
bucket's batches by a budget of padded audio instead of a count (:func:`batch_plan`).
"""

from __future__ import annotations

import csv
import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from asrkit import plugins
from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.labels import Labels
from asrkit.core.settings import MAX_SEED
from asrkit.core.storage import Location, StoragePath, location
from asrkit.core.text import Alphabet
from asrkit.dataset.shards import feature_spec, parse, shard_paths, shard_splits
from asrkit.features import context_windows
from asrkit.pipeline import augment
from asrkit.pipeline.service import distribute
from asrkit.types import FeatureConfig, FeatureExtractor

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

#: Size of a canonical WAV header; a DeepSpeech CSV's ``wav_filesize`` minus this is the PCM size.
WAV_HEADER_BYTES = 44
#: Shard files read at once: enough to mix utterances from several files, few enough to keep
#: memory and open files small.
INTERLEAVE_FILES = 4
#: Keys of a batch, in the order :func:`as_tuple` returns them.
BATCH_KEYS = ("features", "feature_lengths", "labels", "label_lengths")
#: One utterance (or batch) on its way through the pipeline: name -> tensor.
Element = dict[str, "tf.Tensor"]


# -- labels -------------------------------------------------------------------------------------


def label_encoder(labels: Labels) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """An in-graph ``encode(transcript, utterance_id) -> int32 labels``.

    Characters (an :class:`~asrkit.core.text.Alphabet`) are looked up by code point in a constant
    table; a character the alphabet lacks stops the pipeline with an error naming the
    character(s), the utterance and its transcript. Other labels (subword pieces) are encoded
    by their own ``encode`` in Python: a transcript is a few hundred bytes, and the features
    beside it cost far more.
    """
    import numpy as np
    import tensorflow as tf

    if not isinstance(labels, Alphabet):
        return _python_encoder(labels)
    alphabet = labels

    codepoints = [ord(symbol) for symbol in alphabet.symbols]
    table = np.full(max(codepoints) + 2, -1, np.int32)  # the last entry: anything beyond
    table[codepoints] = np.arange(len(codepoints), dtype=np.int32)
    last = len(table) - 1

    def encode(transcript: tf.Tensor, utterance_id: tf.Tensor) -> tf.Tensor:
        points = tf.strings.unicode_decode(transcript, "UTF-8")
        labels = tf.gather(tf.constant(table), tf.clip_by_value(points, 0, last))
        unknown = labels < 0
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unknown)),
            [
                "characters not in the alphabet:",
                tf.strings.unicode_encode(tf.boolean_mask(points, unknown), "UTF-8"),
                "in utterance",
                utterance_id,
                "transcript:",
                transcript,
                "(normalise the transcripts or add the characters to the alphabet file)",
            ],
        )
        with tf.control_dependencies([check]):
            return tf.identity(labels)

    return encode


# -- lengths and buckets ------------------------------------------------------------------------


def utterance_samples(dataset_dir: str | Location, split: str) -> list[int]:
    """Audio lengths (samples) of a split's utterances: from ``<split>.csv`` when every row has a
    ``duration`` (seconds, asrkit's column) or a ``wav_filesize`` (cheap), else by reading the
    shards' ``num_samples``."""
    lengths = _csv_samples(location(dataset_dir) / f"{split}.csv")
    if lengths is not None:
        return lengths
    return _shard_samples(dataset_dir, split)


def _csv_samples(path: Location) -> list[int] | None:
    if not path.is_file():
        return None
    # Transcripts of any length may sit beside the sizes read here; csv's field limit is
    # process-wide, so it is raised only while this file is read.
    previous = csv.field_size_limit(sys.maxsize)
    try:
        return _read_samples(path)
    finally:
        csv.field_size_limit(previous)


def _read_samples(path: Location) -> list[int] | None:
    lengths = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                if row.get("duration"):
                    lengths.append(round(float(row["duration"]) * SAMPLE_RATE))
                elif row.get("wav_filesize"):
                    lengths.append(max(0, (int(row["wav_filesize"]) - WAV_HEADER_BYTES) // 2))
                else:
                    return None
            except ValueError:
                return None
    return lengths


def _shard_samples(dataset_dir: str | Location, split: str) -> list[int]:
    import tensorflow as tf

    spec = {"num_samples": feature_spec()["num_samples"]}
    files = [str(p) for p in shard_paths(dataset_dir, split)]
    # The lengths are read once, eagerly, also when the pipeline is built inside a graph (a
    # tf.function or a graph that makes an epoch's dataset): iterating needs eager execution.
    with tf.init_scope():
        records = tf.data.TFRecordDataset(files).batch(1024)
        counts = records.map(lambda batch: tf.io.parse_example(batch, spec)["num_samples"])
        return [int(n) for batch in counts.as_numpy_iterator() for n in batch]


def auto_boundaries(samples: Sequence[int], num_buckets: int, batch_size: int) -> list[int]:
    """Bucket edges (samples) at quantiles of the lengths, so buckets fill equally fast; never
    more buckets than full batches, so a small split is not spread into partial batches."""
    import numpy as np

    buckets = max(1, min(num_buckets, len(samples) // batch_size))
    if buckets == 1 or not samples:
        return []
    quantiles = np.quantile(np.asarray(samples), np.linspace(0, 1, buckets + 1)[1:-1])
    # bucket i holds lengths in [edge[i-1], edge[i]): put the quantile value in the lower one.
    return sorted({int(q) + 1 for q in quantiles})


def bucket_edges(dataset_dir: str | Location, split: str, config: PipelineConfig) -> list[int]:
    """The bucket edges in samples that :func:`make_dataset` uses."""
    if config.bucket_boundaries:
        return [round(seconds * SAMPLE_RATE) for seconds in config.bucket_boundaries]
    return auto_boundaries(
        utterance_samples(dataset_dir, split), config.num_buckets, config.batch_size
    )


def batch_plan(dataset_dir: str | Location, split: str,
               config: PipelineConfig) -> tuple[list[int], list[int]]:
    """Bucket edges (samples) and each bucket's batch size, the last for lengths beyond the last
    edge. With ``batch_seconds``, a bucket's batch size is the budget over the longest length
    the bucket can hold (below its upper edge; the split's longest for the last bucket), so no
    batch holds more padded audio than the budget, except an utterance longer than the budget,
    which forms a batch of its own."""
    if not config.bucketing:
        return [], [config.batch_size]
    if not config.batch_seconds:
        edges = bucket_edges(dataset_dir, split, config)
        return edges, [config.batch_size] * (len(edges) + 1)
    samples = utterance_samples(dataset_dir, split)
    budget = config.batch_seconds * SAMPLE_RATE
    if config.bucket_boundaries:
        edges = bucket_edges(dataset_dir, split, config)
    else:  # as many buckets as a typical batch allows, as with batch_size
        typical = max(1, int(budget // max(1, sorted(samples)[len(samples) // 2])))
        edges = auto_boundaries(samples, config.num_buckets, typical) if samples else []
    longest = max([*samples, *(edge - 1 for edge in edges), 1])
    uppers = [edge - 1 for edge in edges] + [longest]
    return edges, [max(1, int(budget // max(1, upper))) for upper in uppers]


def estimated_batches(dataset_dir: str | Location, split: str, config: PipelineConfig) -> int:
    """Batches an epoch of :func:`batch_plan`'s buckets would make when each bucket's last batch
    is the only partial one (0 when the lengths cannot be read)."""
    import bisect
    import math

    try:
        samples = utterance_samples(dataset_dir, split)
        edges, sizes = batch_plan(dataset_dir, split, config)
    except (OSError, ValueError, AsrkitError):
        return 0
    counts = [0] * len(sizes)
    for length in samples:
        counts[bisect.bisect_right(edges, length)] += 1
    return sum(math.ceil(count / size) for count, size in zip(counts, sizes, strict=True))


class PaddingMeter:
    """Counts real and padded feature frames of batches: the padding they cost."""

    def __init__(self) -> None:
        self.real = self.total = 0

    def add(self, lengths: np.ndarray, width: int) -> None:
        """One batch: its utterances' frame counts, padded to ``width`` frames."""
        self.real += int(sum(lengths))
        self.total += len(lengths) * int(width)

    def take(self) -> float:
        """The share of padding since the last call (0 with nothing counted); start again."""
        fraction = 1.0 - self.real / self.total if self.total else 0.0
        self.real = self.total = 0
        return round(fraction, 4)


# -- the pipeline -------------------------------------------------------------------------------


def resolve_extractor(extractor: FeatureExtractor | str) -> FeatureExtractor:
    """An extractor object, or the installed one of that name (``"mfcc"``, ``"logmel"``)."""
    if isinstance(extractor, str):
        return plugins.get("feature", extractor)
    return extractor


def make_dataset(
    dataset_dir: str | Location,
    split: str,
    labels: Labels,
    extractor: FeatureExtractor | str,
    feature_config: FeatureConfig | None = None,
    config: PipelineConfig | None = None,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | tf.Tensor | None = None,
) -> tf.data.Dataset:
    """Batches of one split of an imported dataset (see the module docstring for their keys).

    ``labels`` encode the transcripts (an :class:`~asrkit.core.text.Alphabet` or a tokenizer's
    :class:`~asrkit.core.labels.Labels`). ``extractor`` is a
    :class:`~asrkit.types.FeatureExtractor` or its registered name;
    ``feature_config`` defaults to ``extractor.Config()``. Under ``tf.distribute``, call this
    from ``strategy.distribute_datasets_from_function`` with its ``input_context``: each input
    pipeline then reads a disjoint share of the split.

    ``seed`` overrides ``config.seed`` and may be a scalar ``tf.int64`` tensor: training builds
    every epoch inside one dataset (``Dataset.range(epochs).flat_map``) with the seed
    ``seed + epoch``, so that an epoch's order depends on the seed and the epoch alone (and a
    resumed run replays it exactly) without building a new pipeline every epoch.

    With ``config.service`` set, the workers of that tf.data service make the utterances'
    features (:func:`_service_utterances`, :mod:`asrkit.pipeline.service`) and this process
    shuffles and batches them; ``seed`` must then be a number, not a tensor.
    """
    seed = (config or PipelineConfig()).seed if seed is None else seed
    config = config or PipelineConfig()
    extractor = resolve_extractor(extractor)
    feature_config = extractor.Config() if feature_config is None else feature_config
    files = [str(p) for p in shard_paths(dataset_dir, split)]
    if not files and shard_splits(dataset_dir):
        raise PipelineError(f"no shards of split {split!r} in {dataset_dir}: its splits are "
                            + ", ".join(shard_splits(dataset_dir)))
    if not files:
        raise PipelineError(
            f"no shards of split {split!r} in {dataset_dir} (expected "
            f"shards/{split}-NNNNN-of-MMMMM.tfrecord); import the dataset first"
        )
    edges, batch_sizes = batch_plan(dataset_dir, split, config)
    pipelines, index = _pipeline_share(input_context)
    cache_name = ("" if config.cache == "none" else  # the name stats every shard file
                  _cache_name(split, files, extractor, feature_config, labels, config,
                              pipelines, index))
    calls = {"num_parallel_calls": config.parallel_calls, "deterministic": config.deterministic}

    if config.service:
        dataset = distribute(_service_utterances(files, split, labels, extractor,
                                                 feature_config, config, pipelines, index,
                                                 _python_seed(seed)), config)
    else:
        dataset = _records(files, config, pipelines, index, seed)
        dataset = dataset.map(_reader(label_encoder(labels)), **calls)
        if config.audio_augment:
            dataset = _cache(dataset, config.cache, cache_name)  # audio: each epoch anew
            dataset = _with_seeds(dataset, seed, salt=1).map(_audio_augmenter(config), **calls)
        dataset = dataset.map(_featurizer(extractor, feature_config), **calls)
        if not config.audio_augment:
            dataset = _cache(dataset, config.cache, cache_name)
    if config.shuffle:
        dataset = dataset.shuffle(
            config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True
        )
    if config.spec_augment and not config.service:  # the service's workers mask
        dataset = _with_seeds(dataset, seed, salt=2).map(_masker(config), **calls)
    dataset = _batch(dataset, edges, batch_sizes, labels.blank)
    dataset = dataset.map(_finisher(config), **calls).prefetch(config.prefetch)
    return dataset.with_options(dataset_options(config, input_context))


def _pipeline_share(input_context: tf.distribute.InputContext | None) -> tuple[int, int]:
    """(number of input pipelines, this one's index)."""
    if input_context is None:
        return 1, 0
    return int(input_context.num_input_pipelines), int(input_context.input_pipeline_id)


def _records(
    files: list[str], config: PipelineConfig, pipelines: int, index: int,
    seed: int | tf.Tensor | None,
) -> tf.data.Dataset:
    """Serialised records of this pipeline's share: whole files when there are enough of them
    (each worker reads only its own), else every ``pipelines``-th record."""
    import tensorflow as tf

    by_file = len(files) >= pipelines
    if by_file:
        files = files[index::pipelines]
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if config.shuffle:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(INTERLEAVE_FILES, len(files)),
        num_parallel_calls=config.parallel_calls,
        deterministic=config.deterministic,
    )
    return dataset if by_file else dataset.shard(pipelines, index)


def _python_seed(seed: int | tf.Tensor | None) -> int:
    """The service's seed as a number (the file order is drawn in Python); None: a fresh one."""
    import numpy as np

    if seed is None:
        return int(np.random.default_rng().integers(MAX_SEED))
    return int(seed)


def _service_utterances(
    files: list[str], split: str, labels: Labels, extractor: FeatureExtractor,
    feature_config: FeatureConfig, config: PipelineConfig, pipelines: int, index: int,
    seed: int,
) -> tf.data.Dataset:
    """What the tf.data service's workers make: each utterance's features, augmented and
    masked (the expensive part); shuffling and batching stay in the training process, where
    they mix every worker's utterances. Each utterance's augmentation is drawn from ``seed``
    and its id, the same whichever worker makes it, and in whatever order."""
    if not isinstance(labels, Alphabet):
        raise PipelineError("service: a tokenizer's labels are encoded in Python, which "
                            "tf.data service workers cannot run; train without the service")
    calls = {"num_parallel_calls": config.parallel_calls, "deterministic": config.deterministic}
    dataset = _splittable_records(files, split, pipelines, index, seed)
    dataset = dataset.map(_reader(label_encoder(labels)), **calls)
    if config.audio_augment:
        dataset = _keyed_seeds(dataset, seed, salt=1).map(_audio_augmenter(config), **calls)
    dataset = dataset.map(_featurizer(extractor, feature_config), **calls)
    if config.spec_augment:
        dataset = _keyed_seeds(dataset, seed, salt=2).map(_masker(config), **calls)
    return dataset.prefetch(config.prefetch)


def _splittable_records(
    files: list[str], split: str, pipelines: int, index: int, seed: int,
) -> tf.data.Dataset:
    """This pipeline's share of the files, in an order drawn from ``seed``, read one file at a
    time: the tf.data service's dispatcher splits the dataset at its first source, the file
    names, and gives each worker the next file when it asks for one. Shuffling the names or
    reading several files at once inside the dataset would make the first worker take every
    file before another asks."""
    import numpy as np
    import tensorflow as tf

    if len(files) < pipelines:
        raise PipelineError(
            f"service: the {pipelines} input pipelines of this training need at least as many "
            f"shard files of split {split!r} ({len(files)}); train without the service, or "
            "re-import the dataset in more shards")
    share = files[index::pipelines]
    order = np.random.default_rng(seed).permutation(len(share))
    dataset = tf.data.Dataset.from_tensor_slices([share[i] for i in order])
    return dataset.flat_map(tf.data.TFRecordDataset)


def _reader(
    encode: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
) -> Callable[[tf.Tensor], Element]:
    def read(serialized: tf.Tensor) -> Element:
        record = parse(serialized)
        return {
            "id": record["id"],
            "transcript": record["transcript"],
            "audio": record["audio"],
            "labels": encode(record["transcript"], record["id"]),
        }

    return read


def _audio_augmenter(config: PipelineConfig) -> Callable[[Element, tf.Tensor], Element]:
    """Speed, pitch, vocal tract, formants, room, then noise (the room's and not the noise's:
    the noise is the microphone's surroundings), each with its own share of the utterance's
    seed. The shares of speed, pitch and noise are those they had before VTLP, reverb and
    formant shifts existed (a longer split keeps the first shares), so a run's draws do not
    change when it resumes in a newer version."""
    noise_bank = load_noise_bank(config.noise_folder) if config.noise_folder else None
    rir_bank = load_rir_bank(config.rir_folder) if config.rir_folder and config.reverb else None

    def perturb(element: Element, seed: tf.Tensor) -> Element:
        import tensorflow as tf

        speed, pitch, noise, vtlp, room, formant = tf.unstack(
            tf.random.experimental.stateless_split(seed, 6))
        audio = augment.speed_perturb(element["audio"], speed, config.speed_factors)
        audio = augment.pitch_perturb(audio, pitch, config.pitch_semitones)
        audio = augment.vtlp_perturb(audio, vtlp, config.vtlp_alpha)
        audio = augment.formant_perturb(audio, formant, config.formant_ratio)
        if config.reverb:
            audio = augment.add_reverb(audio, room, rt60=config.reverb_rt60,
                                       drr_db=config.reverb_drr_db,
                                       probability=config.reverb_prob, bank=rir_bank)
        audio = augment.add_noise(audio, noise, config.noise_snr_db, noise_bank)
        return {**element, "audio": audio}

    return perturb


#: At most this much noise is loaded from a noise folder (10 minutes, 38 MB as float32).
MAX_NOISE_SECONDS = 600
#: At most this much of a room impulse response is kept (its tail beyond is inaudible in any
#: ordinary room), and at most this many seconds of responses are loaded from a folder.
MAX_RIR_SECONDS, MAX_RIR_BANK_SECONDS = 4, 600


def _read_folder(folder: str, setting: str, limit: int) -> Iterator[tuple[Path, np.ndarray]]:
    """Each 16 kHz WAV/FLAC file in ``folder`` (sorted, recursively) with its samples
    ``[samples, channels]``, until ``limit`` samples have been read."""
    import soundfile

    files = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in (".wav", ".flac"))
    if not files:
        raise PipelineError(f"{setting} {folder}: no .wav or .flac files")
    total = 0
    for path in files:
        try:
            audio, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        except (RuntimeError, OSError) as error:
            raise PipelineError(f"{setting}: cannot read {path}: {error}") from None
        if rate != SAMPLE_RATE:
            raise PipelineError(f"{setting}: {path} is {rate} Hz; convert it to "
                                f"{SAMPLE_RATE} Hz (e.g. sox IN -r {SAMPLE_RATE} OUT)")
        yield path, audio
        total += len(audio)
        if total >= limit:
            return


def load_noise_bank(folder: str) -> tf.Tensor:
    """Every 16 kHz WAV/FLAC file in ``folder`` (sorted, recursively), mono, concatenated."""
    import numpy as np
    import tensorflow as tf

    limit = MAX_NOISE_SECONDS * SAMPLE_RATE
    parts = [audio.mean(axis=1) for _, audio in _read_folder(folder, "noise_folder", limit)]
    bank = np.concatenate(parts)[:limit]
    if not np.any(bank):
        raise PipelineError(f"noise_folder {folder}: the recordings are silent")
    return tf.constant(bank)


def aligned_rir(response: np.ndarray) -> np.ndarray:
    """A room impulse response from its direct path on (the largest sample, which arrives
    first), scaled so the direct path is 1.0: the dry sound keeps its level and its timing."""
    import numpy as np

    direct = int(np.argmax(np.abs(response)))
    return (response[direct:direct + MAX_RIR_SECONDS * SAMPLE_RATE]
            / response[direct]).astype(np.float32)


def load_rir_bank(folder: str) -> augment.RirBank:
    """Every 16 kHz WAV/FLAC room impulse response in ``folder`` (sorted, recursively; the
    first channel), each :func:`aligned_rir`."""
    import numpy as np
    import tensorflow as tf

    responses = []
    for path, audio in _read_folder(folder, "rir_folder", MAX_RIR_BANK_SECONDS * SAMPLE_RATE):
        if not np.any(audio[:, 0]):
            raise PipelineError(f"rir_folder: {path} is silent")
        responses.append(aligned_rir(audio[:, 0]))
    starts = np.cumsum([0] + [len(response) for response in responses])
    return augment.RirBank(tf.constant(np.concatenate(responses)),
                           tf.constant(starts, tf.int32))


def _featurizer(
    extractor: FeatureExtractor, feature_config: FeatureConfig,
) -> Callable[[Element], Element]:
    def featurize(element: Element) -> Element:
        import tensorflow as tf

        features = tf.cast(extractor.extract(element["audio"], feature_config), tf.float32)
        return {
            "id": element["id"],
            "transcript": element["transcript"],
            "features": features,
            "feature_length": tf.shape(features)[0],
            "num_samples": tf.size(element["audio"]),
            "labels": element["labels"],
            "label_length": tf.size(element["labels"]),
        }

    return featurize


def _masker(config: PipelineConfig) -> Callable[[Element, tf.Tensor], Element]:
    def mask(element: Element, seed: tf.Tensor) -> Element:
        features = augment.spec_augment(
            element["features"],
            seed,
            freq_masks=config.freq_masks,
            freq_mask_width=config.freq_mask_width,
            time_masks=config.time_masks,
            time_mask_width=config.time_mask_width,
            time_mask_max_ratio=config.time_mask_max_ratio,
        )
        return {**element, "features": features}

    return mask


def _finisher(config: PipelineConfig) -> Callable[[Element], Element]:
    """The batch as the training engine reads it (see the module docstring)."""
    def finish(batch: Element) -> Element:
        out = {
            "features": context_windows(batch["features"], config.context),
            "feature_lengths": batch["feature_length"],
            "labels": batch["labels"],
            "label_lengths": batch["label_length"],
        }
        if config.with_text:
            out["ids"] = batch["id"]
            out["transcripts"] = batch["transcript"]
        return out

    return finish


def dataset_options(
    config: PipelineConfig, input_context: tf.distribute.InputContext | None,
) -> tf.data.Options:
    """Options of a pipeline's dataset; a dataset that wraps pipelines needs them too."""
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = config.deterministic
    if input_context is not None:
        # Sharded by _records; tf.distribute must not shard a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _with_seeds(
    dataset: tf.data.Dataset, seed: int | tf.Tensor | None, salt: int
) -> tf.data.Dataset:
    """Pair each element with a stateless seed ``[2]``: reproducible for a seed, new each epoch."""
    import tensorflow as tf

    stream_seed = None if seed is None else tf.cast(seed, tf.int64) * 1000 + salt
    seeds = tf.data.Dataset.random(seed=stream_seed, rerandomize_each_iteration=True)
    seeds = seeds.map(lambda value: tf.stack([value, tf.constant(salt, tf.int64)]))
    return tf.data.Dataset.zip(dataset, seeds)


def _keyed_seeds(dataset: tf.data.Dataset, seed: int, salt: int) -> tf.data.Dataset:
    """Pair each utterance with a stateless seed ``[2]`` drawn from ``seed`` and its id: the
    same whichever service worker makes it, and in whatever order; new each epoch (the seed is
    ``seed + epoch``)."""
    import tensorflow as tf

    stream = tf.constant(seed * 1000 + salt, tf.int64)

    def pair(element: Element) -> tuple[Element, tf.Tensor]:
        key = tf.strings.to_hash_bucket_fast(element["id"], 2**62)
        return element, tf.stack([key, stream])

    return dataset.map(pair)


def _python_encoder(labels: Labels) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """``encode`` for labels that only Python can encode (``labels.encode``); an error names
    the utterance."""
    import numpy as np
    import tensorflow as tf

    def encode_py(transcript: bytes, utterance_id: bytes) -> np.ndarray:
        return np.asarray(labels.encode(transcript.decode("utf-8"), utterance_id.decode()),
                          dtype=np.int32)

    def encode(transcript: tf.Tensor, utterance_id: tf.Tensor) -> tf.Tensor:
        out = tf.numpy_function(encode_py, [transcript, utterance_id], tf.int32, stateful=False)
        out.set_shape([None])
        return out

    return encode


def _cache_name(
    split: str,
    files: Sequence[str],
    extractor: FeatureExtractor,
    feature_config: FeatureConfig,
    labels: Labels,
    config: PipelineConfig,
    pipelines: int,
    index: int,
) -> str:
    """A cache file name that changes with everything the cached values depend on, so that a
    cache written from other data is never read: the split's shard files (each one's resolved
    path, size and modification time: another dataset, or the same one imported again), the
    features, the labels, whether the audio is cached before augmentation, and this input
    pipeline's share of the files (``index`` of ``pipelines``: one worker's cache is not
    another's half)."""
    identity = labels.symbols if isinstance(labels, Alphabet) else labels.fingerprint()
    shards = []
    for name in files:
        shards.append(_identity(location(name)))
    key = repr((extractor.name, feature_config, identity, config.audio_augment, shards,
                pipelines))
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return f"{split}-{extractor.name}-{digest}-{index}"


def _identity(shard: Location) -> tuple[str, int, int]:
    """A shard file's resolved path or URL, size and modification time (nanoseconds)."""
    if isinstance(shard, StoragePath):
        status = shard.stat()
        return str(shard), int(status.length), int(status.mtime_nsec)
    status = shard.stat()
    return str(shard.resolve()), status.st_size, status.st_mtime_ns


def _cache(dataset: tf.data.Dataset, cache: str, name: str) -> tf.data.Dataset:
    if cache == "none":
        return dataset
    if cache == "memory":
        return dataset.cache()
    folder = Path(cache)
    folder.mkdir(parents=True, exist_ok=True)
    return dataset.cache(str(folder / name))


def _batch(
    dataset: tf.data.Dataset, edges: Sequence[int], batch_sizes: Sequence[int], blank: int
) -> tf.data.Dataset:
    import tensorflow as tf

    padding_values = {
        "id": tf.constant("", tf.string),
        "transcript": tf.constant("", tf.string),
        "features": tf.constant(0.0, tf.float32),
        "feature_length": tf.constant(0, tf.int32),
        "num_samples": tf.constant(0, tf.int32),
        "labels": tf.constant(blank, tf.int32),
        "label_length": tf.constant(0, tf.int32),
    }
    if not edges:
        return dataset.padded_batch(batch_sizes[0], padding_values=padding_values)
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda element: element["num_samples"],
        bucket_boundaries=list(edges),
        bucket_batch_sizes=list(batch_sizes),
        padding_values=padding_values,
        drop_remainder=False,
    )


# -- inspection ---------------------------------------------------------------------------------


def as_tuple(batch: Element) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(features, feature_lengths, labels, label_lengths)`` of a batch dict."""
    return tuple(batch[key] for key in BATCH_KEYS)  # type: ignore[return-value]


def padding_fraction(dataset: tf.data.Dataset, max_batches: int | None = None) -> float:
    """Share of the feature frames in ``dataset``'s batches that are padding (one pass)."""
    real = total = 0
    for number, batch in enumerate(dataset.as_numpy_iterator()):
        if max_batches is not None and number >= max_batches:
            break
        lengths = batch["feature_lengths"]
        real += int(lengths.sum())
        total += int(lengths.shape[0] * batch["features"].shape[1])
    return 1.0 - real / total if total else 0.0
