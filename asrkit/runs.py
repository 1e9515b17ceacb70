"""Run directories: what a training run is made of, saved so that it can be resumed, evaluated,
exported or compared later.

::

    runs/<name>/
      config.json        the effective configuration: train, model, features, pipeline
      plugins.json       installed plugins and versions (``asrkit plugins --json``)
      alphabet.txt       the alphabet the labels use
      checkpoints/       latest.json + best.json pointers and their checkpoint folders
      metrics.jsonl      one JSON object a line: steps, epochs, evaluations, warnings
      tensorboard/       the same metrics for TensorBoard
      report.json        the final evaluation (and report.txt, for people)
    runs/<name>.lock     while a training writes the run: who it is (:mod:`asrkit.locks`)
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from asrkit.data.manifest import DATASET_JSON, load_dataset_json, write_json
from asrkit.errors import AsrkitError
from asrkit.text import Alphabet
from asrkit.train.config import (
    TrainConfig,
    check_names,
    from_dict,
    override,
    split_overrides,
    to_dict,
)


def resolve_dataset(name: str) -> Path:
    """A dataset given by folder or by name (``$ASRKIT_HOME/datasets/<name>``); a damaged
    ``dataset.json`` is an error, since it means the import did not end well."""
    from asrkit.data.importing import asrkit_home

    for candidate in (Path(name), asrkit_home() / "datasets" / name):
        if (candidate / DATASET_JSON).exists():
            load_dataset_json(candidate)
            return candidate
    raise AsrkitError(
        f"no imported dataset {name!r} (looked in ./{name} and {asrkit_home() / 'datasets'}); "
        f"import it first, e.g. `asrkit import {name}`"
    )


@dataclass
class Run:
    """A run's configuration and the plugins it uses."""

    folder: Path
    train: TrainConfig
    model_config: Any
    feature_config: Any
    pipeline: Any
    alphabet: Alphabet
    #: For a new run: which preset it uses and why (printed by ``asrkit train``).
    preset_note: str = ""

    @property
    def spec(self) -> Any:
        from asrkit import plugins

        return plugins.get("model", self.train.model)

    @property
    def extractor(self) -> Any:
        from asrkit import plugins

        return plugins.get("feature", self.spec.features)

    @property
    def dataset(self) -> Path:
        return resolve_dataset(self.train.dataset)

    def to_json(self) -> dict[str, Any]:
        return {"train": to_dict(self.train), "model": to_dict(self.model_config),
                "features": to_dict(self.feature_config), "pipeline": to_dict(self.pipeline)}

    def save(self) -> None:
        from asrkit.plugins import get_plugins

        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / "config.json", self.to_json())
        write_json(self.folder / "plugins.json", get_plugins().as_json())
        self.alphabet.save(self.folder / "alphabet.txt")


def next_run_folder(model: str, root: Path = Path("runs")) -> Path:
    """The first free ``root/<model>-<n>``, created at once, so that two trainings started
    together never pick the same one."""
    root.mkdir(parents=True, exist_ok=True)
    number = 1
    while True:
        folder = root / f"{model}-{number}"
        try:
            folder.mkdir()
        except FileExistsError:
            number += 1
            continue
        return folder


def new_run(train: TrainConfig, overrides: list[str], folder: Path | None,
            named: Collection[str] = ()) -> Run:
    """A run from defaults, the model's preset, and ``-o`` overrides (in that order; unknown
    keys are errors). ``named`` lists the ``train`` fields set in ``train`` by named options,
    which the preset leaves alone. The folder may hold a run already: see :func:`same_run`."""
    from asrkit import plugins
    from asrkit.data.pipeline import PipelineConfig
    from asrkit.presets import choose_preset, preset_overrides

    users = split_overrides(overrides).get("train", [])
    requested = _overridden(train, users)  # which model and preset the user asks for
    spec = plugins.get("model", requested.model)
    preset, why = choose_preset(spec, requested.preset, requested.devices)
    from_preset = preset_overrides(spec, preset)
    # The preset first; a named option (--batch-size) and every -o win over it.
    presets = [(k, v) for k, v in split_overrides(from_preset).get("train", []) if k not in named]
    train = replace(_overridden(_overridden(train, presets), users), preset=preset or "none")
    check_names(train)
    sections = split_overrides(from_preset + list(overrides))
    model_config = spec.Config()
    for key, value in sections.get("model", []):
        model_config = override(model_config, key, value)
    extractor = plugins.get("feature", spec.features)
    feature_config = extractor.Config()
    for key, value in sections.get("features", []):
        feature_config = override(feature_config, key, value)
    pipeline = PipelineConfig(batch_size=train.batch_size, seed=train.seed)
    for key, value in sections.get("pipeline", []):
        if key in ("batch_size", "seed"):
            raise AsrkitError(f"set the {key} with --{key.replace('_', '-')} (or -o {key}=...)")
        pipeline = override(pipeline, key, value)
    dataset = resolve_dataset(train.dataset)
    alphabet_file = dataset / "alphabet.txt"
    alphabet = Alphabet.load(alphabet_file) if alphabet_file.exists() else Alphabet()
    folder = folder or next_run_folder(train.model)
    return Run(folder, train, model_config, feature_config, pipeline, alphabet,
               preset_note=f"preset: {preset or 'none'} ({why})")


def same_run(run: Run) -> Run:
    """The run saved in ``run``'s folder, when its settings are ``run``'s: the same ``asrkit
    train`` command run again (after a crash, Ctrl-C, on every worker) continues it. Other
    settings are a one-line error: ``--resume`` is the way to change train settings."""
    saved = load_run(run.folder)
    wanted, there = _flat(run.to_json()), _flat(saved.to_json())
    differences = [f"{key} {there.get(key)} there, {wanted.get(key)} here"
                   for key in sorted(set(wanted) | set(there)) if wanted.get(key) != there.get(key)]
    if differences:
        shown = "; ".join(differences[:3]) + ("; ..." if len(differences) > 3 else "")
        raise AsrkitError(
            f"{run.folder} holds a run with other settings ({shown}); continue it with "
            f"--resume {run.folder} (-o may change train settings) or choose a new --run-dir"
        )
    return saved


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """``{"train": {"epochs": 3}}`` -> ``{"epochs": 3}`` (``model.n_hidden`` for the other
    sections), with JSON's types (lists, not tuples)."""
    config = json.loads(json.dumps(config))
    return {(key if section == "train" else f"{section}.{key}"): value
            for section, values in config.items() for key, value in values.items()}


def _overridden(config: Any, pairs: list[tuple[str, str]]) -> Any:
    for key, value in pairs:
        config = override(config, key, value)
    return config


#: Settings outside ``train`` that a resumed run may change: the size of its batches, like
#: ``batch_size`` (after running out of memory), on which the weights do not depend.
RESUMABLE = {("pipeline", "batch_seconds")}


def override_run(run: Run, overrides: list[str]) -> Run:
    """``run`` with ``train`` settings changed (for ``--resume -o batch_size=8``, after running
    out of memory, or ``-o epochs=20`` to train longer), and :data:`RESUMABLE` ones; other
    sections are fixed once a run has started, since the weights depend on them."""
    sections = split_overrides(overrides)
    saved = {"model": run.model_config, "features": run.feature_config, "pipeline": run.pipeline}
    pipeline = run.pipeline
    for section, pairs in sections.items():
        if section == "train":
            continue
        for key, value in pairs:  # the run's own value again (the same command line) is fine
            if (section, key) in RESUMABLE:
                pipeline = override(pipeline, key, value)
                continue
            if override(saved[section], key, value) != saved[section]:
                raise AsrkitError(
                    f"-o {section}.{key}={value}: a resumed run keeps its {section} settings; "
                    "only train settings can change"
                )
    train = run.train
    for key, value in sections.get("train", []):
        train = override(train, key, value)
    check_names(train)
    pipeline = replace(pipeline, batch_size=train.batch_size, seed=train.seed)
    return replace(run, train=train, pipeline=pipeline)


def load_run(folder: str | Path) -> Run:
    """A saved run, with the same plugins' config classes."""
    from asrkit import plugins
    from asrkit.data.pipeline import PipelineConfig

    folder = Path(folder)
    path = folder / "config.json"
    if not path.exists():
        raise AsrkitError(f"{folder} is not a run directory (no config.json)")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        sections = {name: saved[name] for name in ("train", "model", "features", "pipeline")}
        if not all(isinstance(values, dict) for values in sections.values()):
            raise TypeError("a section is not an object")
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as error:
        raise AsrkitError(
            f"{path} is damaged ({type(error).__name__}: {error}); the run cannot be "
            "continued or evaluated without it: train again in a new --run-dir"
        ) from None
    train = from_dict(TrainConfig, saved["train"])
    spec = plugins.get("model", train.model)
    extractor = plugins.get("feature", spec.features)
    return Run(
        folder,
        train,
        from_dict(spec.Config, saved["model"]),
        from_dict(extractor.Config, saved["features"]),
        from_dict(PipelineConfig, saved["pipeline"]),
        Alphabet.load(folder / "alphabet.txt"),
    )


def append_metrics(folder: Path, record: dict[str, Any]) -> None:
    with open(folder / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


#: The checkpoints ``evaluate``, ``transcribe`` and ``export`` can load (``averaged``: written by
#: ``asrkit average``).
CHECKPOINTS = ("best", "latest", "averaged")


def load_run_model(folder: str | Path, checkpoint: str = "best") -> tuple[Run, Any, dict[str, Any]]:
    """A saved run, its model with the ``checkpoint`` weights (``best`` or ``latest``; the other
    when that one is missing or damaged; their moving average when the run keeps one), and
    that checkpoint's state: what evaluation, transcription and export all start from."""
    from asrkit.train.checkpoints import Checkpoints
    from asrkit.train.ema import load_averaged, shadow_of

    run = load_run(folder)
    model = run.spec.build(run.model_config, run.extractor.num_features(run.feature_config),
                           run.alphabet.num_classes)
    shadow = shadow_of(model)  # the moving average of the weights, when the run keeps one
    state = Checkpoints(run.folder / "checkpoints", model=model, ema=shadow).restore(checkpoint)
    if state is None and checkpoint == "averaged":
        raise AsrkitError(f"{run.folder} has no averaged checkpoint; write one with `asrkit "
                          f"average {run.folder} --last N`")
    if state is None:
        raise AsrkitError(f"{run.folder} has no checkpoint yet; train it first")
    load_averaged(model, shadow, state)
    return run, model, state
