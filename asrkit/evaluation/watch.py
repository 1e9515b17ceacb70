"""``asrkit evaluate RUN --watch``: score every checkpoint of a training as it is written.

A watcher runs beside ``asrkit train`` (on the same machine, or on another one that sees the run
folder) so that the training never stops for an evaluation (``-o evaluate_dev=false`` turns the
trainer's own dev evaluations off), and so that any decoder (a beam search with a language model,
too slow to run inside the training) scores every checkpoint, on several splits.

Two threads. The *snapshot* thread reads the run's checkpoint pointers (``latest.json``,
``best.json``) every :data:`SNAPSHOT_SECONDS` and hard-links the files of each new checkpoint into
``RUN/watch/pending/``: the trainer keeps only the checkpoints its pointers name and deletes the
others at its next save, but a hard link keeps the data until the watcher has scored it, however
slow the scoring. While a watcher holds its lock, the trainer also links each checkpoint it saves
into ``pending`` itself (:func:`asrkit.train.snapshots.hand_over`) before deleting older ones,
so that no checkpoint is missed between two polls. The main thread scores the snapshots in step
order and then deletes them. A checkpoint deleted between its pointer's reading and the link
(one saved before the watcher started) is skipped with a note (a line in ``evaluations.jsonl``
too, so that it is not looked for again).

What a watcher writes into the run::

    evaluations.jsonl               a line per checkpoint and split: step, split, decoder, WER,
                                    CER, loss, counts (or ``skipped`` and why)
    tensorboard/watch-<decoder>/    the same as TensorBoard scalars <split>/wer, /cer, /loss
    watch/best-by-<metric>.json     pointer to the checkpoint with the lowest <metric> on the
    watch/ckpt-<step>-best-by-...   first split, the files hard-linked (copied where links are
                                    impossible), written as the trainer writes its checkpoints:
                                    folder first, then the pointer replaced atomically
    watch/pending/                  snapshots not yet scored
    watch.lock                      while a watcher runs: one watcher per run

A checkpoint is identified by its global step: the trainer may save one step twice (an epoch end
after a step-cadence save, the stop) with the same weights. Killed and restarted, a watcher
scores the snapshots a previous one left and skips every (step, split, decoder) that
``evaluations.jsonl`` already has.

The watcher ends by itself when no training holds the run's lock (:mod:`asrkit.core.locks`), the
latest checkpoint's state says the training finished (``finished``, with a ``stop_reason`` other
than ``interrupted``), and that checkpoint is scored. A training that stopped without finishing
(Ctrl-C, or killed) may be resumed: the watcher says so and keeps waiting.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asrkit.config.overrides import DecoderChoice
from asrkit.core.errors import AsrkitError
from asrkit.core.files import sync_to_disk, write_atomic
from asrkit.core.locks import folder_lock, lock_held
from asrkit.core.storage import StoragePath, location
from asrkit.dataset.shards import damaged_dataset_error
from asrkit.pipeline.batches import make_dataset
from asrkit.runs.run import WATCH_METRICS, load_run
from asrkit.runs.scoring import evaluate_dataset, make_predict
from asrkit.train.checkpoints import networks
from asrkit.train.growth import Growth
from asrkit.train.snapshots import (
    PENDING,
    SNAPSHOT_STATE,
    STAGING,
    WATCH_FOLDER,
    link_or_copy,
    link_snapshot,
)

EVALUATIONS = "evaluations.jsonl"
METRICS = WATCH_METRICS
#: How often the snapshot thread reads the pointers: well below the time a training takes to
#: write two checkpoints, so that it sees each of them.
SNAPSHOT_SECONDS = 0.1
#: How often the main thread looks for snapshots to score, and repeats a note while waiting.
POLL_SECONDS = 1.0


def decoder_label(decoder: str, choice: DecoderChoice) -> str:
    """``greedy``, ``beam-beam_width=100``: names a decoder with the settings ``choice``
    changes, in keys and folder names."""
    parts = [decoder, *(f"{key}={value}" for key, value in choice.settings)]
    return re.sub(r"[^A-Za-z0-9_.=,-]", "_", "-".join(parts))


@dataclass
class Snapshot:
    folder: Path
    step: int
    state: dict[str, Any] = field(default_factory=dict)


def local_run(folder: str | Path | StoragePath) -> Path:
    """The run folder a watcher works in, which must be on a disk: it links each checkpoint
    into a snapshot, and object storage has no links."""
    where = location(folder)
    if isinstance(where, StoragePath):
        raise AsrkitError(f"evaluate --watch needs the run on a disk (a local or shared "
                          f"filesystem), not at {where}: it links checkpoints into snapshots, "
                          "which object storage cannot; evaluate the run's checkpoints after "
                          "training instead (asrkit evaluate RUN --checkpoint latest)")
    return where


class Watcher:
    """Scores a run's checkpoints on ``splits`` with a decoder; see the module docstring."""

    def __init__(self, run_folder: str | Path, splits: Sequence[str],
                 decoder: DecoderChoice | None = None, best_by: str = "wer",
                 progress: bool = True, echo: Callable[[str], None] = print) -> None:
        if best_by not in METRICS:
            raise AsrkitError(f"--best-by {best_by}: choose one of {', '.join(METRICS)}")
        self.folder = local_run(run_folder)
        self.run = load_run(self.folder)
        self.splits = list(splits) or [self.run.train.dev_split]
        self.choice = decoder or DecoderChoice()
        self.label = decoder_label(self.choice.name or self.run.train.decoder, self.choice)
        self.best_by = best_by
        self.progress = progress
        self.echo = echo
        self.watch = self.folder / WATCH_FOLDER
        self.pending = self.watch / PENDING
        self.checkpoints = self.folder / "checkpoints"
        self._write_lock = threading.Lock()
        self.scored = self._scored()  # steps whose every split is in evaluations.jsonl
        self.taken: set[int] = set()  # steps snapshotted by this process
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self._said_waiting = ""

    # -- records ------------------------------------------------------------------------------

    def _records(self) -> list[dict[str, Any]]:
        try:
            lines = (self.folder / EVALUATIONS).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:  # a line cut short by a kill
                continue
        return [r for r in records if isinstance(r, dict) and r.get("decoder") == self.label]

    def _scored(self) -> set[int]:
        done: dict[int, set[str]] = {}
        for record in self._records():
            done.setdefault(int(record.get("step", -1)), set()).add(str(record.get("split")))
        return {step for step, splits in done.items() if set(self.splits) <= splits}

    def _append(self, record: dict[str, Any]) -> None:
        with self._write_lock, open(self.folder / EVALUATIONS, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _skip(self, step: int, why: str) -> None:
        self.echo(f"asrkit: note: checkpoint of step {step} skipped: {why}")
        for split in self.splits:
            self._append({"step": step, "split": split, "decoder": self.label, "skipped": why,
                          "time": time.time()})
        self.scored.add(step)

    # -- the snapshot thread ------------------------------------------------------------------

    def _pointer(self, kind: str) -> dict[str, Any] | None:
        try:
            saved = json.loads((self.checkpoints / f"{kind}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # none yet, or being replaced: read again at the next poll
        if not (isinstance(saved, dict) and isinstance(saved.get("state"), dict)
                and isinstance(saved.get("folder"), str) and "/" not in saved["folder"]):
            return None
        return saved

    def snapshot(self, name: str, state: dict[str, Any]) -> Snapshot | None:
        """Hard-link the checkpoint folder ``name`` into ``watch/pending``; None when the
        trainer has deleted it meanwhile: with a note, unless the trainer handed it over first."""
        step = int(state.get("global_step", -1))
        try:
            folder = link_snapshot(self.checkpoints, self.pending, name, state)
        except FileNotFoundError:
            # The trainer hands each checkpoint over itself before deleting it (hand_over):
            # then its snapshot waits in pending, or is scored already, and nothing is lost.
            if (self.pending / name / SNAPSHOT_STATE).is_file() or step in self.scored:
                return None
            self._skip(step, f"the training deleted it ({name}) before it could be read; a "
                             "newer checkpoint replaced it")
            return None
        return Snapshot(folder, step, state)

    def _take_new(self) -> None:
        for kind in ("latest", "best"):
            saved = self._pointer(kind)
            if saved is None:
                continue
            step = int(saved["state"].get("global_step", -1))
            if step in self.taken or step in self.scored:
                continue
            self.taken.add(step)
            self.snapshot(saved["folder"], saved["state"])

    def _finished(self) -> bool:
        """Whether no training runs, the latest checkpoint says it finished, and it is taken."""
        running = lock_held(self.folder)  # a training's; before reading the pointers
        self._take_new()  # a pointer written before the training let go of its lock is seen
        if running:
            return False
        latest = self._pointer("latest")
        if latest is None:
            self._waiting("no training runs and there is no checkpoint yet; waiting for one")
            return False
        state = latest["state"]
        if not state.get("finished") or state.get("stop_reason") == "interrupted":
            self._waiting(f"the training stopped at step {state.get('global_step')} without "
                          "finishing (interrupted or killed); waiting for it to be resumed")
            return False
        return int(state.get("global_step", -1)) in self.taken | self.scored

    def _waiting(self, note: str) -> None:
        if note != self._said_waiting:
            self.echo(f"asrkit: note: {note}")
            self._said_waiting = note

    def _snapshot_loop(self) -> None:
        try:
            while not self._finished():
                time.sleep(SNAPSHOT_SECONDS)
        except BaseException as error:  # handed to the main thread, which raises it
            self.failure = error
        self.done.set()

    # -- scoring ------------------------------------------------------------------------------

    def _pending(self) -> list[Snapshot]:
        """Complete snapshots (a snapshot is linked under a staging name and renamed when
        complete), oldest step first."""
        found = []
        for folder in self.pending.glob("ckpt-*"):
            try:
                state = json.loads((folder / SNAPSHOT_STATE).read_text())
            except (OSError, ValueError):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            found.append(Snapshot(folder, int(state.get("global_step", -1)), state))
        return sorted(found, key=lambda s: s.step)

    def _setup_scoring(self) -> None:
        import tensorflow as tf

        run = self.run
        extractor = run.extractor
        self.model_config = None
        self._build_model(run.model_config)
        # The run's decoder settings, as evaluate uses them, with -o decoder.KEY=VALUE on top.
        self.decoder = run.choose_decoder(self.choice)
        self.batches = {split: make_dataset(run.dataset, split, run.labels, extractor,
                                            run.feature_config, run.pipeline.for_evaluation())
                        for split in self.splits}
        self.writer = tf.summary.create_file_writer(
            str(self.folder / "tensorboard" / f"watch-{self.label}"))

    def _build_model(self, model_config: Any) -> None:
        """The model at ``model_config``'s size, the reader of its checkpoints and its compiled
        prediction; built again only when a growing run's size changes
        (:mod:`asrkit.train.growth`)."""
        import tensorflow as tf

        if model_config == self.model_config:
            return
        run = self.run
        num_features = run.extractor.num_features(run.feature_config)
        width = run.encoder_width()
        self.model = run.spec.build(model_config, num_features, width)
        self.head = run.objective.build(run.objective_config, width, run.labels)
        self.reader = tf.train.Checkpoint(**networks(self.model, self.head))
        self.predict = make_predict(self.model, run.spec, model_config, num_features,
                                    objective=run.objective,
                                    objective_config=run.objective_config, head=self.head)
        self.model_config = model_config

    def score(self, snapshot: Snapshot) -> None:
        """Evaluate one snapshot on every split; record, log, keep it if it is the best."""
        import tensorflow as tf

        growth = Growth.of(self.run.train, self.run.spec, self.run.model_config)
        if growth is not None:  # the size the snapshot was saved at
            self._build_model(growth.config_at(self.run.model_config,
                                               int(snapshot.state.get("epoch", 0))))
        try:
            self.reader.read(str(snapshot.folder / "ckpt")).expect_partial()
        except (tf.errors.OpError, ValueError) as error:
            reason = str(error).strip().splitlines()[0]
            self._skip(snapshot.step, f"its files cannot be read ({reason})")
            return
        done = {str(r.get("split")) for r in self._records() if r.get("step") == snapshot.step}
        results = {}
        for split in self.splits:
            if split in done:
                continue
            try:
                evaluation = evaluate_dataset(self.predict, self.batches[split], self.decoder,
                                              self.run.labels, split, self.progress)
            except tf.errors.DataLossError:
                error = damaged_dataset_error(self.run.dataset)
                if error is None:
                    raise
                raise error from None
            row = {k: v for k, v in evaluation.to_json().items()
                   if k not in ("samples", "results", "decoder")}
            record = {"step": snapshot.step, "epoch": snapshot.state.get("epoch"),
                      "decoder": self.label, "checkpoint": snapshot.folder.name,
                      "time": time.time(), **row}
            self._append(record)
            with self.writer.as_default():
                for name in METRICS:
                    tf.summary.scalar(f"{split}/{name}", record[name], step=snapshot.step)
            self.writer.flush()
            results[split] = record
        self.scored.add(snapshot.step)
        best = self._keep_if_best(snapshot, results.get(self.splits[0]))
        shown = "; ".join(f"{split} WER {r['wer']:.2%}, CER {r['cer']:.2%}, loss {r['loss']:.3f}"
                          for split, r in results.items())
        self.echo(f"step {snapshot.step}: {shown or 'scored before'} ({self.label})"
                  + (f" [best by {self.best_by}]" if best else ""))

    # -- best-by-<metric> ---------------------------------------------------------------------

    @property
    def best_pointer(self) -> Path:
        return self.watch / f"best-by-{self.best_by}.json"

    def _best_value(self) -> float | None:
        try:
            watch = json.loads(self.best_pointer.read_text())["state"]["watch"]
            if (watch["decoder"], watch["split"]) != (self.label, self.splits[0]):
                return None  # another decoder's or split's best: not comparable; replaced
            return float(watch["value"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _keep_if_best(self, snapshot: Snapshot, record: dict[str, Any] | None) -> bool:
        """Hard-link the snapshot as the best-by-<metric> checkpoint when its first split's
        metric is the lowest so far: a new folder, then the pointer replaced atomically, then
        the older folders removed (as :class:`asrkit.train.checkpoints.Checkpoints` saves)."""
        if record is None:
            return False
        value = float(record[self.best_by])
        best = self._best_value()
        if best is not None and not value < best:
            return False
        kind = f"best-by-{self.best_by}"
        name = f"ckpt-{snapshot.step:09d}-{kind}-{secrets.token_hex(4)}"
        target = self.watch / name
        target.mkdir()
        for path in snapshot.folder.iterdir():
            if path.name != SNAPSHOT_STATE:
                link_or_copy(path, target / path.name)
        sync_to_disk(target)
        state = {**snapshot.state, "watch": {
            "metric": self.best_by, "value": value, "split": self.splits[0],
            "decoder": self.label, "checkpoint": snapshot.folder.name}}
        write_atomic(self.best_pointer, json.dumps({"folder": name, "state": state}, indent=2)
                     + "\n")
        sync_to_disk(self.watch)
        for old in self.watch.glob(f"ckpt-*-{kind}-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        return True

    # -- the whole --------------------------------------------------------------------------

    def run_until_finished(self) -> int:
        """Watch until the training has finished and its last checkpoint is scored; returns
        how many checkpoints this process scored."""
        self.pending.mkdir(parents=True, exist_ok=True)
        with folder_lock(self.watch, "watch", "one watcher per run: wait for it to end"):
            for staging in self.pending.glob(f"{STAGING}*"):  # a killed watcher's
                shutil.rmtree(staging, ignore_errors=True)
            # Snapshots first: loading TensorFlow and the model takes seconds, in which a
            # training may write (and delete) checkpoints.
            thread = threading.Thread(target=self._snapshot_loop, name="asrkit-watch",
                                      daemon=True)
            thread.start()
            self._setup_scoring()
            self.echo(f"watching {self.folder}: scoring every checkpoint on "
                      f"{', '.join(self.splits)} with the {self.label} decoder")
            count = 0
            while True:
                finished = self.done.is_set()  # before listing: every snapshot is there
                if self.failure is not None:
                    raise self.failure
                for snapshot in self._pending():
                    if snapshot.step not in self.scored:
                        self.score(snapshot)
                        count += 1
                    shutil.rmtree(snapshot.folder, ignore_errors=True)
                if finished and not self._pending():
                    break
                self.done.wait(POLL_SECONDS)
            thread.join()
        self.echo(f"the training has finished; {count} checkpoint{'' if count == 1 else 's'} "
                  f"scored in this watch (results: {self.folder / EVALUATIONS})")
        return count


def watch_run(folder: str | Path, splits: Sequence[str] = (),
              decoder: DecoderChoice | None = None, best_by: str = "wer", progress: bool = True,
              echo: Callable[[str], None] = print) -> int:
    """``asrkit evaluate RUN --watch``: wait for the run to start when a training is starting
    it, then :meth:`Watcher.run_until_finished`."""
    folder = local_run(folder)
    while not (folder / "config.json").exists():
        if not lock_held(folder):
            raise AsrkitError(f"{folder} is not a run directory (no config.json), and no "
                              "training is writing it")
        time.sleep(POLL_SECONDS)
    return Watcher(folder, splits, decoder, best_by, progress, echo).run_until_finished()
