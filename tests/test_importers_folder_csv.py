"""``asrkit import folder PATH`` and ``asrkit import csv FILE.csv ...`` on real recordings.

The folders mix formats and rates as users' recordings do: 16 kHz FLAC and WAV, 22.05 kHz
LJSpeech WAV, 44.1 kHz stereo WAV; the known answers are the published transcripts and lengths
(within 1 ms after resampling; the exact samples for lossless 16 kHz sources).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import soundfile

from asrkit_importers.deepspeech_csv import split_from_name
from tests import corpora
from tests.corpora import SPEECH, Expected

RATE = 16000


def _resampled(path: Path) -> int:
    """Samples at 16 kHz of a recording at another rate (sox rounds to the nearest)."""
    info = soundfile.info(str(path))
    return round(info.frames * RATE / info.samplerate)


def _expected(split: str, utterance: str, path: Path, transcript: str,
              speaker: str = "") -> Expected:
    data, rate = soundfile.read(str(path), dtype="int16")
    if rate == RATE and data.ndim == 1:
        return Expected(split, utterance, transcript, len(data), speaker, data)
    return Expected(split, utterance, transcript, _resampled(path), speaker)


LDC = "she had your dark suit in greasy wash water all year"


@pytest.fixture
def recordings(tmp_path: Path) -> tuple[Path, list[Expected]]:
    """A user's folder: transcripts beside the audio, speakers in folders, a dev/ folder."""
    root = tmp_path / "my-recordings"
    root.mkdir()
    (root / "README.txt").write_text("Recordings made for the test.\n")
    shutil.copyfile(SPEECH / "ldc93s1" / "LDC93S1.flac", root / "LDC93S1.flac")
    (root / "LDC93S1.txt").write_text("She had your dark suit in greasy wash water all year.\n")
    shutil.copyfile(SPEECH / "ljspeech" / "LJ002-0020.wav", root / "LJ002-0020.wav")
    (root / "LJ002-0020.txt").write_text("in eighteen\nthirteen\n")  # lines are joined
    shutil.copyfile(SPEECH / "ldc93s1" / "LDC93S1_44k_stereo.wav", root / "stereo.wav")
    (root / "stereo.txt").write_text("She had your dark suit in greasy wash water all year.")
    clips = corpora.speechbrain_clips()
    expected = [
        _expected("train", "LDC93S1", SPEECH / "ldc93s1" / "LDC93S1.wav", LDC),
        _expected("train", "LJ002-0020", root / "LJ002-0020.wav", "in eighteen thirteen"),
        _expected("train", "stereo", root / "stereo.wav", LDC),
    ]
    for name in ("spk1_snt1", "spk1_snt2", "spk1_snt3", "spk1_snt6"):
        wav = SPEECH / "speechbrain" / f"{name}.wav"
        shutil.copyfile(wav, _mkdir(root / "spk1") / f"{name}.wav")
        if name in clips:  # spk1_snt6 has no transcript: skipped, and reported
            (root / "spk1" / f"{name}.txt").write_text(clips[name].transcript)
            expected.append(_expected("train", f"spk1_{name}", wav,
                                      clips[name].transcript.lower(), "spk1"))
    for name in ("spk2_snt1", "spk2_snt2"):
        wav = SPEECH / "speechbrain" / f"{name}.wav"
        shutil.copyfile(wav, _mkdir(root / "dev" / "spk2") / f"{name}.wav")
        (root / "dev" / "spk2" / f"{name}.txt").write_text(clips[name].transcript)
        expected.append(_expected("dev", f"spk2_{name}", wav, clips[name].transcript.lower(),
                                  "spk2"))
    return root, expected


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_folder_with_transcripts_beside(asrkit_cli, asrkit_home, recordings):
    root, expected = recordings
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    report = corpora.check_dataset(asrkit_home / "datasets" / "my-recordings", expected)
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {"train": 6, "dev": 2}
    assert report["skipped"] == {"empty transcript": {"count": 1,
                                                      "utterances": ["train/spk1_spk1_snt6"]}}


def test_folder_split_option_and_name(asrkit_cli, asrkit_home, recordings):
    root, expected = recordings
    result = asrkit_cli(corpora.import_args("folder", root, "--split", "test", "--name",
                                            "mine"))
    assert result.exit_code == 0, result.stderr
    everything = [Expected("test", e.id if e.split == "train" else f"dev_{e.id}", e.transcript,
                           e.num_samples, e.speaker, e.samples) for e in expected]
    corpora.check_dataset(asrkit_home / "datasets" / "mine", everything)


def test_folder_with_a_listing(asrkit_cli, asrkit_home, tmp_path):
    """A TSV naming file, transcript, split and speaker; paths relative or absolute."""
    root = _mkdir(tmp_path / "listed")
    clips = corpora.speechbrain_clips()
    rows, expected = [], []
    for name, split in (("spk1_snt4", "train"), ("spk1_snt5", "train"), ("spk2_snt3", "dev"),
                        ("spk2_snt4", "test")):
        wav = SPEECH / "speechbrain" / f"{name}.wav"
        shutil.copyfile(wav, _mkdir(root / "audio") / f"{name}.wav")
        speaker = name.split("_")[0]
        path = f"audio/{name}.wav" if split != "dev" else str(root / "audio" / f"{name}.wav")
        rows.append(f"{path}\t{clips[name].transcript}\t{split}\t{speaker}")
        expected.append(_expected(split, f"audio_{name}", wav, clips[name].transcript.lower(),
                                  speaker))
    (root / "metadata.tsv").write_text("path\tsentence\tsplit\tspeaker\n" + "\n".join(rows))
    (root / "audio" / "notes.txt").write_text("not a transcript of anything\n")
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    corpora.check_dataset(asrkit_home / "datasets" / "listed", expected)


def test_folder_without_transcripts_is_an_error(asrkit_cli, asrkit_home, tmp_path):
    root = _mkdir(tmp_path / "empty")
    (root / "README.txt").write_text("nothing here\n")
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 1
    assert "holds no audio with a transcript" in result.stderr


@pytest.fixture
def manifests(tmp_path: Path) -> tuple[Path, list[Expected]]:
    """DeepSpeech CSVs: relative paths (train.csv), absolute paths (dev.csv), a file that is
    missing (test.csv)."""
    corpus = _mkdir(tmp_path / "ds-corpus")
    ls = corpora.librispeech_clips()
    train = ["2830-3980-0043", "4507-16021-0012", "8455-210777-0068"]
    for utterance in train:
        shutil.copyfile(ls[utterance].path, _mkdir(corpus / "clips") / ls[utterance].path.name)
    shutil.copyfile(SPEECH / "ldc93s1" / "LDC93S1.wav", _mkdir(corpus / "dev") / "LDC93S1.wav")
    shutil.copyfile(SPEECH / "ljspeech" / "LJ002-0035.wav", corpus / "dev" / "LJ002-0035.wav")

    def write(name: str, rows: list[tuple[str, str]]) -> None:
        with open(corpus / name, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["wav_filename", "wav_filesize", "transcript"])
            for path, text in rows:
                full = corpus / path
                writer.writerow([path, full.stat().st_size if full.exists() else 0, text])

    write("train.csv", [(f"clips/{u}.wav", ls[u].transcript.lower()) for u in train])
    write("dev.csv", [(str(corpus / "dev" / "LDC93S1.wav"), LDC),
                      (str(corpus / "dev" / "LJ002-0035.wav"), "eight the press yard")])
    write("test.csv", [("clips/gone.wav", "this file is missing")])
    expected = [_expected("train", u, ls[u].path, ls[u].transcript.lower(), "") for u in train]
    expected += [_expected("dev", "LDC93S1", SPEECH / "ldc93s1" / "LDC93S1.wav", LDC),
                 _expected("dev", "LJ002-0035", SPEECH / "ljspeech" / "LJ002-0035.wav",
                           "eight the press yard")]
    return corpus, expected


def test_deepspeech_csvs(asrkit_cli, asrkit_home, manifests):
    corpus, expected = manifests
    result = asrkit_cli(corpora.import_args("csv", corpus / "train.csv", corpus / "dev.csv",
                                            corpus / "test.csv", "--json"))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["name"] == "ds-corpus"
    report = corpora.check_dataset(asrkit_home / "datasets" / "ds-corpus", expected)
    assert report["skipped"] == {"audio file missing": {"count": 1, "utterances": ["test/gone"]}}


def test_deepspeech_csvs_into_one_split(asrkit_cli, asrkit_home, manifests):
    corpus, expected = manifests
    result = asrkit_cli(corpora.import_args("csv", corpus / "train.csv", corpus / "dev.csv",
                                            "--split", "train", "--name", "all-train"))
    assert result.exit_code == 0, result.stderr
    corpora.check_dataset(asrkit_home / "datasets" / "all-train",
                          [Expected("train", e.id, e.transcript, e.num_samples, e.speaker,
                                    e.samples) for e in expected])


def test_csv_and_audio_sharing_no_folder_is_refused(asrkit_cli, asrkit_home, tmp_path):
    manifest = tmp_path / "train.csv"
    manifest.write_text("wav_filename,wav_filesize,transcript\n"
                        "/nonexistent-asrkit-root/a.wav,10,hello\n")
    result = asrkit_cli(corpora.import_args("csv", manifest))
    assert result.exit_code == 1
    assert "share no folder below the filesystem's root" in result.stderr


def test_split_from_csv_names():
    assert split_from_name("train") == "train"
    assert split_from_name("librivox-train-clean-100") == "train"
    assert split_from_name("ted-dev") == "dev"
    assert split_from_name("cv_validation") == "dev"
    assert split_from_name("test") == "test"
    assert split_from_name("ldc93s1") == "ldc93s1"


# -- a folder without splits is split by itself ------------------------------------------------

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"


def flat_folder(root: Path, names: list[str]) -> Path:
    """Recordings with transcripts beside them (``spkN/x`` names make speaker folders)."""
    for name in names:
        wav = root / f"{name}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CLIP, wav)
        wav.with_suffix(".txt").write_text(LDC)
    return root


def splits_of(dataset: Path) -> dict[str, set[str]]:
    return {split: {row["wav_filename"].rsplit("/", 1)[-1][:-4]
                    for row in csv.DictReader((dataset / f"{split}.csv").open())}
            for split in ("train", "dev", "test") if (dataset / f"{split}.csv").exists()}


def test_a_folder_without_splits_holds_out_dev_and_test(asrkit_cli, asrkit_home, tmp_path):
    """20 recordings and no option: 16 train, 2 dev, 2 test (what a run and `asrkit evaluate`
    need); adding a recording moves none of the others, and another seed chooses others."""
    root = flat_folder(tmp_path / "mine", [f"r{i:02d}" for i in range(20)])
    assert asrkit_cli(corpora.import_args("folder", root)).exit_code == 0
    first = splits_of(asrkit_home / "datasets" / "mine")
    assert {s: len(ids) for s, ids in first.items()} == {"train": 16, "dev": 2, "test": 2}

    flat_folder(root, ["r20"])
    assert asrkit_cli(corpora.import_args("folder", root, "--force")).exit_code == 0
    again = splits_of(asrkit_home / "datasets" / "mine")
    moved = {i for s in first for i in first[s] if i not in again[s]}
    assert moved == set()

    other = asrkit_cli(corpora.import_args("folder", root, "--split-seed", "7", "--name", "m7"))
    assert other.exit_code == 0
    assert splits_of(asrkit_home / "datasets" / "m7")["test"] != again["test"]


def test_speakers_are_held_out_whole(asrkit_cli, asrkit_home, tmp_path):
    names = [f"spk{s}/u{i}" for s in range(5) for i in range(4)]
    root = flat_folder(tmp_path / "voices", names)
    assert asrkit_cli(corpora.import_args("folder", root)).exit_code == 0
    dataset = asrkit_home / "datasets" / "voices"
    speakers = {split: {row["speaker"] for row in csv.DictReader((dataset / f"{split}.csv")
                                                                 .open())}
                for split in ("train", "dev", "test")}
    assert all(speakers.values())
    assert not (speakers["train"] & speakers["dev"] or speakers["train"] & speakers["test"]
                or speakers["dev"] & speakers["test"])


@pytest.mark.parametrize("args", [[], ["--dev-fraction", "0", "--test-fraction", "0"]],
                         ids=["too-few", "fractions-0"])
def test_small_folders_and_zero_fractions_stay_in_train(asrkit_cli, asrkit_home, tmp_path,
                                                        args):
    count = 9 if not args else 12
    root = flat_folder(tmp_path / "few", [f"r{i}" for i in range(count)])
    assert asrkit_cli(corpora.import_args("folder", root, *args)).exit_code == 0
    assert {s: len(v) for s, v in splits_of(asrkit_home / "datasets" / "few").items()} == {
        "train": count}
