"""TFRecord shards: the training format of an imported dataset.

Each split is written as ``shards/<split>-NNNNN-of-MMMMM.tfrecord``. Every record is a
``tf.train.Example`` with these features:

==============  =======  =========================================================
``id``          bytes    utterance id (unique in the dataset)
``audio``       bytes    16 kHz mono signed 16-bit little-endian PCM, no header
``sample_rate`` int64    always 16000 (stored so readers can check)
``num_samples`` int64    length of ``audio`` in samples
``transcript``  bytes    normalised UTF-8 transcript, in the dataset's alphabet
``speaker``     bytes    speaker id ("" when the corpus has none)
==============  =======  =========================================================

Records are serialised deterministically, so the same utterances give byte-identical shards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from asrkit.core.errors import AsrkitError
from asrkit.core.files import replace_durably
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.storage import Location, location

if TYPE_CHECKING:
    import tensorflow as tf

SHARD_DIR = "shards"


@dataclass(frozen=True)
class ShardRecord:
    id: str
    audio: bytes
    transcript: str
    speaker: str = ""

    @property
    def num_samples(self) -> int:
        return len(self.audio) // 2


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def shard_paths(dataset: str | Location, split: str) -> list[Location]:
    """The shard files of ``split`` in a dataset folder, in order (``test-00000-of-00004``, never
    another split's ``test-unseen-00000-of-00004``)."""
    return sorted(p for p in (location(dataset) / SHARD_DIR).glob(f"{split}-*-of-*.tfrecord")
                  if is_shard_of(p.name, split))


def shard_splits(dataset: str | Location) -> list[str]:
    """The splits a dataset folder has shards of, sorted."""
    found = (re.fullmatch(r"(.+)-\d+-of-\d+\.tfrecord", p.name)
             for p in (location(dataset) / SHARD_DIR).glob("*.tfrecord"))
    return sorted({m.group(1) for m in found if m})


def is_shard_of(name: str, split: str, partial: bool = False) -> bool:
    """Whether file ``name`` is a shard of ``split`` (with ``partial``, or one being written)."""
    tail = r"(\..*)?" if partial else ""
    return re.fullmatch(rf"{re.escape(split)}-\d+-of-\d+\.tfrecord{tail}", name) is not None


def serialize(record: ShardRecord) -> bytes:
    import tensorflow as tf

    def _bytes(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def _int(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "id": _bytes(record.id.encode()),
                "audio": _bytes(record.audio),
                "sample_rate": _int(SAMPLE_RATE),
                "num_samples": _int(record.num_samples),
                "transcript": _bytes(record.transcript.encode()),
                "speaker": _bytes(record.speaker.encode()),
            }
        )
    )
    return example.SerializeToString(deterministic=True)


def write_shard(path: str | Location, records: Iterable[ShardRecord]) -> int:
    """Write one shard atomically (a temporary file renamed into place); return the count."""
    import tensorflow as tf

    target = location(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    count = 0
    with tf.io.TFRecordWriter(str(partial)) as writer:
        for record in records:
            writer.write(serialize(record))
            count += 1
    replace_durably(partial, target)  # a rerun trusts a shard by its name
    return count


def feature_spec() -> dict[str, tf.io.FixedLenFeature]:
    """The ``tf.io.parse_single_example`` spec of a shard record."""
    import tensorflow as tf

    return {
        "id": tf.io.FixedLenFeature([], tf.string),
        "audio": tf.io.FixedLenFeature([], tf.string),
        "sample_rate": tf.io.FixedLenFeature([], tf.int64),
        "num_samples": tf.io.FixedLenFeature([], tf.int64),
        "transcript": tf.io.FixedLenFeature([], tf.string),
        "speaker": tf.io.FixedLenFeature([], tf.string),
    }


def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Parse one record into tensors; ``audio`` becomes float32 samples in [-1, 1)."""
    import tensorflow as tf

    parsed = tf.io.parse_single_example(serialized, feature_spec())
    pcm = tf.io.decode_raw(parsed["audio"], tf.int16, little_endian=True)
    parsed["audio"] = tf.cast(pcm, tf.float32) / 32768.0
    return parsed


def read_records(path: str | Path) -> list[ShardRecord]:
    """All records of one shard as Python objects (for tests and inspection, not training)."""
    import tensorflow as tf

    records = []
    for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
        example = tf.train.Example.FromString(raw)
        feature = example.features.feature
        records.append(
            ShardRecord(
                id=feature["id"].bytes_list.value[0].decode(),
                audio=feature["audio"].bytes_list.value[0],
                transcript=feature["transcript"].bytes_list.value[0].decode(),
                speaker=feature["speaker"].bytes_list.value[0].decode(),
            )
        )
    return records


def find_damaged_shard(dataset: str | Location) -> tuple[Location, str] | None:
    """The first shard of ``dataset`` that cannot be read to its end (cut short, bytes
    changed), with the reader's reason; None when every shard reads. TensorFlow's own error
    for a damaged record does not name the file: this is run after one, to name it."""
    import re

    import tensorflow as tf

    paths: list[Location] = sorted((location(dataset) / SHARD_DIR).glob("*.tfrecord"), key=str)
    for path in paths:
        try:
            tf.data.TFRecordDataset(str(path)).reduce(0, lambda count, _: count + 1)
        except tf.errors.DataLossError as error:
            found = re.search(r"(truncated|corrupted) record at \d+", error.message)
            return path, found.group(0) if found else "unreadable"
    return None


def damaged_dataset_error(dataset: str | Location, then: str = "") -> AsrkitError | None:
    """The one-line error for a dataset with a damaged shard (``then``: what to do after
    importing again), or None if no shard is damaged."""
    found = find_damaged_shard(dataset)
    if found is None:
        return None
    path, reason = found
    return AsrkitError(f"{path} is damaged ({reason}); import the dataset again with --force"
                       + (f", then {then}" if then else ""))
