"""Does training generalise, in a practical budget? The open-vocabulary learning benchmark.

1. Builds the open-vocabulary corpus of ``benchmarks/open_vocab.py`` (real English sentences;
   test sentences never in training with at least 15 % of their words unseen; three test sets:
   training voices, unseen voices, another synthesiser) and imports it with
   ``asrkit import folder``.
2. Trains each model **as a user would**: ``asrkit train --model M`` with no model settings
   (its CPU preset on a machine without a GPU) and ``-o max_minutes=M``: one run for each
   time in ``--minutes``, each from scratch, because the presets' learning rate decays over
   the time the run is given (a run of 30 minutes is not a run of 10 continued).
3. Evaluates each run on ``test``, ``test-unseen`` and ``test-flite`` with the checkpoint
   ``asrkit evaluate RUN`` scores by default (``best``: what a user gets); ``--checkpoint
   latest`` scores the final weights instead, and ``--checkpoint best,latest`` both (a row
   each).
4. Breaks each test set's CER down by voice (the corpus plan's voice of every utterance), so
   that one voice the model cannot hear shows instead of hiding in the mean.

Prints a table and writes JSON (``--json``): CER and WER per test set (with the words deleted
and inserted, which show a decoder that stops early or loops, and how many utterances a second
``asrkit evaluate`` decoded, loading included), steps, epochs, seconds per step and the
training process's peak resident memory, at each time. ``--beam`` also scores
with each run's beam search (``beam`` for CTC, ``transducer-beam`` for a transducer);
``--variant "rnnt:objective=transducer"`` trains a model with the transducer objective beside
its CTC default. Needs espeak-ng, flite, fortunes and sox (scripts/setup.sh).

    python benchmarks/bench_learning.py [--minutes 10,30] [--models ds2,brnn] [--beam]
        [--variant "NAME:SETTING;SETTING" ...] [--train 2400] [--train-voices 1]
        [--second-engine] [--work bench-work]

``--lm`` also scores each test set with a word 3-gram through the objective's language-model
decoder (``kenlm``, ``transducer-kenlm`` or ``attention-kenlm``), the model built by ``asrkit
lm build`` from every ``fortunes`` sentence except the dev and test ones: text the
acoustic model never heard, holding most of the held-out words in other sentences, as a real
LM corpus would: once with the decoder's default weights (columns "+ LM"), once with ``alpha``
and ``beta`` chosen on the dev split by ``asrkit evaluate --grid`` (columns "+ tuned LM"; the
choice is in ``RUN/dev-lm-search.json``). ``--lm-dictionary [FILE]`` adds the words of a
spelling dictionary (Debian's ``wamerican`` by default) to that model's vocabulary (``asrkit lm
build --vocabulary``): 7 % of the test words are in no other ``fortunes`` sentence, and 87 % of
those are in the dictionary, as they would be in a real LM's lexicon.

``--decoding "ctc-only@attention:-o decoder.ctc_weight=1"`` also scores the runs of an objective
(every run, without ``@OBJECTIVE``) with those ``asrkit evaluate`` arguments (an attention run's
CTC output alone, here), in columns of their own.

``--variant "aug:pipeline.speed_factors=0.9,1.0,1.1;pipeline.time_masks=2"`` adds a run of each
model with extra ``-o`` settings (e.g. augmentation) beside the default one, in the same table.
``--subwords 256`` builds a SentencePiece vocabulary of 256 pieces from the training transcripts
(``asrkit tokenizer build``) and adds a run of each model on it (variant ``sp256``): characters
against subwords at equal training time. ``--train-voices N`` speaks each training sentence in N
voices (``open_vocab.py``): more training speech from the same text, the held-out sets unchanged.
``--second-engine`` also speaks each training sentence by festival (needs ``festival`` and
``festvox-kdlpc16k``), so the model trains on two synthesisers and flite is a third.
``--third-engine`` also speaks each by one of MBROLA's English voices (``mbrola-us1``, ``-us2``,
``-us3`` and ``-en1``), driven by espeak-ng. A ``--work`` folder is reused: options that change
the corpus (these, ``--train``, ``--train-voices``) speak again only what changed and import
the corpus again (``asrkit import --force``); the runs keep their scores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from open_vocab import build, lm_sentences

from asrkit.train.machine import machine_text

TEST_SETS = ("test", "test-unseen", "test-flite")


def asrkit(*args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "asrkit", *args], text=True,
                            capture_output=quiet, check=False)
    if result.returncode != 0:
        sys.exit(f"asrkit {' '.join(args)} failed:\n{(result.stderr or '')[-3000:]}")
    return result


def train(run: Path, model: str, minutes: float, settings: list[str]) -> float:
    """Train one run; returns the training process's peak resident memory in MiB."""
    options = [item for setting in settings for item in ("-o", setting)]
    process = subprocess.Popen([sys.executable, "-m", "asrkit", "train", "--model", model,
                                "--dataset", "openvocab", "--epochs", "1000", "-o",
                                f"max_minutes={minutes}", "--run-dir", str(run),
                                "--no-progress", *options])
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"asrkit train of {run} failed ({process.returncode})")
    return usage.ru_maxrss / 1024


#: The LM weights the dev split chooses from (``asrkit evaluate --grid``).
LM_GRID = ("decoder.alpha=0.25,0.5,0.75,1,1.25,1.5,2", "decoder.beta=0,1,2,3,4")


#: Each objective's beam search and its decoder with the kenlm word model.
SEARCHES = {"ctc": ("beam", "kenlm"), "transducer": ("transducer-beam", "transducer-kenlm"),
            "attention": ("attention-beam", "attention-kenlm")}


def searches(run: Path) -> tuple[str, str]:
    """The beam search and the LM decoder of ``run``'s objective."""
    return SEARCHES[objective_of(run)]


def objective_of(run: Path) -> str:
    return json.loads((run / "config.json").read_text())["train"].get("objective", "ctc")


def tune_lm(run: Path, lm: Path, checkpoint: str) -> list[str]:
    """The LM decoder's weights best by WER on the dev split, as ``-o`` options."""
    target = run / "dev-lm-search.json"
    asrkit("evaluate", str(run), "--split", "dev", "--checkpoint", checkpoint, "--decoder",
           searches(run)[1], "-o", f"decoder.lm={lm}",
           *(a for g in LM_GRID for a in ("--grid", g)),
           "--json", str(target), "--no-progress")
    best = json.loads(target.read_text())["best"]
    print(f"LM weights chosen on dev: {' '.join(best['options'])} (dev WER {best['wer']:.1%}, "
          f"CER {best['cer']:.1%})", flush=True)
    return [item for option in best["options"] for item in option.split(" ", 1)]


def by_voice(report: dict, voices: dict[tuple[str, str], str]) -> dict[str, float]:
    """The CER of each voice of a test set (``voices``: (split, transcript) -> voice), from
    the utterances of an ``asrkit evaluate --json`` report, worst first."""
    from asrkit.core.metrics import Score
    from asrkit.core.metrics import score as utterance_score

    totals: dict[str, Score] = {}
    for result in report["results"]:
        voice = voices.get((report["split"], result["reference"]), "?")
        counts = utterance_score(result["reference"], result["hypothesis"])
        totals[voice] = totals.get(voice, Score(0, 0, 0, 0)) + counts
    return dict(sorted(((voice, round(s.cer, 4)) for voice, s in totals.items()),
                       key=lambda item: -item[1]))


def plan_voices(corpus: Path) -> dict[tuple[str, str], str]:
    """(split, transcript) -> voice of every held-out utterance of the corpus plan."""
    plan = json.loads((corpus / "plan.json").read_text())
    return {(u["split"], u["text"]): u["voice"] for u in plan["utterances"]
            if u["split"] != "train"}


def score(run: Path, lm: Path | None, checkpoint: str, beam: bool = False,
          voices: dict[tuple[str, str], str] | None = None,
          extra: dict[str, tuple[str, list[str]]] | None = None,
          tune: bool = True) -> dict[str, dict]:
    """CER and WER of the ``checkpoint`` weights (and their step) on each test set, with the
    run's decoder (greedy: ``test``), with ``beam`` its objective's beam search (``test+beam``:
    :data:`SEARCHES`) and, given an LM, with its objective's kenlm decoder at its default
    weights (``test+lm``) and, with ``tune``, at those chosen on dev (``test+tuned-lm``)."""
    decoders = {"": []}
    search, with_lm = searches(run)
    run_decoder = json.loads((run / "config.json").read_text())["train"]["decoder"]
    if beam and search != run_decoder:  # an attention run's own decoder is its beam search
        decoders["+beam"] = ["--decoder", search]
    if lm:
        decoders["+lm"] = ["--decoder", with_lm, "-o", f"decoder.lm={lm}"]
        if tune:
            decoders["+tuned-lm"] = decoders["+lm"] + tune_lm(run, lm, checkpoint)
    for name, (only, options) in (extra or {}).items():
        if only in ("", objective_of(run)):
            decoders[f"+{name}"] = options
    results = {}
    for split in TEST_SETS:
        for suffix, options in decoders.items():
            target = run / f"{split}{suffix}.json"
            began = time.monotonic()
            asrkit("evaluate", str(run), "--split", split, "--checkpoint", checkpoint,
                   *options, "--json", str(target), "--no-progress")
            seconds = time.monotonic() - began
            report = json.loads(target.read_text())
            results[split + suffix] = {
                "cer": report["cer"], "wer": report["wer"], "step": report["checkpoint"]["step"],
                "word_deletions": report.get("word_deletions"),
                "word_insertions": report.get("word_insertions"),
                "hit_length_limit": len(report.get("hit_length_limit", [])),
                "utterances_per_second": round(report["utterances"] / seconds, 1),
                "cer_by_voice": by_voice(report, voices or {})}
    return results


#: The spelling dictionary whose words the benchmark's LM also holds (Debian's ``wamerican``).
DICTIONARY = Path("/usr/share/dict/american-english")


def build_lm(work: Path, dictionary: Path | None) -> Path:
    """The benchmark's word 3-gram (see the module docstring), its vocabulary extended by
    ``dictionary``'s words in the corpus' alphabet when given."""
    text, arpa = work / "lm-text.txt", (work / "lm.arpa").resolve()
    text.write_text("\n".join(lm_sentences(work / "openvocab" / "plan.json")) + "\n")
    extra = []
    if dictionary:
        words = {w.strip("'") for w in dictionary.read_text(errors="replace").lower().split()}
        listed = work / "lm-words.txt"
        listed.write_text("\n".join(sorted(w for w in words if re.fullmatch(r"[a-z']+", w)))
                          + "\n")
        extra = ["--vocabulary", str(listed)]
    print(asrkit("lm", "build", "--text", str(text), "--order", "3", "-o", str(arpa),
                 "--no-normalize", *extra).stdout.strip(), flush=True)
    return arpa


def progress(run: Path) -> dict:
    state = json.loads((run / "checkpoints/latest.json").read_text())["state"]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [e["audio_seconds_per_second"] for e in steps if e["event"] == "step"]
    dev = [(e["step"], round(e["dev_cer"], 4)) for e in steps if e["event"] == "evaluation"]
    config = json.loads((run / "config.json").read_text())
    machines = [e for e in steps if e["event"] == "machine"]
    return {"steps": state["global_step"], "epochs": round(
        state["epoch"] + state["step_in_epoch"] / max(state.get("steps_per_epoch") or 1, 1), 2),
        "audio_seconds_per_second": round(rates[-1], 1) if rates else 0.0,
        "preset": config["train"]["preset"], "batch_size": config["train"]["batch_size"],
        "dev_cer_by_step": dev,
        "machine": machine_text(machines[-1]) if machines else "not recorded"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", default="10,30",
                        help="training minutes at which to score, increasing")
    parser.add_argument("--models", default="ds2,brnn")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:SETTING;SETTING: also train with these -o settings")
    parser.add_argument("--skip-default", action="store_true",
                        help="train only the --variant runs")
    parser.add_argument("--subwords", type=int, action="append", default=[],
                        help="also train on a SentencePiece vocabulary of this size")
    parser.add_argument("--train", type=int, default=2400, help="training sentences")
    parser.add_argument("--train-voices", type=int, default=1,
                        help="voices each training sentence is spoken in")
    parser.add_argument("--second-engine", action="store_true",
                        help="also speak each training sentence by festival (open_vocab.py)")
    parser.add_argument("--third-engine", action="store_true",
                        help="also speak each training sentence by an MBROLA voice")
    parser.add_argument("--work", type=Path, default=Path("bench-work"))
    parser.add_argument("--beam", action="store_true",
                        help="also score with the beam search of each run's objective")
    parser.add_argument("--lm", action="store_true",
                        help="also score with the kenlm decoder and a word 3-gram")
    parser.add_argument("--no-lm-tuning", dest="tune_lm", action="store_false",
                        help="with --lm, skip choosing the LM's weights on dev (a grid of "
                             f"{len(LM_GRID[0].split(','))}x{len(LM_GRID[1].split(','))} "
                             "decodings of it a checkpoint)")
    parser.add_argument("--lm-dictionary", type=Path, nargs="?", const=DICTIONARY,
                        help=f"add a word list's words to the LM's vocabulary (default "
                             f"{DICTIONARY})")
    parser.add_argument("--checkpoint", default="best",
                        help="the weights scored: best (what `asrkit evaluate RUN` scores), "
                             "latest (the final ones), or best,latest (a row each)")
    parser.add_argument("--decoding", action="append", default=[],
                        help="NAME[@OBJECTIVE]:ARGS: also score with these `asrkit evaluate` "
                             "arguments (the runs of OBJECTIVE only, when given), column + NAME")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    os.environ.setdefault("ASRKIT_HOME", str((args.work / "home").resolve()))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    started = time.monotonic()
    listing = args.work / "openvocab" / "listing.tsv"
    before = listing.read_text() if listing.exists() else None
    build(args.work / "openvocab", train=args.train, train_voices=args.train_voices,
          second_engine=args.second_engine, third_engine=args.third_engine)
    # another corpus than the one imported: asrkit refuses to mix them unless told to redo
    changed = before is not None and listing.read_text() != before
    asrkit("import", "folder", str(args.work / "openvocab"), "--name", "openvocab",
           "--no-progress", *(["--force"] if changed else []))
    print(f"corpus ready in {time.monotonic() - started:.0f} s", flush=True)
    lm = build_lm(args.work, args.lm_dictionary) if args.lm else None

    variants: dict[str, list[str]] = {} if args.skip_default else {"default": []}
    for item in args.variant:
        name, _, settings = item.partition(":")
        variants[name] = [s for s in settings.split(";") if s]
    for size in args.subwords:
        model_file = (args.work / f"openvocab-sp{size}.model").resolve()
        report = asrkit("tokenizer", "build", "--dataset", "openvocab", "--vocab-size",
                        str(size), "-o", str(model_file)).stdout.strip()
        print(report, flush=True)
        variants[f"sp{size}"] = [f"tokenizer={model_file}"]
    budgets = [float(m) for m in args.minutes.split(",")]
    checkpoints = args.checkpoint.split(",")
    if not set(checkpoints) <= {"best", "latest"}:
        parser.error("--checkpoint: best, latest or best,latest")
    voices = plan_voices(args.work / "openvocab")
    extra = {}
    for item in args.decoding:
        named, _, options = item.partition(":")
        name, _, only = named.partition("@")
        extra[name] = (only, options.split())
        DECODINGS[f"+{name}"] = f" + {name}"
    results: list[dict] = []
    for model in args.models.split(","):
        for variant, settings in variants.items():
            for minutes in budgets:
                run = args.work / "runs" / f"{model}-{variant}-{minutes:g}min"
                began = time.monotonic()
                peak = train(run, model, minutes, settings)
                trained = {"model": model, "variant": variant, "minutes": minutes,
                           **progress(run), "wall_seconds": round(time.monotonic() - began),
                           "peak_mib": round(peak)}
                trained["seconds_per_step"] = round(minutes * 60 / max(trained["steps"], 1), 2)
                for checkpoint in checkpoints:
                    row = {**trained, "checkpoint": checkpoint,
                           **score(run, lm, checkpoint, args.beam, voices, extra,
                                    args.tune_lm)}
                    results.append(row)
                    print(line(row), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print("\n" + table(results))
    print("\n" + voice_table(results))


#: Decodings of each test set, in the table's order, and their column names.
DECODINGS = {"": "", "+beam": " + beam", "+lm": " + LM", "+tuned-lm": " + tuned LM"}


def scored(row: dict) -> list[str]:
    """The row's test sets, greedy first, then with the LM where it was scored."""
    return [s + d for d in DECODINGS for s in TEST_SETS if s + d in row]


def line(row: dict) -> str:
    sets = ", ".join(f"{s} CER {row[s]['cer']:.1%} WER {row[s]['wer']:.1%} (words deleted "
                     f"{row[s]['word_deletions']}, inserted {row[s]['word_insertions']}; "
                     f"{row[s]['utterances_per_second']} utt/s)" for s in scored(row))
    dev = " ".join(f"{step}:{cer:.1%}" for step, cer in row["dev_cer_by_step"])
    return (f"{row['model']} ({row['variant']}, preset {row['preset']}) after {row['minutes']:g} "
            f"min, {row['steps']} steps on {row['machine']}, {row['checkpoint']} checkpoint (step "
            f"{row['test']['step']}): {sets}; dev CER by step {dev}")


def column_name(key: str) -> str:
    split, plus, decoding = key.partition("+")
    return split + DECODINGS[plus + decoding]


def table(results: list[dict]) -> str:
    columns = [s + d for d in DECODINGS for s in TEST_SETS if any(s + d in r for r in results)]
    head = ("| model | variant | minutes | steps | checkpoint (step) | s/step | peak MiB | "
            + " | ".join(f"{column_name(s)} CER / WER" for s in columns) + " |")
    rows = [head, "|" + "---|" * (7 + len(columns))]
    for r in results:
        cells = [r["model"], r["variant"], f"{r['minutes']:g}", str(r["steps"]),
                 f"{r['checkpoint']} ({r['test']['step']})", f"{r['seconds_per_step']:.2f}",
                 str(r.get("peak_mib", "-"))]
        cells += [f"{r[s]['cer']:.1%} / {r[s]['wer']:.1%}" if s in r else "-" for s in columns]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def voice_table(results: list[dict]) -> str:
    """Each run's greedy CER by voice on each test set: the worst three voices and the best."""
    rows = ["| model | variant | minutes | checkpoint | test set | worst voices (CER) "
            "| best voice |", "|---|---|---|---|---|---|---|"]
    for r in results:
        for split in TEST_SETS:
            voices = list(r[split].get("cer_by_voice", {}).items())
            if not voices:
                continue
            worst = ", ".join(f"{v} {c:.1%}" for v, c in voices[:3])
            best = f"{voices[-1][0]} {voices[-1][1]:.1%}"
            rows.append(f"| {r['model']} | {r['variant']} | {r['minutes']:g} | "
                        f"{r['checkpoint']} | {split} | {worst} | {best} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
