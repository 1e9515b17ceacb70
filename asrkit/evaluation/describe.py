"""``asrkit describe``: what an imported dataset or a training run holds, in one page.

A dataset: hours, utterances and speakers per split, duration and transcript-length quantiles,
the characters and how often each occurs, and what the import skipped and why. A run: its
configuration and dataset, how far it got, its best dev scores and final report, and the model's
parameters and FLOPs (:mod:`asrkit.models.analysis`). ``--plots DIR`` draws PNGs
(:mod:`asrkit.core.plots`); ``--json`` prints the same facts for machines.

Everything is read from the files a dataset or run already has (``dataset.json``, the split
CSVs, ``metrics.jsonl``, ``checkpoints/latest.json``, ``report.json``); only a run without a
``model_analysis.json`` has one computed, which builds the model (no weights are read).
The command is :mod:`asrkit.commands.describe`.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from asrkit.core import plots
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.storage import Location
from asrkit.dataset.folders import load_dataset_json
from asrkit.dataset.manifest import read_csv
from asrkit.models.analysis import run_model_analysis, summary_text
from asrkit.pipeline.batches import utterance_samples
from asrkit.runs.run import load_run
from asrkit.train.machine import machine_text

#: Quantiles printed for durations and transcript lengths.
QUANTILES = {"min": 0.0, "p10": 0.1, "p25": 0.25, "median": 0.5, "p75": 0.75, "p90": 0.9,
             "max": 1.0}
#: Splits listed first, in this order.
SPLIT_ORDER = ("train", "dev", "test")
#: Dev scores a run's metrics may carry, with the events that carry them.
DEV_SCORES = ("dev_loss", "dev_wer", "dev_cer")
DEV_EVENTS = ("evaluation", "epoch")
#: Characters shown by name, not as themselves.
CHAR_NAMES = {" ": "space", "\t": "tab", "'": "apostrophe"}


# -- small helpers ------------------------------------------------------------------------------


def quantiles(values: Sequence[float]) -> dict[str, float] | None:
    """:data:`QUANTILES` of ``values`` (linear interpolation) and their mean; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    result = {}
    for name, q in QUANTILES.items():
        position = q * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        result[name] = round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 4)
    result["mean"] = round(sum(ordered) / len(ordered), 4)
    return result


def read_jsonl(path: Location) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; a line cut short (a run killed while writing) is
    skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _read_json(path: Location) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# -- datasets -----------------------------------------------------------------------------------


def split_rows(dataset: Location, split: str) -> list[tuple[str, float, str, str]]:
    """``(id, seconds, transcript, speaker)`` of a split's utterances. Seconds as the input
    pipeline counts them (the CSV's ``duration``, else ``wav_filesize``: the PCM bytes after
    the 44-byte header at 2 bytes a sample); the id is the audio file's name without suffix."""
    rows = list(read_csv(dataset / f"{split}.csv"))
    samples = utterance_samples(dataset, split)
    return [(Path(row.wav_filename).stem, n / SAMPLE_RATE, row.transcript, row.speaker)
            for row, n in zip(rows, samples, strict=False)]


def dataset_splits(dataset: Location, info: dict[str, Any]) -> list[str]:
    """The dataset's splits (those in dataset.json, and any other ``<split>.csv``): train, dev
    and test first, the rest by name."""
    splits = {p.stem for p in dataset.glob("*.csv")} | {
        s for s in info.get("splits", {}) if (dataset / f"{s}.csv").exists()}
    return ordered(splits)


def ordered(splits: Iterable[str]) -> list[str]:
    """Split names: train, dev and test first, the rest by name."""
    return sorted(splits, key=lambda s: (SPLIT_ORDER.index(s) if s in SPLIT_ORDER
                                         else len(SPLIT_ORDER), s))


def describe_dataset(
    dataset: Location,
) -> tuple[dict[str, Any], dict[str, list[tuple[str, float, str, str]]]]:
    """The description of a dataset, and its rows by split (for plots)."""
    info = load_dataset_json(dataset)
    rows = {split: split_rows(dataset, split) for split in dataset_splits(dataset, info)}
    characters: Counter[str] = Counter()
    splits = {}
    for split, part in rows.items():
        seconds = [s for _, s, _, _ in part]
        characters.update(ch for _, _, text, _ in part for ch in text)
        splits[split] = {
            "utterances": len(part),
            "hours": round(sum(seconds) / 3600, 4),
            "seconds": round(sum(seconds), 3),
            "speakers": len({speaker for *_, speaker in part if speaker}),
            "words": sum(len(text.split()) for _, _, text, _ in part),
            "duration_seconds": quantiles(seconds),
            "transcript_characters": quantiles([len(text) for _, _, text, _ in part]),
        }
    imported = sum(s["utterances"] for s in splits.values())
    reasons = {reason: entry.get("count", 0) if isinstance(entry, dict) else len(entry)
               for reason, entry in info.get("skipped", {}).items()}
    skipped = sum(reasons.values())
    total_chars = sum(characters.values())
    description = {
        "dataset": info.get("name", dataset.name),
        "folder": str(dataset),
        "importer": info.get("importer"),
        "splits": splits,
        "total": {
            "utterances": imported,
            "hours": round(sum(s["seconds"] for s in splits.values()) / 3600, 4),
            "speakers": len({speaker for part in rows.values() for *_, speaker in part
                             if speaker}),
        },
        "characters": [{"character": ch, "count": n, "share": round(n / total_chars, 5)}
                       for ch, n in characters.most_common()],
        "skipped": {
            "utterances": skipped,
            "share": round(skipped / (imported + skipped), 5) if imported + skipped else 0.0,
            "reasons": reasons,
            "errors": len(info.get("errors", {})),
        },
    }
    return description, rows


def dataset_text(d: dict[str, Any]) -> str:
    total = d["total"]
    lines = [f"dataset {d['dataset']} ({d['folder']}): importer {d['importer']}, "
             f"{total['utterances']:,} utterances, {total['hours']:.2f} h, "
             f"{total['speakers']:,} speakers", ""]
    header = (f"{'split':<10} {'utterances':>10} {'hours':>8} {'speakers':>8}   "
              f"duration s: {'min':>6} {'p10':>6} {'median':>6} {'p90':>6} {'max':>6}   "
              f"chars: {'median':>6} {'max':>6}")
    lines.append(header)
    for split, s in d["splits"].items():
        q = s["duration_seconds"] or {}
        c = s["transcript_characters"] or {}
        lines.append(
            f"{split:<10} {s['utterances']:>10,} {s['hours']:>8.2f} {s['speakers']:>8,}   "
            f"{'':>12}"
            + " ".join(f"{q.get(k, 0):>6.2f}" for k in ("min", "p10", "median", "p90", "max"))
            + f"   {'':>7}{c.get('median', 0):>6.0f} {c.get('max', 0):>6.0f}")
    skipped = d["skipped"]
    lines += ["", f"skipped at import: {skipped['utterances']:,} of "
                  f"{skipped['utterances'] + total['utterances']:,} utterances "
                  f"({skipped['share']:.1%})"]
    for reason, count in sorted(skipped["reasons"].items(), key=lambda r: -r[1]):
        lines.append(f"  {reason}: {count:,}")
    if skipped["errors"]:
        lines.append(f"  ({skipped['errors']} audio files could not be read; dataset.json "
                     "lists them under errors)")
    chars = d["characters"]
    lines += ["", f"characters: {len(chars)} distinct, "
                  f"{sum(c['count'] for c in chars):,} in all transcripts"]
    cells = [f"{CHAR_NAMES.get(c['character'], c['character'])} {c['share']:.2%}"
             for c in chars]
    row = ""
    for cell in cells:  # whole cells a line, never a character apart from its share
        if row and len(row) + 3 + len(cell) > 96:
            lines.append(row)
            row = ""
        row = f"{row}   {cell}" if row else f"  {cell}"
    if row:
        lines.append(row)
    return "\n".join(lines)


def dataset_plots(d: dict[str, Any], rows: dict[str, list[tuple[str, float, str, str]]],
                  folder: Path) -> list[Path]:
    drawn = [
        plots.histograms({s: [sec for _, sec, _, _ in part] for s, part in rows.items()},
                         folder / "durations.png", f"{d['dataset']}: utterance durations",
                         "duration (seconds)"),
        plots.histograms({s: [len(text) for _, _, text, _ in part] for s, part in rows.items()},
                         folder / "transcript_lengths.png",
                         f"{d['dataset']}: transcript lengths", "transcript length (characters)"),
    ]
    return [p for p in drawn if p is not None]


# -- runs ---------------------------------------------------------------------------------------


def best_scores(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The lowest value of each dev score, with the step and epoch it was reached at."""
    best: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("event") not in DEV_EVENTS:
            continue
        for name in DEV_SCORES:
            value = record.get(name)
            if isinstance(value, (int, float)) and (name not in best
                                                    or value < best[name]["value"]):
                best[name] = {"value": value, "step": record.get("step"),
                              "epoch": record.get("epoch")}
    return best


def sessions_by_machine(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``machine`` records of a run's training sessions (:mod:`asrkit.train.machine`),
    each without its ``event``; a resumption on the same machine, towers, precision and
    versions is not repeated."""
    sessions: list[dict[str, Any]] = []
    for record in records:
        if record.get("event") == "machine":
            session = {k: v for k, v in record.items() if k != "event"}
            if not sessions or _without_step(sessions[-1]) != _without_step(session):
                sessions.append(session)
    return sessions


def _without_step(session: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in session.items() if k != "step"}


def describe_run(folder: Location) -> tuple[dict[str, Any], dict[str, Any]]:
    """The description of a run, and what its plots need."""
    run = load_run(folder)
    records = read_jsonl(folder / "metrics.jsonl")
    latest = (_read_json(folder / "checkpoints" / "latest.json") or {}).get("state", {})
    steps = [r for r in records if r.get("event") == "step"]
    try:
        dataset: Location | None = run.dataset
    except AsrkitError:
        dataset = None  # moved or not imported on this machine: the rest still describes
    info = _read_json(dataset / "dataset.json") if dataset else None
    splits = (info or {}).get("splits", {})
    report = _read_json(folder / "report.json")
    progress = {
        "step": latest.get("global_step", steps[-1]["step"] if steps else 0),
        "epoch": latest.get("epoch", 0),
        "epochs": run.train.epochs,
        "steps_per_epoch": latest.get("steps_per_epoch"),
        "finished": latest.get("finished", False),
        "stop_reason": latest.get("stop_reason", ""),
        "last_loss": steps[-1].get("loss") if steps else None,
        "last_lr": steps[-1].get("lr") if steps else None,
    }
    description = {
        "run": str(folder),
        "model": run.train.model,
        "features": run.train.features,
        "config": run.to_json(),
        "dataset": {
            "name": run.train.dataset,
            "folder": str(dataset) if dataset else None,
            "splits": {s: {k: splits[s].get(k) for k in ("utterances", "hours", "speakers")}
                       for s in ordered(splits)},
        },
        "progress": progress,
        "best": best_scores(records),
        "machines": sessions_by_machine(records),
        "report": None if report is None else {
            k: report.get(k) for k in ("split", "decoder", "utterances", "wer", "cer", "loss")},
        "model_analysis": run_model_analysis(run),
    }
    return description, {"records": records, "report": report, "dataset": dataset}


def _settings(section: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in section.items())


def run_text(d: dict[str, Any]) -> str:
    p = d["progress"]
    data = d["dataset"]
    lines = [f"run {d['run']}: model {d['model']}, features {d['features']}, "
             f"dataset {data['name']} ({data['folder'] or 'not found here'})"]
    for section, values in d["config"].items():
        lines += textwrap.wrap(f"{section}: {_settings(values)}", 96, initial_indent="  ",
                               subsequent_indent="    ", break_long_words=False)
    for split, s in data["splits"].items():
        lines.append(f"  {split}: {s['utterances']} utterances, {s['hours']} h, "
                     f"{s['speakers']} speakers")
    state = ("finished: " + (p["stop_reason"] or "done")) if p["finished"] else "not finished"
    per_epoch = f", {p['steps_per_epoch']} steps an epoch" if p["steps_per_epoch"] else ""
    lines += ["", f"progress: step {p['step']:,}, epoch {p['epoch']} of {p['epochs']}"
                  f"{per_epoch} ({state})"]
    if p["last_loss"] is not None:
        lines.append(f"  last logged loss {_number(p['last_loss'])}, learning rate "
                     f"{p['last_lr']:g}")
    for session in d["machines"]:
        lines.append(f"  trained from step {session['step']:,} on {machine_text(session)}")
    best = d["best"]
    if best:
        parts = []
        for name in DEV_SCORES:
            if name in best:
                b = best[name]
                shown = _number(b["value"]) if name == "dev_loss" else _percent(b["value"])
                label = "loss" if name == "dev_loss" else name.split("_")[1].upper()
                parts.append(f"{label} {shown} (step {b['step']})")
        lines.append("best dev: " + ", ".join(parts))
    else:
        lines.append("best dev: no dev evaluation yet")
    r = d["report"]
    if r:
        lines.append(f"report ({r['split']}, {r['utterances']} utterances, {r['decoder']} "
                     f"decoder): WER {_percent(r['wer'])}, CER {_percent(r['cer'])}, "
                     f"loss {_number(r['loss'])}")
    else:
        lines.append("report: none yet (written when training finishes)")
    lines += ["", summary_text(d["model_analysis"])]
    return "\n".join(lines)


def run_plots(d: dict[str, Any], extra: dict[str, Any], folder: Path) -> list[Path]:
    records = extra["records"]
    name = Path(d["run"]).name

    def points(key: str, events: Sequence[str]) -> list[tuple[float, float]]:
        return [(r["step"], r[key]) for r in records
                if r.get("event") in events and isinstance(r.get(key), (int, float))
                and isinstance(r.get("step"), (int, float))]

    drawn = [
        plots.curves({"training loss": points("loss", ("step",))},
                     folder / "training_loss.png", f"{name}: training loss", "CTC loss",
                     log_y=True),
        plots.curves({"learning rate": points("lr", ("step",))},
                     folder / "learning_rate.png", f"{name}: learning rate", "learning rate"),
        plots.curves({"dev loss": points("dev_loss", DEV_EVENTS)},
                     folder / "dev_loss.png", f"{name}: dev loss", "CTC loss"),
        plots.curves({"dev WER": points("dev_wer", DEV_EVENTS),
                      "dev CER": points("dev_cer", DEV_EVENTS)},
                     folder / "dev_error_rates.png", f"{name}: dev WER and CER", "error rate",
                     percent=True),
    ]
    report, dataset = extra["report"], extra["dataset"]
    if report and dataset and (dataset / f"{report['split']}.csv").exists():
        seconds = {uid: sec for uid, sec, _, _ in split_rows(dataset, report["split"])}
        pairs = [(seconds[r["id"]], r["wer"]) for r in report.get("results", [])
                 if r.get("id") in seconds]
        drawn.append(plots.scatter(
            pairs, folder / "wer_by_duration.png",
            f"{name}: WER by utterance duration ({report['split']}, {len(pairs)} utterances)",
            "duration (seconds)", "WER", percent=True))
    return [p for p in drawn if p is not None]
