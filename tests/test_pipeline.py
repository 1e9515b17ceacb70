"""The tf.data input pipeline, on shards of real speech, and the augmentations it applies."""

from __future__ import annotations

import csv
import wave
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.core.text import Alphabet, normalize
from asrkit.dataset.shards import SAMPLE_RATE, ShardRecord, shard_name, write_shard
from asrkit.features import MFCC, LogMel, MFCCConfig
from asrkit.pipeline import augment
from asrkit.pipeline.batches import (
    as_tuple,
    auto_boundaries,
    bucket_edges,
    make_dataset,
    padding_fraction,
    resolve_extractor,
    utterance_samples,
)

SPEECH = Path(__file__).parent / "fixtures" / "speech"
ALPHABET = Alphabet()
GAP = np.zeros(SAMPLE_RATE // 5, np.int16)  # 0.2 s of silence between joined clips


def read_pcm(path: Path) -> np.ndarray:
    with wave.open(str(path)) as handle:
        assert handle.getframerate() == SAMPLE_RATE and handle.getnchannels() == 1
        return np.frombuffer(handle.readframes(handle.getnframes()), "<i2")


def real_clips() -> list[tuple[str, np.ndarray, str]]:
    """(id, int16 samples, normalised transcript) of every transcribed 16 kHz clip."""
    texts: dict[Path, str] = {}
    for line in (SPEECH / "librispeech" / "transcripts.txt").read_text().splitlines():
        key, text = line.split(" ", 1)
        texts[SPEECH / "librispeech" / f"{key}.wav"] = text
    rows = (SPEECH / "speechbrain" / "TRANSCRIPTS.tsv").read_text().splitlines()[1:]
    for row in rows:
        key, _, _, text = row.split("\t")
        if text != "(no transcript)":
            texts[SPEECH / "speechbrain" / f"{key}.wav"] = text
    home = "we must find a new home in the stars"
    texts[SPEECH / "misc" / "new-home-in-the-stars-16k.wav"] = home
    texts[SPEECH / "misc" / "arctic_a0024.wav"] = (
        "it was my reports from the north which chiefly induced people to buy"
    )
    ldc = (SPEECH / "ldc93s1" / "LDC93S1.txt").read_text().split(" ", 2)[2]
    texts[SPEECH / "ldc93s1" / "LDC93S1.wav"] = ldc
    return [(path.stem, read_pcm(path), normalize(text)) for path, text in sorted(texts.items())]


@dataclass(frozen=True)
class Corpus:
    path: Path
    audio: dict[str, np.ndarray]
    transcripts: dict[str, str]

    @property
    def ids(self) -> list[str]:
        return sorted(self.audio)


def write_dataset(folder: Path, utterances: list[tuple[str, np.ndarray, str]], shards: int) -> None:
    """Shards and a DeepSpeech-format CSV, as an importer writes them."""
    records = [ShardRecord(uid, pcm.astype("<i2").tobytes(), text) for uid, pcm, text in utterances]
    for index in range(shards):
        write_shard(folder / "shards" / shard_name("train", index, shards), records[index::shards])
    with (folder / "train.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["wav_filename", "wav_filesize", "transcript"])
        for uid, pcm, text in utterances:
            writer.writerow([f"wav/{uid}.wav", 44 + 2 * len(pcm), text])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """48 utterances of real speech from 1.8 to about 14 s: the 17 transcribed clips and 31
    recordings made by joining 2-4 of them (with their transcripts joined), in 3 shards."""
    clips = real_clips()
    assert len(clips) == 17
    rng = np.random.default_rng(7)
    utterances = list(clips)
    for number in range(31):
        chosen = rng.choice(len(clips), size=int(rng.integers(2, 5)), replace=False)
        pieces = [clips[i] for i in chosen]
        pcm = np.concatenate([p for _, clip, _ in pieces for p in (clip, GAP)][:-1])
        utterances.append((f"joined-{number:02d}", pcm, " ".join(t for _, _, t in pieces)))
    order = rng.permutation(len(utterances))  # shards hold lengths in no particular order
    utterances = [utterances[i] for i in order]
    folder = tmp_path_factory.mktemp("corpus")
    write_dataset(folder, utterances, shards=3)
    return Corpus(
        folder, {u: pcm for u, pcm, _ in utterances}, {u: text for u, _, text in utterances}
    )


TRAIN = PipelineConfig(batch_size=4, shuffle_buffer=64, seed=11)


def epoch_ids(dataset: tf.data.Dataset) -> list[str]:
    return [uid.decode() for batch in dataset.as_numpy_iterator() for uid in batch["ids"]]


def test_an_epoch_yields_every_utterance_exactly_once(corpus: Corpus) -> None:
    config = replace(TRAIN, with_text=True)
    dataset = make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=config)
    first, second = epoch_ids(dataset), epoch_ids(dataset)
    assert sorted(first) == corpus.ids  # exactly once: nothing lost, nothing repeated
    assert sorted(second) == corpus.ids
    assert first != second  # reshuffled each epoch


def test_batches_hold_features_labels_and_lengths(corpus: Corpus) -> None:
    config = TRAIN.for_evaluation()
    dataset = make_dataset(corpus.path, "train", ALPHABET, "mfcc", config=config)
    assert dataset.element_spec["features"].shape.as_list() == [None, None, 26]
    extractor, seen = MFCC(), 0
    for batch in dataset.as_numpy_iterator():
        features, feature_lengths, labels, label_lengths = as_tuple(batch)
        assert features.dtype == np.float32 and labels.dtype == np.int32
        assert feature_lengths.dtype == np.int32 and label_lengths.dtype == np.int32
        assert features.shape[0] <= config.batch_size
        for row, uid in enumerate(batch["ids"].astype(str)):
            pcm = corpus.audio[uid]
            alone = extractor.extract((pcm / 32768.0).astype(np.float32), MFCCConfig()).numpy()
            assert feature_lengths[row] == len(alone)
            np.testing.assert_allclose(features[row, : len(alone)], alone, atol=1e-4)
            assert not features[row, len(alone) :].any()  # zero padding
            text = corpus.transcripts[uid]
            assert batch["transcripts"][row].decode() == text
            assert label_lengths[row] == len(text)
            assert ALPHABET.decode(labels[row, : label_lengths[row]]) == text
            assert (labels[row, label_lengths[row] :] == ALPHABET.blank).all()
            seen += 1
    assert seen == len(corpus.ids)


def test_bucketing_lowers_the_padding_fraction(corpus: Corpus) -> None:
    plain = make_dataset(
        corpus.path, "train", ALPHABET, MFCC(), config=replace(TRAIN, bucketing=False)
    )
    bucketed = make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=TRAIN)
    without, with_buckets = padding_fraction(plain), padding_fraction(bucketed)
    print(f"padding fraction: {without:.3f} without bucketing, {with_buckets:.3f} with")
    assert with_buckets < 0.5 * without
    assert with_buckets < 0.15


def test_automatic_bucket_edges_come_from_the_csv_or_the_shards(
    corpus: Corpus, tmp_path: Path
) -> None:
    lengths = sorted(len(pcm) for pcm in corpus.audio.values())
    assert sorted(utterance_samples(corpus.path, "train")) == lengths
    edges = bucket_edges(corpus.path, "train", TRAIN)
    assert edges == sorted(edges) and len(edges) == 11  # 48 // 4 = 12 buckets at most
    # Without a CSV the lengths are read from the shards.
    bare = tmp_path / "bare"
    (bare / "shards").mkdir(parents=True)
    for shard in (corpus.path / "shards").iterdir():
        (bare / "shards" / shard.name).write_bytes(shard.read_bytes())
    assert sorted(utterance_samples(bare, "train")) == lengths
    # ... also when the pipeline is built while a graph is traced.
    assert sorted(tf.function(lambda: utterance_samples(bare, "train"))()) == lengths
    # asrkit's own manifests add a duration column (seconds, 4 decimals), preferred when there.
    with (bare / "train.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["wav_filename", "wav_filesize", "transcript", "duration", "speaker"])
        for uid, pcm in corpus.audio.items():
            writer.writerow([f"{uid}.wav", "", "x", f"{len(pcm) / SAMPLE_RATE:.4f}", ""])
    from_durations = sorted(utterance_samples(bare, "train"))
    assert np.abs(np.array(from_durations) - lengths).max() <= 1
    assert auto_boundaries([16000] * 3, num_buckets=8, batch_size=4) == []
    given = replace(TRAIN, bucket_boundaries=(2.5, 5.0))
    assert bucket_edges(corpus.path, "train", given) == [40000, 80000]


def test_same_seed_same_batches_when_deterministic(corpus: Corpus) -> None:
    config = replace(TRAIN, deterministic=True, with_text=True)

    def ids(seed: int) -> list[str]:
        dataset = make_dataset(
            corpus.path, "train", ALPHABET, MFCC(), config=replace(config, seed=seed)
        )
        return epoch_ids(dataset)

    assert ids(3) == ids(3)
    assert ids(3) != ids(4)
    evaluation = make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=TRAIN.for_evaluation())
    assert epoch_ids(evaluation) == epoch_ids(evaluation)


@pytest.mark.parametrize("shards", [3, 1], ids=["by-file", "by-record"])
def test_workers_read_disjoint_shares(corpus: Corpus, tmp_path: Path, shards: int) -> None:
    path = corpus.path
    if shards == 1:  # fewer files than workers: the records are split instead
        path = tmp_path / "one"
        write_dataset(path, [(u, corpus.audio[u], corpus.transcripts[u]) for u in corpus.ids], 1)
    config = replace(TRAIN, with_text=True)
    shares = []
    for worker in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2
        )
        dataset = make_dataset(
            path, "train", ALPHABET, MFCC(), config=config, input_context=context
        )
        shares.append(epoch_ids(dataset))
    assert all(shares)
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == corpus.ids


def test_feeds_a_distribution_strategy(corpus: Corpus) -> None:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])

    def build(context: tf.distribute.InputContext) -> tf.data.Dataset:
        config = replace(TRAIN, batch_size=context.get_per_replica_batch_size(8))
        return make_dataset(
            corpus.path, "train", ALPHABET, MFCC(), config=config, input_context=context
        )

    batches = strategy.distribute_datasets_from_function(build)
    count = 0
    for batch in batches:
        lengths = strategy.experimental_local_results(batch["feature_lengths"])
        count += sum(int(tf.size(part)) for part in lengths)
    assert count == len(corpus.ids)


def test_cache_gives_the_same_batches(corpus: Corpus, tmp_path: Path) -> None:
    config = replace(TRAIN.for_evaluation(), cache=str(tmp_path / "cache"))
    dataset = make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=config)
    first = list(dataset.as_numpy_iterator())
    assert any((tmp_path / "cache").iterdir())
    second = list(dataset.as_numpy_iterator())
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a["features"], b["features"])
        np.testing.assert_array_equal(a["ids"], b["ids"])
    memory = make_dataset(
        corpus.path,
        "train",
        ALPHABET,
        MFCC(),
        config=replace(TRAIN, cache="memory", with_text=True),
    )
    assert sorted(epoch_ids(memory)) == sorted(epoch_ids(memory)) == corpus.ids


def test_a_cache_is_never_read_for_other_data_or_another_share(corpus: Corpus,
                                                              tmp_path: Path) -> None:
    """One cache folder for two datasets (the same split, features and labels), and for one
    and two workers: each reads its own utterances, never the other's cached features."""
    cache = tmp_path / "cache"
    config = replace(TRAIN.for_evaluation(), cache=str(cache))
    other = tmp_path / "other"
    few = corpus.ids[:3]
    write_dataset(other, [(u, corpus.audio[u], corpus.transcripts[u]) for u in few], 1)
    assert sorted(epoch_ids(make_dataset(corpus.path, "train", ALPHABET, MFCC(),
                                         config=config))) == corpus.ids
    assert sorted(epoch_ids(make_dataset(other, "train", ALPHABET, MFCC(),
                                         config=config))) == sorted(few)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    half = epoch_ids(make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=config,
                                  input_context=context))
    assert 0 < len(half) < len(corpus.ids)
    assert len({path.name.split(".")[0] for path in cache.iterdir()}) == 3


def test_context_and_logmel_options(corpus: Corpus) -> None:
    with_context = make_dataset(
        corpus.path, "train", ALPHABET, MFCC(), config=replace(TRAIN, context=9)
    )
    batch = next(iter(with_context))
    assert batch["features"].shape[-1] == 494
    logmel = make_dataset(corpus.path, "train", ALPHABET, "logmel", config=TRAIN)
    assert next(iter(logmel))["features"].shape[-1] == 80
    assert isinstance(resolve_extractor("logmel"), LogMel)


def test_unknown_characters_stop_the_pipeline_naming_them(tmp_path: Path) -> None:
    pcm = read_pcm(SPEECH / "ldc93s1" / "LDC93S1.wav")
    write_dataset(tmp_path, [("ok-1", pcm, "fine"), ("bad-2", pcm, "room 101")], 1)
    dataset = make_dataset(tmp_path, "train", ALPHABET, MFCC(), config=TRAIN.for_evaluation())
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(dataset.as_numpy_iterator())
    message = str(error.value)
    assert "characters not in the alphabet" in message
    assert "101" in message and "bad-2" in message


def test_missing_split_is_explained(corpus: Corpus) -> None:
    with pytest.raises(PipelineError, match="no shards of split 'dev'"):
        make_dataset(corpus.path, "dev", ALPHABET, MFCC())
    with pytest.raises(PipelineError, match="batch_size"):
        PipelineConfig(batch_size=0)
    with pytest.raises(PipelineError, match="bucket_boundaries"):
        PipelineConfig(bucket_boundaries=(5.0, 2.0))


# -- augmentation -------------------------------------------------------------------------------


def test_spec_augment_masks_are_seeded_and_bounded() -> None:
    features = tf.random.stateless_normal([300, 26], seed=[1, 2]) + 5.0
    options = dict(freq_masks=2, freq_mask_width=8, time_masks=2, time_mask_width=30)
    a = augment.spec_augment(features, tf.constant([4, 5]), **options).numpy()
    b = augment.spec_augment(features, tf.constant([4, 5]), **options).numpy()
    c = augment.spec_augment(features, tf.constant([4, 6]), **options).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    changed = a != features.numpy()
    mean = features.numpy().mean(axis=0)
    np.testing.assert_allclose(a[changed], np.broadcast_to(mean, a.shape)[changed], rtol=1e-6)
    masked_columns = changed.all(axis=0).sum()
    masked_rows = changed.all(axis=1).sum()
    assert masked_columns <= 16 and masked_rows <= 60  # at most 2 masks of the widths
    untouched = augment.spec_augment(features, tf.constant([4, 5]), freq_masks=0, time_masks=0)
    assert untouched is features


def test_time_masks_respect_the_ratio() -> None:
    features = tf.ones([50, 4]) * tf.range(50, dtype=tf.float32)[:, tf.newaxis]
    for seed in range(20):
        out = augment.spec_augment(
            features,
            tf.constant([seed, 0]),
            freq_masks=0,
            time_masks=1,
            time_mask_width=100,
            time_mask_max_ratio=0.1,
        ).numpy()
        assert (out != features.numpy()).any(axis=1).sum() <= 5


def test_resample_changes_speed_and_keeps_pitch_ratio() -> None:
    t = np.arange(16000) / SAMPLE_RATE
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    faster = augment.resample(tf.constant(tone), 1.1).numpy()
    assert len(faster) == round(16000 / 1.1)
    spectrum = np.abs(np.fft.rfft(faster * np.hanning(len(faster))))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / len(faster)
    assert abs(peak_hz - 1100) < 5
    slower = augment.resample(tf.constant(tone), 0.9).numpy()
    assert len(slower) == round(16000 / 0.9)
    assert abs(np.sqrt(np.mean(slower[2000:-2000] ** 2)) - np.sqrt(0.5)) < 0.01  # same level


def test_speed_perturbation_draws_from_the_factors() -> None:
    audio = tf.random.stateless_uniform([8000], seed=[0, 1], minval=-0.5, maxval=0.5)
    lengths = {
        int(tf.size(augment.speed_perturb(audio, tf.constant([s, 9]), (0.9, 1.0, 1.1))))
        for s in range(30)
    }
    assert lengths == {round(8000 / 0.9), 8000, round(8000 / 1.1)}
    same = augment.speed_perturb(audio, tf.constant([3, 3]), (1.0,))
    np.testing.assert_array_equal(same.numpy(), audio.numpy())


def test_pipeline_augmentation_is_seeded_and_changes_features(corpus: Corpus) -> None:
    plain_config = replace(TRAIN.for_evaluation(), batch_size=48)
    augmented = replace(
        plain_config,
        freq_masks=2,
        freq_mask_width=6,
        time_masks=2,
        time_mask_width=20,
        speed_factors=(0.9, 1.1),
        pitch_semitones=(-2.0, 2.0),
        noise_snr_db=(10.0, 20.0),
    )

    def by_id(config: PipelineConfig) -> dict[str, tuple[np.ndarray, int]]:
        dataset = make_dataset(corpus.path, "train", ALPHABET, MFCC(), config=config)
        out = {}
        for batch in dataset.as_numpy_iterator():
            for row, uid in enumerate(batch["ids"].astype(str)):
                length = int(batch["feature_lengths"][row])
                out[uid] = (batch["features"][row, :length], length)
        return out

    plain, first, again = by_id(plain_config), by_id(augmented), by_id(augmented)
    assert sorted(first) == corpus.ids
    for uid in corpus.ids:
        np.testing.assert_array_equal(first[uid][0], again[uid][0])  # same seed, same result
        ratio = first[uid][1] / plain[uid][1]
        assert 0.88 < ratio < 0.93 or 1.08 < ratio < 1.13  # played at 1.1x or 0.9x (pitch
        # perturbation keeps the length)
    other_seed = by_id(replace(augmented, seed=99))
    assert any(other_seed[u][1] != first[u][1] for u in corpus.ids)


def test_a_split_never_reads_another_splits_shards(tmp_path) -> None:
    """``test`` and ``test-unseen`` live side by side: the first is not a prefix of the second."""
    from asrkit.dataset.shards import SHARD_DIR, shard_paths

    folder = tmp_path / SHARD_DIR
    folder.mkdir()
    names = ["test-00000-of-00002.tfrecord", "test-00001-of-00002.tfrecord",
             "test-unseen-00000-of-00001.tfrecord", "test-2-00000-of-00001.tfrecord"]
    for name in names:
        (folder / name).write_bytes(b"")
    assert [p.name for p in shard_paths(tmp_path, "test")] == names[:2]
    assert [p.name for p in shard_paths(tmp_path, "test-unseen")] == [names[2]]
    assert [p.name for p in shard_paths(tmp_path, "test-2")] == [names[3]]
    from asrkit.dataset.shards import is_shard_of

    # Re-sharding ``test`` removes only its own stale shards, never ``test-unseen``'s.
    assert is_shard_of("test-00003-of-00004.tfrecord.partial", "test", partial=True)
    assert not is_shard_of("test-unseen-00000-of-00001.tfrecord.partial", "test", partial=True)
    assert not is_shard_of("test-00003-of-00004.tfrecord.partial", "test")


def test_reading_split_lengths_leaves_csvs_field_limit_alone(tmp_path) -> None:
    import csv

    from asrkit.pipeline.batches import _csv_samples

    path = tmp_path / "train.csv"
    path.write_text("wav_filename,wav_filesize,transcript\na.wav,32044,\"" + "y" * 200_000 + "\"\n")
    before = csv.field_size_limit()
    assert _csv_samples(path) == [16000]
    assert csv.field_size_limit() == before
