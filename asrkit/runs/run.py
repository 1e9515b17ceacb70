"""Run directories: what a training run is made of, saved so that it can be resumed, evaluated,
exported or compared later.

::

    runs/<name>/
      config.json        the effective configuration: train, model, features, pipeline, decoder,
                         objective
      plugins.json       installed plugins and versions (``asrkit plugins --json``)
      alphabet.txt       the dataset's alphabet (the labels, unless a tokenizer makes them)
      tokenizer.json     with ``-o tokenizer=FILE``: which tokenizer, and its file's copy
      tokenizer.model    (or the tokenizer's own suffix): that copy (:mod:`asrkit.tokenizers`)
      checkpoints/       latest.json + best.json pointers and their checkpoint folders
      metrics.jsonl      one JSON object a line: steps, epochs, evaluations, warnings, the
                         machine of each session (:mod:`asrkit.train.machine`)
      tensorboard/       the same metrics for TensorBoard
      report.json        the final evaluation (and report.txt, for people)
    runs/<name>.lock     while a training writes the run: who it is (:mod:`asrkit.core.locks`)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from asrkit import plugins
from asrkit.config.decoding import choose_decoder, decoder_settings, try_decoder
from asrkit.config.objectives import check_decodes
from asrkit.config.overrides import DecoderChoice, Overrides
from asrkit.config.pipeline import PipelineConfig
from asrkit.config.run import SAVED_SECTIONS, RunConfig, read_train, resume_config
from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.core.files import write_json
from asrkit.core.labels import Labels
from asrkit.core.locks import lock_held
from asrkit.core.settings import from_dict
from asrkit.core.storage import Location, location
from asrkit.core.text import Alphabet
from asrkit.dataset.folders import resolve_dataset
from asrkit.dataset.manifest import read_csv
from asrkit.runs.provenance import plugin_change
from asrkit.tokenizers import CHARS, TokenizerFile, read_record
from asrkit.types import Decoder, FeatureConfig, FeatureExtractor, ModelSpec, Objective


@dataclass
class Run:
    """A run folder and what it holds: its configuration (:class:`RunConfig`), the dataset's
    alphabet and the tokenizer file its labels come from."""

    folder: Location
    config: RunConfig
    alphabet: Alphabet
    #: For a new run: which preset it uses and why (printed by ``asrkit train``).
    preset_note: str = ""
    #: The feature width the run's model was built for (``num_features`` in ``config.json``;
    #: None in runs saved before it was recorded).
    feature_width: int | None = None
    #: The file ``train.tokenizer`` names, loaded; None for characters (``chars``).
    tokenizer_file: TokenizerFile | None = None

    # The sections, by the names the code reading them uses.

    @property
    def train(self) -> TrainConfig:
        return self.config.train

    @property
    def model_config(self) -> Any:
        return self.config.model

    @property
    def feature_config(self) -> FeatureConfig:
        return self.config.features

    @property
    def pipeline(self) -> PipelineConfig:
        return self.config.pipeline

    @property
    def labels(self) -> Labels:
        """What the model's output classes mean: the tokenizer's labels, else the alphabet."""
        return self.tokenizer_file.labels if self.tokenizer_file is not None else self.alphabet

    @property
    def spec(self) -> ModelSpec:
        return plugins.get("model", self.train.model)

    @property
    def extractor(self) -> FeatureExtractor:
        return plugins.get("feature", self.train.features or self.spec.features)

    @property
    def objective(self) -> Objective:
        return plugins.get("objective", self.train.objective)

    @property
    def objective_config(self) -> Any:
        return self.config.objective_config

    def encoder_width(self) -> int:
        """The width of the model's output frames, which the objective asks for
        (``labels.num_classes`` for CTC): the model is built with it."""
        return int(self.objective.encoder_width(self.objective_config, self.labels))

    def num_features(self) -> int:
        """The width of the extractor's features, which the model is built from; a one-line
        error when it is not the width the run was trained with (the extractor's plugin
        changed since), instead of a checkpoint that does not fit."""
        width = int(self.extractor.num_features(self.feature_config))
        if self.feature_width is not None and width != self.feature_width:
            raise AsrkitError(
                f"{self.folder} was trained on {self.feature_width} features a frame from "
                f"extractor {self.extractor.name!r}, which now gives {width}: install the "
                "version of its plugin the run was trained with"
            )
        return width

    @property
    def decoder(self) -> Decoder:
        """``train.decoder`` with this run's decoder settings."""
        return self.choose_decoder(DecoderChoice())

    @property
    def dev_decoder(self) -> Decoder:
        """The decoder of the dev evaluations while training: ``train.dev_decoder`` (with the
        run's decoder settings when it is the run's decoder), else the run's."""
        return self.choose_decoder(DecoderChoice(name=self.train.dev_decoder or None))

    def choose_decoder(self, choice: DecoderChoice) -> Decoder:
        """The decoder a command decoding this run's outputs uses: the run's, or the one
        ``choice`` names, with ``choice``'s settings over the run's (or that decoder's own); a
        one-line error when it cannot decode the objective's outputs."""
        check_decodes(self.objective, choice.name or self.train.decoder)
        return choose_decoder(choice, self.train.decoder, self.config.decoder)

    @property
    def dataset(self) -> Location:
        return resolve_dataset(self.train.dataset)

    def to_json(self) -> dict[str, Any]:
        return self.config.to_json()

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        width = self.feature_width or self.num_features()
        write_json(self.folder / "plugins.json", plugins.get_plugins().as_json())
        self.alphabet.save(self.folder / "alphabet.txt")
        if self.tokenizer_file is not None:
            self.tokenizer_file.save_in(self.folder)
        # Last: config.json marks a complete run folder (a watcher started with the training
        # waits for it, then loads the rest).
        write_json(self.folder / "config.json", {**self.to_json(), "num_features": width})


#: The metrics ``asrkit evaluate --watch`` can keep a best checkpoint by
#: (:mod:`asrkit.evaluation.watch`).
WATCH_METRICS = ("wer", "cer", "loss")
#: The checkpoints ``evaluate``, ``transcribe`` and ``export`` can load: ``averaged`` is written
#: by ``asrkit average``, ``best-by-METRIC`` by ``asrkit evaluate --watch`` (in ``RUN/watch``).
CHECKPOINTS = ("best", "latest", "averaged", *(f"best-by-{m}" for m in WATCH_METRICS))


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


def new_run(config: RunConfig, folder: Location | None, preset_note: str = "") -> Run:
    """A new run of ``config`` (:func:`asrkit.config.run.build_run_config`) in ``folder``
    (default: the next free ``runs/<model>-<n>``, created now), with the dataset's alphabet and
    the tokenizer file the run names, its decoder tried at once. The folder may hold a run
    already: see :func:`same_run`."""
    train = config.train
    dataset = resolve_dataset(train.dataset)
    alphabet_file = dataset / "alphabet.txt"
    alphabet = Alphabet.load(alphabet_file) if alphabet_file.exists() else Alphabet()
    extractor = plugins.get("feature", train.features)
    run = Run(folder or Path(), config, alphabet, preset_note=preset_note,
              feature_width=int(extractor.num_features(config.features)),
              tokenizer_file=_tokenizer_file(train, dataset))
    try_decoders(run)
    return replace(run, folder=folder or unfinished_run(config) or next_run_folder(train.model))


def unfinished_run(config: RunConfig, root: Path = Path("runs")) -> Path | None:
    """The newest ``root/<model>-<n>`` that holds an unfinished run (no ``report.json``) saved
    with ``config``'s settings, which no training holds now: the same ``asrkit train`` command
    run again after Ctrl-C, a kill or a crash continues it there instead of starting
    ``<model>-<n+1>`` from nothing. Folders that cannot be read are passed over."""
    wanted = _flat(config.to_json())
    numbered = []
    for folder in root.glob(f"{config.train.model}-*"):
        number = folder.name[len(config.train.model) + 1:]
        if number.isdigit() and folder.is_dir():
            numbered.append((int(number), folder))
    for _, folder in sorted(numbered, reverse=True):
        if (folder / "report.json").exists() or not (folder / "config.json").is_file():
            continue
        try:
            saved = load_run(folder)
        except (AsrkitError, OSError, ValueError):
            continue
        if _flat(saved.to_json()) == wanted and not lock_held(folder):
            return folder
    return None


def _tokenizer_file(train: TrainConfig, dataset: Location) -> TokenizerFile | None:
    """The tokenizer file a new run names, checked against the characters of the dataset's
    train and dev transcripts: one the tokenizer cannot spell stops the run now, not at the
    first batch (or the first dev evaluation) that holds it."""
    if train.tokenizer == CHARS:
        return None
    opened = TokenizerFile.open(train.tokenizer)
    characters: set[str] = set()
    for split in dict.fromkeys((train.train_split, train.dev_split)):
        listing = dataset / f"{split}.csv"
        if listing.is_file():
            for row in read_csv(listing):
                characters.update(row.transcript)
    missing = opened.labels.missing("".join(sorted(characters)))
    if missing:
        shown = "".join(missing[:10])
        raise AsrkitError(f"-o tokenizer={train.tokenizer} cannot spell {shown!r}, which "
                          f"dataset {train.dataset}'s transcripts hold; build it from that "
                          f"dataset (asrkit tokenizer build --dataset {train.dataset})")
    return opened


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


def resume_run(run: Run, overrides: Overrides) -> Run:
    """``run`` with the settings a resumed run may change changed
    (:func:`asrkit.config.run.resume_config`), its decoder tried at once."""
    changed = replace(run, config=resume_config(run.config, overrides))
    try_decoders(changed)
    return changed


def try_decoders(run: Run) -> None:
    """Try the run's decoder and its dev evaluations' now, so that what they need and lack
    (e.g. a language model) stops the command at its start, not at the first evaluation."""
    try_decoder(run.decoder, run.labels)
    if run.train.dev_decoder:
        try_decoder(run.dev_decoder, run.labels)


def load_run(folder: str | Location) -> Run:
    """A saved run, with the same plugins' config classes."""
    folder = location(folder)
    path = folder / "config.json"
    if not path.exists():
        raise AsrkitError(f"{folder} is not a run directory (no config.json)")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        sections = {name: saved[name] for name in SAVED_SECTIONS}
        if not all(isinstance(values, dict) for values in sections.values()):
            raise TypeError("a section is not an object")
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as error:
        raise AsrkitError(
            f"{path} is damaged ({type(error).__name__}: {error}); the run cannot be "
            "continued or evaluated without it: train again in a new --run-dir"
        ) from None
    train = read_train(saved["train"])
    decoder = saved.get("decoder")  # absent in runs older than decoder settings: the defaults
    if not isinstance(decoder, dict):
        decoder = None
    elif train.decoder in plugins.get_plugins().registry.names("decoder"):
        decoder = decoder_settings(train.decoder, base=decoder)
    # Runs older than objectives are ctc runs (TrainConfig's default), which has no settings.
    objective = _installed(folder, "objective", train.objective)
    spec = _installed(folder, "model", train.model)
    # Runs saved before the extractor was recorded read the model's own.
    train = replace(train, features=train.features or spec.features)
    extractor = _installed(folder, "feature", train.features)
    width = saved.get("num_features")
    configs = []
    objective_values = saved.get("objective")
    for kind, name, config, values in (("model", train.model, spec.Config, saved["model"]),
                                       ("feature", train.features, extractor.Config,
                                        saved["features"]),
                                       ("objective", train.objective, objective.Config,
                                        objective_values if isinstance(objective_values, dict)
                                        else {})):
        try:
            configs.append(from_dict(config, values))
        except AsrkitError:
            changed = plugin_change(folder, kind, name)
            if changed is None:
                raise
            raise AsrkitError(changed.message(folder, "the settings in its config.json")
                              ) from None
    model_config, feature_config, objective_config = configs
    config = RunConfig(train, model_config, feature_config,
                       from_dict(PipelineConfig, saved["pipeline"]), decoder, objective_config)
    return Run(
        folder,
        config,
        Alphabet.load(folder / "alphabet.txt"),
        feature_width=width if isinstance(width, int) else None,
        tokenizer_file=None if train.tokenizer == CHARS else _saved_tokenizer(folder),
    )


def _saved_tokenizer(folder: Location) -> TokenizerFile:
    name, path = read_record(folder)
    tokenizer = _installed(folder, "tokenizer", name)
    return TokenizerFile(name, path, tokenizer.load(path))


def _installed(folder: Location, kind: str, name: str) -> Any:
    """The installed ``kind`` ``name``; when there is none, an error that names the plugin
    and version the run in ``folder`` was made with."""
    try:
        return plugins.get(kind, name)
    except AsrkitError:
        missing = plugin_change(folder, kind, name)
        if missing is None or missing.installed:
            raise
        raise AsrkitError(missing.message(folder)) from None


