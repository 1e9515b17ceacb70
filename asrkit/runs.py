"""Run directories: what a training run is made of, saved so that it can be resumed, evaluated,
exported or compared later.

::

    runs/<name>/
      config.json        the effective configuration: train, model, features, pipeline, decoder
      plugins.json       installed plugins and versions (``asrkit plugins --json``)
      alphabet.txt       the dataset's alphabet (the labels, unless a tokenizer makes them)
      tokenizer.json     with ``-o tokenizer=FILE``: which tokenizer, and its file's copy
      tokenizer.model    (or the tokenizer's own suffix): that copy (:mod:`asrkit.tokenizers`)
      checkpoints/       latest.json + best.json pointers and their checkpoint folders
      metrics.jsonl      one JSON object a line: steps, epochs, evaluations, warnings
      tensorboard/       the same metrics for TensorBoard
      report.json        the final evaluation (and report.txt, for people)
    runs/<name>.lock     while a training writes the run: who it is (:mod:`asrkit.locks`)
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from asrkit.datasets import resolve_dataset
from asrkit.decoders import decoder_config, try_decoder
from asrkit.errors import AsrkitError
from asrkit.files import write_json
from asrkit.frames import check_sample_rate
from asrkit.labels import Labels
from asrkit.settings import from_dict, override, to_dict
from asrkit.text import Alphabet
from asrkit.tokenizers import CHARS, TokenizerFile, read_record
from asrkit.train.config import TrainConfig, check_names, split_overrides


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
    #: The feature width the run's model was built for (``num_features`` in ``config.json``;
    #: None in runs saved before it was recorded).
    feature_width: int | None = None
    #: The ``Config`` of ``train.decoder`` (dev scoring, the report); ``None``: its defaults; a
    #: dict: as saved, for a decoder not installed here.
    decoder_config: Any = None
    #: The file ``train.tokenizer`` names, loaded; None for characters (``chars``).
    tokenizer_file: TokenizerFile | None = None

    @property
    def labels(self) -> Labels:
        """What the model's output classes mean: the tokenizer's labels, else the alphabet."""
        return self.tokenizer_file.labels if self.tokenizer_file is not None else self.alphabet

    @property
    def spec(self) -> Any:
        from asrkit import plugins

        return plugins.get("model", self.train.model)

    @property
    def extractor(self) -> Any:
        from asrkit import plugins

        return plugins.get("feature", self.train.features or self.spec.features)

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
    def decoder(self) -> Any:
        """``train.decoder`` with this run's decoder settings."""
        from asrkit import plugins

        decoder = plugins.get("decoder", self.train.decoder)
        config = self.decoder_config
        if isinstance(config, dict):
            config = from_dict(type(decoder.config), config)
        return decoder if config is None else decoder.with_config(config)

    @property
    def dataset(self) -> Path:
        return resolve_dataset(self.train.dataset)

    def to_json(self) -> dict[str, Any]:
        return {"train": to_dict(self.train), "model": to_dict(self.model_config),
                "features": to_dict(self.feature_config), "pipeline": to_dict(self.pipeline),
                "decoder": (self.decoder_config if isinstance(self.decoder_config, dict)
                            else to_dict(self.decoder.config))}

    def save(self) -> None:
        from asrkit.plugins import get_plugins

        self.folder.mkdir(parents=True, exist_ok=True)
        width = self.feature_width or self.num_features()
        write_json(self.folder / "plugins.json", get_plugins().as_json())
        self.alphabet.save(self.folder / "alphabet.txt")
        if self.tokenizer_file is not None:
            self.tokenizer_file.save_in(self.folder)
        # Last: config.json marks a complete run folder (a watcher started with the training
        # waits for it, then loads the rest).
        write_json(self.folder / "config.json", {**self.to_json(), "num_features": width})


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
    features = requested.features or spec.features
    if features != spec.features:  # the preset's feature settings are for the model's own
        tuned = [pair for pair in from_preset if pair.startswith("features.")]
        from_preset = [pair for pair in from_preset if pair not in tuned]
        if tuned:
            why += f"; its {spec.features} settings are not applied to {features}"
    # The preset first; a named option (--batch-size) and every -o win over it.
    presets = [(k, v) for k, v in split_overrides(from_preset).get("train", []) if k not in named]
    train = replace(_overridden(_overridden(train, presets), users), preset=preset or "none",
                    features=features)
    check_names(train)
    sections = split_overrides(from_preset + list(overrides))
    decoder = decoder_config(train.decoder, sections.get("decoder", []))
    model_config = spec.Config()
    for key, value in sections.get("model", []):
        model_config = override(model_config, key, value)
    extractor = plugins.get("feature", features)
    feature_config = extractor.Config()
    for key, value in sections.get("features", []):
        feature_config = override(feature_config, key, value)
    check_sample_rate(feature_config, f"features {features!r}")  # and that it declares framing
    pipeline = PipelineConfig(batch_size=train.batch_size, seed=train.seed)
    for key, value in sections.get("pipeline", []):
        if key in ("batch_size", "seed"):
            raise AsrkitError(f"set the {key} with --{key.replace('_', '-')} (or -o {key}=...)")
        pipeline = override(pipeline, key, value)
    dataset = resolve_dataset(train.dataset)
    alphabet_file = dataset / "alphabet.txt"
    alphabet = Alphabet.load(alphabet_file) if alphabet_file.exists() else Alphabet()
    run = Run(folder or Path(), train, model_config, feature_config, pipeline, alphabet,
              preset_note=f"preset: {preset or 'none'} ({why})",
              feature_width=int(extractor.num_features(feature_config)),
              decoder_config=decoder, tokenizer_file=_tokenizer_file(train, dataset))
    try_decoder(run.decoder, run.labels)  # e.g. a language model it needs: now, not at the end
    return replace(run, folder=folder or next_run_folder(train.model))


def _tokenizer_file(train: TrainConfig, dataset: Path) -> TokenizerFile | None:
    """The tokenizer file a new run names, checked against the characters of the dataset's
    train and dev transcripts: one the tokenizer cannot spell stops the run now, not at the
    first batch (or the first dev evaluation) that holds it."""
    if train.tokenizer == CHARS:
        return None
    from asrkit.data.manifest import read_csv

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
        if section in ("train", "decoder"):  # the decoder only reads the weights
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
        if key == "tokenizer" and value != run.train.tokenizer:
            raise AsrkitError(f"-o tokenizer={value}: a resumed run keeps its tokenizer "
                              f"({run.train.tokenizer}); fine-tune a new run with --init-from")
        if key == "features" and (value or run.spec.features) != run.train.features:
            raise AsrkitError(f"-o features={value}: a resumed run keeps its feature extractor "
                              f"({run.train.features}); train a new run for another")
        train = override(train, key, value)
    check_names(train)
    pipeline = replace(pipeline, batch_size=train.batch_size, seed=train.seed)
    same = train.decoder == run.train.decoder and not isinstance(run.decoder_config, dict)
    decoder = decoder_config(train.decoder, sections.get("decoder", []),
                             to_dict(run.decoder_config) if same and run.decoder_config else None)
    changed = replace(run, train=train, pipeline=pipeline, decoder_config=decoder)
    try_decoder(changed.decoder, changed.labels)
    return changed


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
    train = from_dict(TrainConfig, _renamed_train_settings(saved["train"]))
    decoder = saved.get("decoder")  # absent in runs older than decoder settings: the defaults
    if not isinstance(decoder, dict):
        decoder = None
    elif train.decoder in plugins.get_plugins().registry.names("decoder"):
        decoder = decoder_config(train.decoder, saved=decoder)
    spec = _installed(folder, "model", train.model)
    # Runs saved before the extractor was recorded read the model's own.
    train = replace(train, features=train.features or spec.features)
    extractor = _installed(folder, "feature", train.features)
    width = saved.get("num_features")
    configs = []
    for kind, name, config, values in (("model", train.model, spec.Config, saved["model"]),
                                       ("feature", train.features, extractor.Config,
                                        saved["features"])):
        try:
            configs.append(from_dict(config, values))
        except AsrkitError:
            changed = plugin_change(folder, kind, name)
            if changed is None:
                raise
            raise AsrkitError(changed.message(folder, "the settings in its config.json")
                              ) from None
    return Run(
        folder,
        train,
        *configs,
        from_dict(PipelineConfig, saved["pipeline"]),
        Alphabet.load(folder / "alphabet.txt"),
        feature_width=width if isinstance(width, int) else None,
        decoder_config=decoder,
        tokenizer_file=None if train.tokenizer == CHARS else _saved_tokenizer(folder),
    )


def _renamed_train_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Train settings of an older version under today's names: runs saved before
    ``precision`` had ``mixed_precision`` (true: float16 products), and keep what they had."""
    values = dict(values)
    if "mixed_precision" in values:
        mixed = values.pop("mixed_precision")
        values.setdefault("precision", "mixed_float16" if mixed else "float32")
    return values


def _saved_tokenizer(folder: Path) -> TokenizerFile:
    name, path = read_record(folder)
    tokenizer = _installed(folder, "tokenizer", name)
    return TokenizerFile(name, path, tokenizer.load(path))


#: The metrics ``asrkit evaluate --watch`` can keep a best checkpoint by (:mod:`asrkit.watch`).
WATCH_METRICS = ("wer", "cer", "loss")
#: The checkpoints ``evaluate``, ``transcribe`` and ``export`` can load: ``averaged`` is written
#: by ``asrkit average``, ``best-by-METRIC`` by ``asrkit evaluate --watch`` (in ``RUN/watch``).
CHECKPOINTS = ("best", "latest", "averaged", *(f"best-by-{m}" for m in WATCH_METRICS))


def load_run_model(folder: str | Path, checkpoint: str = "best") -> tuple[Run, Any, dict[str, Any]]:
    """A saved run, its model with the ``checkpoint`` weights (``best`` or ``latest``; the other
    when that one is missing or damaged; their moving average when the run keeps one), and
    that checkpoint's state: what evaluation, transcription and export all start from.

    Every weight of the model must come from the checkpoint. When they do not match and the
    run was made with another version of the model's plugin (``plugins.json``), the error says
    so and which version to install: a plugin that changed its architecture is the likely cause,
    not a damaged run."""
    from asrkit.train.checkpoints import Checkpoints
    from asrkit.train.ema import load_averaged, shadow_of
    from asrkit.train.growth import saved_model_config

    run = load_run(folder)
    model_config = saved_model_config(run, checkpoint)  # a growing run's size at that point
    model = run.spec.build(model_config, run.num_features(), run.labels.num_classes)
    # The moving average of the weights, when the run keeps one (an averaged checkpoint holds
    # only the mean of the weights).
    keeps_average = bool(run.train.ema_decay) and checkpoint != "averaged"
    shadow = shadow_of(model) if keeps_average else None
    trackables = {"model": model, **({"ema": shadow} if shadow is not None else {})}
    watched = checkpoint.startswith("best-by-")
    try:
        state = Checkpoints(run.folder / ("watch" if watched else "checkpoints"),
                            **trackables).restore(checkpoint, complete=True)
    except AsrkitError:
        changed = plugin_change(run.folder, "model", run.train.model)
        if changed is None:
            raise
        raise AsrkitError(changed.message(run.folder, "its checkpoint")) from None
    if state is None and watched:
        metric = checkpoint.removeprefix("best-by-")
        raise AsrkitError(f"{run.folder} has no {checkpoint} checkpoint; keep one with `asrkit "
                          f"evaluate {run.folder} --watch --best-by {metric}` beside the training")
    if state is None and checkpoint == "averaged":
        raise AsrkitError(f"{run.folder} has no averaged checkpoint; write one with `asrkit "
                          f"average {run.folder} --last N`")
    if state is None:
        raise AsrkitError(f"{run.folder} has no checkpoint yet; train it first")
    if shadow is not None:
        load_averaged(model, shadow, state)
    return run, model, state


def _installed(folder: Path, kind: str, name: str) -> Any:
    """The installed ``kind`` ``name``; when there is none, an error that names the plugin
    and version the run in ``folder`` was made with."""
    from asrkit import plugins

    try:
        return plugins.get(kind, name)
    except AsrkitError:
        missing = plugin_change(folder, kind, name)
        if missing is None or missing.installed:
            raise
        raise AsrkitError(missing.message(folder)) from None


@dataclass(frozen=True)
class PluginChange:
    """The plugin that provided a run's component then, and the one installed now."""

    kind: str
    name: str
    distribution: str
    made_with: str
    installed_distribution: str
    installed: str

    def message(self, folder: Path, what: str = "") -> str:
        if not self.installed:
            return (f"{folder} was made with {self.kind} {self.name!r} of {self.distribution} "
                    f"{self.made_with}, which is not installed; install it (pip install "
                    f"'{self.distribution}=={self.made_with}') to use this run")
        now = (self.installed if self.installed_distribution == self.distribution
               else f"{self.installed_distribution} {self.installed}")
        return (
            f"{folder} was made with {self.kind} {self.name!r} of {self.distribution} "
            f"{self.made_with}, and {now} is installed, whose {self.name!r} does not match "
            f"{what}; install the version the run was made with "
            f"(pip install '{self.distribution}=={self.made_with}') to use this run"
        )


def plugin_change(folder: Path, kind: str, name: str) -> PluginChange | None:
    """How the plugin providing ``kind`` ``name`` differs from the one the run in ``folder``
    was made with (``plugins.json``; ``installed`` empty when none provides it now); ``None``
    when it is the same version, or not known."""
    from asrkit.plugins import get_plugins

    try:
        saved = json.loads((folder / "plugins.json").read_text(encoding="utf-8"))
        then = next(plugin for plugin in saved["plugins"]
                    if name in plugin.get("registered", {}).get(kind, []))
        distribution, made_with = str(then["distribution"]), str(then["version"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, StopIteration):
        return None
    registration = get_plugins().registry.entries.get(kind, {}).get(name)
    if registration is None:
        return PluginChange(kind, name, distribution, made_with, "", "")
    provider = registration.provider
    if (provider.distribution, provider.version) == (distribution, made_with):
        return None
    return PluginChange(kind, name, distribution, made_with, provider.distribution,
                        provider.version)
