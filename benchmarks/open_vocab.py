"""An open-vocabulary synthetic speech corpus, for measuring whether a model *generalises*.

A closed grammar (held-out sentences that only recombine training words) hides a model that
memorises words; this corpus cannot. It is built from real English text and three kinds of
held-out speech:

- **text**: sentences of the Debian ``fortunes`` collection (quotations and jokes, real English
  prose), normalised to the alphabet (a-z, space, apostrophe). Sentences with digits or symbols
  are dropped, so no number has to be verbalised.
- **held-out words**: a random tenth of the vocabulary is held out; training sentences contain
  none of it, and every test sentence has at least :data:`MIN_UNSEEN_WORDS` (15 %) of its words
  outside the training vocabulary (checked against the final training text, not assumed).
- **voices**: training speech is espeak-ng with six English dialects x five voice variants, at
  random speeds and pitches. ``test`` uses new sentences in those training voices,
  ``test-unseen`` the same sentences in voice variants never used in training (on all eight
  dialects, two of them never trained on), and ``test-flite`` the same sentences by a second
  synthesiser (flite's awb, rms, slt and kal16 voices): out of domain.
- **a second training engine**: ``--second-engine`` also speaks each training sentence once by
  festival's ``ked`` diphone voice (a US English speaker whose diphones are recordings of a
  person), at a random mean pitch, speaking rate and vocal-tract scale. The model then hears
  two synthesisers' versions of every phone, and flite stays a third one it never heard:
  festival's other English voices (kal, slt) are flite test speakers, so they are never used.
  Like ``--train-voices``, these utterances come last and change nothing else.
- **a third training engine**: ``--third-engine`` also speaks each training sentence once by one
  of MBROLA's English diphone voices (``us1`` a US woman, ``us2`` and ``us3`` US men, ``en1`` a
  British man: diphones cut from recordings of four more people), which espeak-ng drives (its
  text-to-phoneme rules and prosody, MBROLA's waveforms), at a random speed, pitch and
  vocal-tract scale. These come after the festival ones and change nothing else either.
- **more speech, same text**: ``--train-voices N`` speaks each training sentence N times, each
  time in its own voice, speed and pitch. The text holds only about 5,000 training sentences
  free of held-out words, so this is how the corpus grows; the extra utterances are drawn from
  a random stream of their own and come last, so every other utterance, the held-out sets
  included, is the same as with one voice.

The result is a folder with one ``listing.tsv`` (file, transcript, split, speaker) that
``asrkit import folder`` reads as it is. Building needs ``espeak-ng``, ``flite`` and ``fortunes``
(Debian packages; ``scripts/setup.sh`` installs them), ``--second-engine`` festival with
``festvox-kdlpc16k``, and ``--third-engine`` ``mbrola-us1``, ``mbrola-us2``, ``mbrola-us3`` and
``mbrola-en1`` (Debian's non-free section).

    python benchmarks/open_vocab.py OUT [--train 2000] [--test 150] [--dev 100] [--train-voices 1]
        [--second-engine] [--third-engine]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import wave
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

FORTUNES = Path("/usr/share/games/fortunes")
#: Each test sentence has at least this share of its words outside the training vocabulary.
MIN_UNSEEN_WORDS = 0.15
#: Share of the vocabulary's word types held out of training.
HELD_OUT_TYPES = 0.10
MIN_WORDS, MAX_WORDS = 5, 14

TRAIN_DIALECTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan")
UNSEEN_DIALECTS = ("en-us-nyc", "en-gb-x-gbcwmd")
TRAIN_VARIANTS = ("m1", "m2", "m3", "f1", "f2")
UNSEEN_VARIANTS = ("m4", "m6", "f3", "f4")
FLITE_VOICES = ("awb", "rms", "slt", "kal16")
#: espeak-ng words per minute and pitch (0-99) drawn per utterance.
SPEEDS = (130, 190)
PITCHES = (30, 70)
#: festival's voice for ``--second-engine``, its mean pitch (Hz) and duration stretch (percent)
#: drawn per utterance: 85-230 Hz spans low male to female voices. The vocal-tract scale, drawn
#: too, gives the one male speaker formants up to a woman's (about 1.2 times a man's).
FESTIVAL_VOICE = "ked_diphone"
FESTIVAL_F0 = (85, 230)
FESTIVAL_STRETCH = (85, 130)
FESTIVAL_SCALE = (0.95, 1.25)
#: espeak-ng's MBROLA voices for ``--third-engine``, and their vocal-tract scale: ``us1`` is a
#: woman, so the range also lowers formants a little, not only raises them.
MBROLA_VOICES = ("mb-us1", "mb-us2", "mb-us3", "mb-en1")
MBROLA_SCALE = (0.9, 1.2)


@dataclass
class Utterance:
    """One utterance to synthesise. ``voice`` is an espeak-ng voice, ``flite:VOICE`` or
    ``festival:VOICE``; for espeak-ng ``speed`` is words a minute and ``pitch`` 0-99, for
    festival ``speed`` is the duration stretch in percent and ``pitch`` the mean F0 in Hz, and
    ``scale`` how far its vocal tract is shortened (formants, pitch and rate raised together by
    resampling; festival's pitch and stretch are set so that the result has the drawn ones)."""

    split: str
    text: str
    voice: str
    speed: int = 0
    pitch: int = 0
    file: str = ""
    scale: float = 1.0


@dataclass
class Plan:
    """What to synthesise, and the facts the tests and the benchmark report check."""

    utterances: list[Utterance] = field(default_factory=list)
    held_out_words: list[str] = field(default_factory=list)
    #: Per test sentence, the share of its words not in the training text.
    unseen_share: dict[str, float] = field(default_factory=dict)


def fortune_sentences(folder: Path = FORTUNES) -> list[str]:
    """Normalised sentences of MIN_WORDS..MAX_WORDS words from every fortune file, sorted."""
    found: set[str] = set()
    for path in sorted(folder.iterdir()):
        if path.suffix or path.is_symlink() or not path.is_file():
            continue  # .dat indices and .u8 links
        for block in path.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            found.update(normalise_sentences(" ".join(block.split())))
    return sorted(found)


def normalise_sentences(text: str) -> Iterator[str]:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if not sentence.endswith((".", "!", "?")):
            continue  # a fragment, an attribution line
        if re.search(r"[0-9@#$%&*_=+<>/\\|{}\[\]~^]", sentence):
            continue  # numbers and symbols would have to be verbalised
        words = re.sub(r"[^a-z' ]", " ", sentence.lower().replace("-", " ")).split()
        words = [w.strip("'") for w in words if w.strip("'")]
        if MIN_WORDS <= len(words) <= MAX_WORDS:
            yield " ".join(words)


def plan_corpus(sentences: Iterable[str], train: int, dev: int, test: int, seed: int,
                train_voices: int = 1, second_engine: bool = False,
                third_engine: bool = False) -> Plan:
    """Split sentences into train/dev/test with held-out words, and assign voices (each
    training sentence ``train_voices`` of them, one festival voice with ``second_engine`` and
    one MBROLA voice with ``third_engine``)."""
    rng = random.Random(seed)
    pool = sorted(set(sentences))
    rng.shuffle(pool)
    vocabulary = sorted({w for s in pool for w in s.split()})
    held = set(rng.sample(vocabulary, int(len(vocabulary) * HELD_OUT_TYPES)))
    candidates = [s for s in pool if share(s, held) >= MIN_UNSEEN_WORDS]
    if len(candidates) < dev + test:
        raise ValueError(f"only {len(candidates)} sentences with held-out words")
    tests, devs = candidates[:test], candidates[test:test + dev]
    trains = [s for s in pool if not held.intersection(s.split())][:train]
    if len(trains) < train:
        raise ValueError(f"only {len(trains)} training sentences without held-out words")
    train_vocabulary = {w for s in trains for w in s.split()}
    plan = Plan(held_out_words=sorted(held))
    plan.unseen_share = {s: 1 - share(s, train_vocabulary) for s in tests}
    assert min(plan.unseen_share.values()) >= MIN_UNSEEN_WORDS

    def espeak(split: str, text: str, dialects: tuple[str, ...], variants: tuple[str, ...],
               draw: random.Random = rng) -> Utterance:
        voice = f"{draw.choice(dialects)}+{draw.choice(variants)}"
        return Utterance(split, text, voice, draw.randint(*SPEEDS), draw.randint(*PITCHES))

    every_dialect = TRAIN_DIALECTS + UNSEEN_DIALECTS
    plan.utterances += [espeak("train", s, TRAIN_DIALECTS, TRAIN_VARIANTS) for s in trains]
    plan.utterances += [espeak("dev", s, TRAIN_DIALECTS, TRAIN_VARIANTS) for s in devs]
    plan.utterances += [espeak("test", s, TRAIN_DIALECTS, TRAIN_VARIANTS) for s in tests]
    plan.utterances += [espeak("test-unseen", s, every_dialect, UNSEEN_VARIANTS) for s in tests]
    plan.utterances += [Utterance("test-flite", s, f"flite:{rng.choice(FLITE_VOICES)}")
                        for s in tests]
    more = random.Random(f"{seed}-train-voices")
    plan.utterances += [espeak("train", s, TRAIN_DIALECTS, TRAIN_VARIANTS, more)
                        for _ in range(train_voices - 1) for s in trains]
    if second_engine:
        other, scales = random.Random(f"{seed}-festival"), random.Random(f"{seed}-scale")
        plan.utterances += [Utterance("train", s, f"festival:{FESTIVAL_VOICE}",
                                      other.randint(*FESTIVAL_STRETCH), other.randint(*FESTIVAL_F0),
                                      scale=round(scales.uniform(*FESTIVAL_SCALE), 3))
                            for s in trains]
    if third_engine:
        mbrola = random.Random(f"{seed}-mbrola")
        plan.utterances += [Utterance("train", s, mbrola.choice(MBROLA_VOICES),
                                      mbrola.randint(*SPEEDS), mbrola.randint(*PITCHES),
                                      scale=round(mbrola.uniform(*MBROLA_SCALE), 3))
                            for s in trains]
    for number, utterance in enumerate(plan.utterances):
        utterance.file = f"{utterance.split}/{number:05d}.wav"
    return plan


def share(sentence: str, words: set[str]) -> float:
    tokens = sentence.split()
    return sum(t in words for t in tokens) / len(tokens)


def synthesise(utterance: Utterance, folder: Path) -> None:
    target = folder / utterance.file
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part.wav")
    if utterance.voice.startswith("flite:"):
        command = ["flite", "-voice", utterance.voice.split(":", 1)[1], "-t", utterance.text,
                   "-o", str(partial)]
    elif utterance.voice.startswith("festival:"):
        command = festival_command(utterance, partial)
    else:
        command = ["espeak-ng", "-v", utterance.voice, "-s", str(utterance.speed),
                   "-p", str(utterance.pitch), "-w", str(partial), utterance.text]
    # festival reports each diphone its voice lacks (it says a silence instead) on stderr
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{command[0]} failed on {utterance.file} ({utterance.voice}): "
                           f"{done.stderr.strip()[-300:]}")
    if utterance.scale != 1.0:
        scaled = target.with_suffix(".scaled.wav")
        subprocess.run(["sox", "-V1", str(partial), "-r", "16000", str(scaled), "speed",
                        str(utterance.scale)], check=True)
        scaled.replace(partial)
    partial.replace(target)


def festival_command(utterance: Utterance, out: Path) -> list[str]:
    """festival speaking ``utterance`` into ``out`` at its mean pitch and duration stretch,
    both divided by its scale (which resampling multiplies back). ``int_lr_params`` is
    replaced whole, so the model's F0 mean and deviation are ked's own (its voice file's).

    The text is a Scheme string literal: corpus text is only a-z, space and apostrophe."""
    f0 = utterance.pitch / utterance.scale
    return ["festival", "--batch", f"(voice_{utterance.voice.split(':', 1)[1]})",
            f"(set! int_lr_params '((target_f0_mean {f0:.1f}) (target_f0_std {f0 / 7:.1f}) "
            "(model_f0_mean 170) (model_f0_std 34)))",
            f"(Parameter.set 'Duration_Stretch {utterance.speed / 100 * utterance.scale:.3f})",
            f'(utt.save.wave (utt.synth (Utterance Text "{utterance.text}")) "{out}" \'riff)']


#: A sample this loud (of 32768) or louder is speech: espeak-ng's silence is exact zeros, and
#: resampling rings a few units around the edges.
EDGE_LEVEL = 16


def trimmed_16k(path: Path, folder: Path) -> np.ndarray:
    """``path`` as 16 kHz mono int16 (converted by sox in ``folder``), cut to its first and last
    sounding sample: where a synthesised utterance's speech starts and ends."""
    resampled = folder / "trimmed16.wav"
    subprocess.run(["sox", str(path), "-r", "16000", "-b", "16", "-c", "1", str(resampled)],
                   check=True)
    with wave.open(str(resampled)) as handle:
        samples = np.frombuffer(handle.readframes(handle.getnframes()), "<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= EDGE_LEVEL)
    return samples[loud[0]:loud[-1] + 1] if len(loud) else samples[:0]


def build(folder: Path, train: int = 2000, dev: int = 100, test: int = 150, seed: int = 1,
          jobs: int = 2, train_voices: int = 1, second_engine: bool = False,
          third_engine: bool = False) -> Plan:
    """Write the corpus and its ``listing.tsv``. Resumable: a finished file is kept when the
    plan of the folder's last build had the same utterance under its name; other options
    number utterances differently, so a file the new plan gives to another utterance is
    spoken again."""
    plan = plan_corpus(fortune_sentences(), train, dev, test, seed, train_voices, second_engine,
                       third_engine)
    folder.mkdir(parents=True, exist_ok=True)
    forget_changed_files(folder, plan)
    write_plan(folder, plan)
    with ThreadPoolExecutor(jobs) as pool, tqdm(total=len(plan.utterances), unit="utt",
                                                 desc="synthesise") as bar:
        for _ in pool.map(lambda u: synthesise(u, folder), plan.utterances):
            bar.update()
    rows = ["file\ttranscript\tsplit\tspeaker"]
    rows += [f"{u.file}\t{u.text}\t{u.split}\t{u.voice.replace('+', '_').replace(':', '_')}"
             for u in plan.utterances]
    write_if_changed(folder / "listing.tsv", "\n".join(rows) + "\n")
    return plan


def write_plan(folder: Path, plan: Plan) -> None:
    """``plan.json``: every utterance and its file, for the voices by test set
    (``bench_learning.py``) and for the next build of the folder (:func:`forget_changed_files`)."""
    write_if_changed(folder / "plan.json", json.dumps(
        {"held_out_words": plan.held_out_words, "unseen_share": plan.unseen_share,
         "utterances": [asdict(u) for u in plan.utterances]}, indent=1))


def forget_changed_files(folder: Path, plan: Plan) -> None:
    """Delete each audio file that the folder's recorded plan (``plan.json``, written before
    synthesis) gave to another utterance than ``plan`` does; with no recorded plan, every file
    (a folder of unknown origin is not trusted)."""
    recorded = folder / "plan.json"
    before = ({u["file"]: u for u in json.loads(recorded.read_text())["utterances"]}
              if recorded.exists() else {})
    for utterance in plan.utterances:
        target = folder / utterance.file
        if target.exists() and before.get(utterance.file) != asdict(utterance):
            target.unlink()


def lm_sentences(plan_file: Path) -> list[str]:
    """Text for a word language model: every fortune sentence except the dev and test ones.

    Like a real LM corpus (LibriSpeech's leaves out its test books) it holds none of the scored
    sentences, but it is text the acoustic model never heard: most held-out words occur in it,
    in other sentences."""
    plan = json.loads(plan_file.read_text())
    scored = {u["text"] for u in plan["utterances"] if u["split"] != "train"}
    return [s for s in fortune_sentences() if s not in scored]


def write_if_changed(path: Path, text: str) -> None:
    """Leave an identical file alone: a rebuilt corpus must not look changed to a re-import."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--dev", type=int, default=100)
    parser.add_argument("--test", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--train-voices", type=int, default=1,
                        help="voices each training sentence is spoken in")
    parser.add_argument("--second-engine", action="store_true",
                        help="also speak each training sentence by festival")
    parser.add_argument("--third-engine", action="store_true",
                        help="also speak each training sentence by an MBROLA voice")
    args = parser.parse_args()
    plan = build(args.out, args.train, args.dev, args.test, args.seed, args.jobs,
                 args.train_voices, args.second_engine, args.third_engine)
    shares = sorted(plan.unseen_share.values())
    print(f"{len(plan.utterances)} utterances in {args.out}; test sentences have "
          f"{shares[0]:.0%}-{shares[-1]:.0%} of their words unseen in training "
          f"(median {shares[len(shares) // 2]:.0%})")


if __name__ == "__main__":
    main()
