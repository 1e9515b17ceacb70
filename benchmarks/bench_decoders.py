"""Throughput of asrkit's beam decoders against TensorFlow's beam search and pyctcdecode + KenLM.

Why: beam search is what evaluation and transcription spend their CPU on once a model is
trained. Targets (docs/performance), each a ratio measured side by side in one run:

- ``beam`` (no language model) >= ``tf.nn.ctc_beam_search_decoder``'s utterances/s at the same
  beam width;
- ``kenlm`` (n-gram LM) >= 5x pyctcdecode + KenLM at the same beam width and the same LM, with the
  same transcripts.

The logits are synthetic but shaped like a trained model's: 16 utterances of 500 frames and 29
classes (the English alphabet and the blank), each spelling sentences drawn from a word chain,
a character lasting 1-2 frames and followed by 1-3 blank frames; the right label stands out by
a random 4-9 over unit Gaussian noise, and one character frame in ten also lifts an acoustically
confusable letter (c/k, m/n, ...) by about as much, so that decoding without a language model makes
mistakes a language model can fix. The language model is a 3-gram estimated with ``asrkit lm
build``'s estimator from 20,000 other sentences of the same chain.

pyctcdecode 0.5 needs numpy < 2, so it runs in its own virtual environment (``--pyctc-venv``,
created with ``numpy<2 pyctcdecode kenlm`` when missing; ``--no-pyctcdecode`` skips it) on the same
log-probabilities, saved to ``.npy``. Every decoder runs single-threaded, one utterance at a time
(pyctcdecode's ``decode``, not its multiprocessing ``decode_batch``).

Usage::

    python benchmarks/bench_decoders.py [--beams 100,500] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "asrkit-decoder-kenlm"))  # the plugin, from source

from asrkit.core.text import Alphabet  # noqa: E402
from asrkit.decoders.beam import BeamDecoder  # noqa: E402
from asrkit.decoders.greedy import GreedyDecoder  # noqa: E402
from asrkit.decoders.prefix import log_softmax  # noqa: E402

ALPHABET = Alphabet()
DEFAULT_VENV = Path(tempfile.gettempdir()) / "pyctc-venv"

_WORD_LIST = """
the of and to a in is it you that he was for on are with as i his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how said
an each she which do their time if will way about many then them write would like so these her
long make thing see him two has look more day could go come did number sound no most people my
over know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before
move right boy old too same tell does set three want air well also play small end put home read
hand port large spell add even land here must big high such follow act why ask men change went
light kind off need house picture try us again animal point mother world near build self earth
father head stand own page should country found answer school grow study still learn plant cover
food sun four between state keep eye never last let thought city tree cross farm hard start might
story saw far sea draw left late run while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those both mark
often letter until mile river car feet care second book carry took science eat room friend began
idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl
usual young ready above ever red list though feel talk bird soon body dog family direct pose leave
song measure door product black short numeral class wind question happen complete ship area half
rock order fire south problem piece told knew pass since top whole king space heard best hour
better true during hundred five remember step early hold west ground interest reach fast verb sing
listen six table travel less morning ten simple several vowel toward war lay against pattern slow
center love person money serve appear road map rain rule govern pull cold notice voice unit power
town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest
correct able pound done beauty drive stood contain front teach week final gave green oh quick
develop ocean warm free minute strong special mind behind clear tail produce fact street inch
multiply nothing course stay wheel full force blue object decide surface deep moon island foot
system busy test record boat common gold possible plane stead dry wonder laugh thousand ago ran
check game shape equate miss brought heat snow tire bring yes distant fill east paint language
"""
WORDS = tuple(_WORD_LIST.split())

#: Letters a model confuses: the second is lifted next to the first on confusable frames.
CONFUSABLE = {"c": "k", "k": "c", "m": "n", "n": "m", "b": "p", "p": "b", "d": "t", "t": "d",
              "s": "z", "z": "s", "f": "v", "v": "f", "a": "e", "e": "i", "i": "e", "o": "u",
              "u": "o", "g": "k", "r": "l", "l": "r"}


# -- data ---------------------------------------------------------------------------------------


class WordChain:
    """Sentences from a first-order word chain: each word has 12 successors, Zipf-weighted."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.successors = [rng.choice(len(WORDS), 12, replace=False) for _ in WORDS]
        weights = 1.0 / np.arange(1, 13)
        self.weights = weights / weights.sum()

    def sentences(self, count: int, seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(count):
            word = int(rng.integers(len(WORDS)))
            words = [WORDS[word]]
            for _ in range(int(rng.integers(3, 12))):
                word = int(self.successors[word][rng.choice(12, p=self.weights)])
                words.append(WORDS[word])
            out.append(" ".join(words))
        return out


def acoustic_logits(chain: WordChain, utterances: int, frames: int, seed: int,
                    peak: tuple[float, float] = (4.0, 9.0)) -> tuple[np.ndarray, list[str]]:
    """Logits ``[utterances, frames, 29]`` and their transcripts (see the module docstring);
    the right label stands out by ``uniform(*peak)`` over unit noise."""
    rng = np.random.default_rng(seed)
    classes = ALPHABET.num_classes
    blank = ALPHABET.blank
    logits = rng.normal(size=(utterances, frames, classes)).astype(np.float32)
    transcripts = []
    pool = iter(chain.sentences(utterances * 20, seed + 1))
    for u in range(utterances):
        words: list[str] = []
        for sentence in pool:
            candidate = " ".join([*words, sentence])
            if len(candidate) * 3.6 > frames:
                break
            words.append(sentence)
        while True:  # durations are random: drop sentences until the utterance fits
            text = " ".join(words)
            durations = [(int(rng.integers(1, 3)), int(rng.integers(1, 4))) for _ in text]
            if sum(c + b for c, b in durations) <= frames or len(words) == 1:
                break
            words.pop()
        transcripts.append(text)
        t = 0
        for char, (char_frames, blank_frames) in zip(text, durations, strict=True):
            label = ALPHABET.symbols.index(char)
            for _ in range(char_frames):
                logits[u, t, label] += rng.uniform(*peak)
                if char in CONFUSABLE and rng.random() < 0.1:
                    other = ALPHABET.symbols.index(CONFUSABLE[char])
                    logits[u, t, other] += logits[u, t, label] - rng.uniform(-0.5, 1.0)
                t += 1
            for _ in range(blank_frames):
                logits[u, t, blank] += rng.uniform(*peak)
                t += 1
        for rest in range(t, frames):
            logits[u, rest, blank] += rng.uniform(*peak)
    return logits, transcripts


def word_errors(reference: str, hypothesis: str) -> int:
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1]


def wer(references: list[str], hypotheses: list[str]) -> float:
    errors = sum(word_errors(r, h) for r, h in zip(references, hypotheses, strict=True))
    return errors / sum(len(r.split()) for r in references)


# -- timing -------------------------------------------------------------------------------------


def timed(run: Callable[[], list[str]], repeats: int) -> tuple[float, list[str]]:
    """Median seconds of ``repeats`` runs, and the texts of the last one."""
    seconds = []
    texts: list[str] = []
    for _ in range(repeats):
        start = time.perf_counter()
        texts = run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), texts


def ctc_log_probability(log_probs: np.ndarray, text: str) -> float:
    """log P(text | frames) summed over all CTC alignments (the forward algorithm)."""
    blank = ALPHABET.blank
    labels = ALPHABET.encode(text)
    states = np.full(2 * len(labels) + 1, blank)
    states[1::2] = labels
    # A state may be skipped into from two back when it is a label unlike the one two back.
    skip = np.zeros(states.size, dtype=bool)
    skip[2:] = (states[2:] != blank) & (states[2:] != states[:-2])
    alpha = np.full(states.size, -np.inf)
    alpha[0] = log_probs[0, blank]
    if labels:
        alpha[1] = log_probs[0, labels[0]]
    for frame in log_probs[1:]:
        shifted = np.concatenate(([-np.inf], alpha[:-1]))
        skipped = np.where(skip, np.concatenate(([-np.inf, -np.inf], alpha[:-2])), -np.inf)
        alpha = np.logaddexp(np.logaddexp(alpha, shifted), skipped) + frame[states]
    return float(np.logaddexp(alpha[-1], alpha[-2]) if labels else alpha[-1])


def score_with_lm(logits: np.ndarray, text: str, lm_path: Path, config) -> float:
    """The objective both LM decoders search for: the CTC log-probability of ``text`` plus, per
    word, alpha * ln P_lm + beta (+ unk_offset if unknown), plus alpha * ln P(</s>)."""
    import kenlm
    from asrkit_decoder_kenlm.decoder import load_model

    model = load_model(str(lm_path))
    state = kenlm.State()
    model.BeginSentenceWrite(state)
    total = ctc_log_probability(log_softmax(logits), text)
    alpha = config.alpha * math.log(10)
    for word in text.split():
        out = kenlm.State()
        total += alpha * model.BaseScore(state, word, out) + config.beta
        total += 0.0 if word in model else config.unk_offset
        state = out
    return total + alpha * model.BaseScore(state, "</s>", kenlm.State())


def tf_beam(logits: np.ndarray, width: int) -> list[str]:
    import tensorflow as tf

    decoded, _ = tf.nn.ctc_beam_search_decoder(
        tf.transpose(tf.constant(logits), [1, 0, 2]),
        tf.fill([logits.shape[0]], logits.shape[1]), beam_width=width)
    rows, values = decoded[0].indices.numpy()[:, 0], decoded[0].values.numpy()
    return [ALPHABET.decode(values[rows == b]) for b in range(logits.shape[0])]


# -- pyctcdecode, in its own environment --------------------------------------------------------

PYCTC_SCRIPT = r"""
import json, logging, statistics, sys, time
import numpy as np
logging.disable(logging.WARNING)
from pyctcdecode import build_ctcdecoder
args = json.loads(sys.argv[1])
log_probs = np.load(args["logits"])
out = {}
for mode in ("lm", "nolm"):
    lm = args["lm"] if mode == "lm" else None
    decoder = build_ctcdecoder(args["labels"], kenlm_model_path=lm, alpha=args["alpha"],
                               beta=args["beta"], unk_score_offset=args["unk_offset"])
    for width in args["beams"]:
        seconds = []
        for _ in range(args["repeats"]):
            start = time.perf_counter()
            texts = [decoder.decode(row, beam_width=width) for row in log_probs]
            seconds.append(time.perf_counter() - start)
        out[f"{mode}-{width}"] = {"seconds": statistics.median(seconds), "texts": texts}
print(json.dumps(out))
"""


def ensure_pyctc_venv(venv: Path) -> Path | None:
    """The Python of a virtual environment with pyctcdecode and kenlm, created if missing."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import pyctcdecode, kenlm"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"creating {venv} with numpy<2 pyctcdecode kenlm (kenlm compiles: a few minutes)",
          file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "numpy<2", "pyctcdecode", "kenlm"],
                       check=True)
    except (subprocess.CalledProcessError, OSError) as error:
        print(f"pyctcdecode skipped: could not create {venv}: {error}", file=sys.stderr)
        return None
    return python


def run_pyctcdecode(python: Path, log_probs: np.ndarray, lm: Path, beams: list[int],
                    repeats: int, alpha: float, beta: float, unk_offset: float,
                    folder: Path) -> dict:
    np.save(folder / "log_probs.npy", log_probs.astype(np.float32))
    args = {"logits": str(folder / "log_probs.npy"), "labels": [*ALPHABET.symbols, ""],
            "lm": str(lm), "beams": beams, "repeats": repeats, "alpha": alpha, "beta": beta,
            "unk_offset": unk_offset}
    result = subprocess.run([str(python), "-c", PYCTC_SCRIPT, json.dumps(args)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pyctcdecode failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=16)
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--beams", default="100,500", help="Beam widths, comma-separated.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--order", type=int, default=3, help="Order of the n-gram model.")
    parser.add_argument("--peak", default="4,9",
                        help="How far the right label stands out (low,high): higher is a more "
                        "confident model, e.g. 8,14 (most frames surely blank).")
    parser.add_argument("--pyctc-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--no-pyctcdecode", action="store_true")
    parser.add_argument("--no-tf", action="store_true", help="Skip TensorFlow's beam search.")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args()
    beams = [int(b) for b in args.beams.split(",")]

    from asrkit_decoder_kenlm.arpa import estimate
    from asrkit_decoder_kenlm.decoder import KenLMConfig, KenLMDecoder

    chain = WordChain(0)
    low, high = (float(v) for v in args.peak.split(","))
    logits, transcripts = acoustic_logits(chain, args.utterances, args.frames, seed=1,
                                          peak=(low, high))
    log_probs = log_softmax(logits)
    n = args.utterances
    folder = Path(tempfile.mkdtemp(prefix="bench-decoders-"))
    lm_path = folder / "lm.arpa"
    started = time.perf_counter()
    estimate(chain.sentences(20000, seed=2), args.order).write(lm_path)
    lm_seconds = time.perf_counter() - started
    lm_defaults = KenLMConfig()

    results: dict = {
        "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
        "utterances": n, "frames": args.frames, "classes": ALPHABET.num_classes,
        "mean_max_prob": float(np.exp(log_probs.max(-1)).mean()),
        "blank_frames": float((log_probs.argmax(-1) == ALPHABET.blank).mean()),
        "lm_build_seconds": lm_seconds, "rows": [],
    }

    def add(name: str, width: int | None, seconds: float, texts: list[str], **extra: object):
        row = {"decoder": name, "beam": width, "utt_per_s": n / seconds,
               "wer": wer(transcripts, texts), **extra}
        results["rows"].append(row)
        if not args.json:
            print(f"{name:<42} beam {width!s:>4}: {row['utt_per_s']:8.2f} utt/s  "
                  f"WER {row['wer']:.3f}", flush=True)
        return texts

    seconds, texts = timed(lambda: GreedyDecoder().decode(logits, [args.frames] * n, ALPHABET),
                           args.repeats)
    add("greedy", None, seconds, texts)
    outputs: dict[str, list[str]] = {}
    for width in beams:
        if not args.no_tf:
            seconds, texts = timed(lambda w=width: tf_beam(logits, w), args.repeats)
            outputs[f"tf-{width}"] = add("tf.nn.ctc_beam_search_decoder", width, seconds, texts)
        for label, options in (("beam (default pruning)", {}),
                               ("beam (exact: token_min_logp=None)", {"token_min_logp": None})):
            decoder = BeamDecoder().with_config(beam_width=width, **options)
            seconds, texts = timed(lambda d=decoder: d.decode(logits, None, ALPHABET),
                                   args.repeats)
            key = "beam-exact" if options else "beam"
            outputs[f"{key}-{width}"] = add(label, width, seconds, texts)
        for label, options in (("kenlm (default = pyctcdecode's pruning)", {}),
                               ("kenlm (exact: no pruning)",
                                {"token_min_logp": None, "beam_prune_logp": None})):
            decoder = KenLMDecoder().with_config(lm=str(lm_path), beam_width=width, **options)
            decoder.decode(logits[:1, :10], None, ALPHABET)  # load the model outside the timing
            seconds, texts = timed(lambda d=decoder: d.decode(logits, None, ALPHABET),
                                   args.repeats)
            key = "kenlm-exact" if options else "kenlm"
            outputs[f"{key}-{width}"] = add(label, width, seconds, texts)

    python = None if args.no_pyctcdecode else ensure_pyctc_venv(args.pyctc_venv)
    if python is not None:
        pyctc = run_pyctcdecode(python, log_probs, lm_path, beams, args.repeats,
                                lm_defaults.alpha, lm_defaults.beta, lm_defaults.unk_offset,
                                folder)
        for width in beams:
            for mode, label in (("nolm", "pyctcdecode (no LM)"), ("lm", "pyctcdecode + KenLM")):
                entry = pyctc[f"{mode}-{width}"]
                outputs[f"pyctc-{mode}-{width}"] = add(label, width, entry["seconds"],
                                                       entry["texts"])
    elif not args.json:
        print("pyctcdecode: skipped")

    # Ratios against the targets, and agreement of transcripts.
    speed = {(r["decoder"], r["beam"]): r["utt_per_s"] for r in results["rows"]}
    summary = []
    for width in beams:
        if not args.no_tf:
            tf_speed = speed[("tf.nn.ctc_beam_search_decoder", width)]
            summary.append({
                "beam": width, "target": "beam >= tf (1x)",
                "ratio_default": speed[("beam (default pruning)", width)] / tf_speed,
                "ratio_exact": speed[("beam (exact: token_min_logp=None)", width)] / tf_speed,
                "same_transcripts_as_tf": sum(
                    a == b for a, b in zip(outputs[f"beam-exact-{width}"],
                                           outputs[f"tf-{width}"], strict=True)),
            })
        if python is not None:
            pyctc_speed = speed[("pyctcdecode + KenLM", width)]
            ours = outputs[f"kenlm-{width}"]
            theirs = outputs[f"pyctc-lm-{width}"]
            summary.append({
                "beam": width, "target": "kenlm >= 5x pyctcdecode + KenLM",
                "ratio_default": speed[("kenlm (default = pyctcdecode's pruning)", width)]
                / pyctc_speed,
                "ratio_exact": speed[("kenlm (exact: no pruning)", width)] / pyctc_speed,
                "same_transcripts_as_pyctcdecode": sum(
                    a == b for a, b in zip(ours, theirs, strict=True)),
                "same_transcripts_as_exact_search": sum(
                    a == b for a, b in zip(ours, outputs[f"kenlm-exact-{width}"], strict=True)),
                "pyctcdecode_scores_better": sum(
                    score_with_lm(logits[i], theirs[i], lm_path, lm_defaults)
                    > score_with_lm(logits[i], ours[i], lm_path, lm_defaults) + 1e-6
                    for i in range(n) if ours[i] != theirs[i]),
            })
    results["summary"] = summary
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"\n{n} utterances x {args.frames} frames; mean max probability a frame "
          f"{results['mean_max_prob']:.3f}, blank frames {results['blank_frames']:.0%}; "
          f"LM ({args.order}-gram) built in {lm_seconds:.1f} s")
    for item in summary:
        ratios = ", ".join(f"{k[6:]} {v:.1f}x" for k, v in item.items() if k.startswith("ratio"))
        same = ", ".join(f"{k} {v}/{n}" for k, v in item.items()
                         if k.startswith(("same", "pyctcdecode_scores")))
        print(f"beam {item['beam']}: {item['target']}: {ratios}; {same}")


if __name__ == "__main__":
    main()
