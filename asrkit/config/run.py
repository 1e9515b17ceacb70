"""A run's configuration: one frozen, typed record of its six sections, built once from the
command line and saved with the run (``config.json``); every command reads this record.

How a new run's configuration is built (:func:`build_run_config`), each layer winning over the
one before::

    the sections' defaults (TrainConfig, the model's Config, the extractor's Config, ...)
      <- named options (--model, --batch-size, ...)
      <- the model's preset (-o preset=auto|NAME|none; not over a named option)
      <- a fine-tuned run's model and feature settings (--init-from)
      <- -o SECTION.KEY=VALUE

A resumed run (:func:`resume_config`) may change its ``train`` settings, its decoder and what
:data:`RESUMABLE` lists; the rest (its model, features, pipeline and training objective) is
fixed once its weights depend on it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from asrkit import plugins
from asrkit.config.decoding import decoder_settings
from asrkit.config.objectives import check_decodes, default_decoder, objective_settings
from asrkit.config.overrides import Overrides, Setting, typed_overrides
from asrkit.config.pipeline import PipelineConfig
from asrkit.config.presets import choose_preset, preset_settings
from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import check_sample_rate
from asrkit.core.settings import MAX_STEPS, apply, from_dict, to_dict
from asrkit.types import ModelSpec

#: Settings outside ``train`` that a resumed run may change: the size of its batches, like
#: ``batch_size`` (after running out of memory), on which the weights do not depend, and where
#: its batches are made (another tf.data service, or none).
RESUMABLE = {("pipeline", "batch_seconds"), ("pipeline", "service"),
             ("pipeline", "service_timeout")}
#: The sections ``config.json`` must hold (``decoder`` and ``objective`` are absent in runs
#: older than them).
SAVED_SECTIONS = ("train", "model", "features", "pipeline")
#: Caps every training's steps, as if ``-o max_steps=N`` were given (smoke tests of commands
#: written for real corpora, such as the README's quick start): read by :func:`step_cap` only.
MAX_STEPS_ENV = "ASRKIT_MAX_STEPS"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run was trained with: ``train``, the model's and the feature extractor's
    ``Config``, ``pipeline``, the decoder's ``Config`` (a dict: as saved, for a decoder not
    installed here; ``None``: its defaults, in runs older than decoder settings), and the
    training objective's ``Config`` (``None``: its defaults; runs older than objectives are
    ``ctc`` runs, which has none)."""

    train: TrainConfig
    model: Any
    features: Any
    pipeline: PipelineConfig
    decoder: Any = None
    objective: Any = None

    @property
    def objective_config(self) -> Any:
        """The objective's settings: :attr:`objective`, or the defaults of ``train.objective``."""
        if self.objective is None:
            return plugins.get("objective", self.train.objective).Config()
        return self.objective

    def to_json(self) -> dict[str, Any]:
        decoder = self.decoder
        if decoder is None:
            decoder = plugins.get("decoder", self.train.decoder).config
        return {"train": to_dict(self.train), "model": to_dict(self.model),
                "features": to_dict(self.features), "pipeline": to_dict(self.pipeline),
                "decoder": decoder if isinstance(decoder, dict) else to_dict(decoder),
                "objective": to_dict(self.objective_config)}


def step_cap(overrides: Overrides) -> tuple[Overrides, str]:
    """``overrides`` with ``-o max_steps=N`` added when ``ASRKIT_MAX_STEPS=N`` is set (unless
    they already stop sooner), and the line that says so (``""`` when nothing was added). The
    one reading of the variable: ``asrkit train`` adds it to its ``-o``, new or resumed run."""
    value = os.environ.get(MAX_STEPS_ENV, "").strip()
    if not value:
        return overrides, ""
    try:
        cap = int(value)
    except ValueError:
        cap = 0
    if not 1 <= cap <= MAX_STEPS:
        raise AsrkitError(f"{MAX_STEPS_ENV}={value}: a number of steps from 1 to {MAX_STEPS:,} "
                          "(or unset for no cap)")
    given = [str(v).strip() for k, v in overrides.section("train") if k == "max_steps"]
    if given and given[-1].isdigit() and 0 < int(given[-1]) <= cap:
        return overrides, ""
    return (overrides + Overrides((Setting("train", "max_steps", cap),)),
            f"asrkit: {MAX_STEPS_ENV}={cap}: training stops after {cap} steps in all "
            f"(as with -o max_steps={cap})")


def check_names(train: TrainConfig) -> None:
    """Check that the model, its feature extractor, the decoders and the objective that
    ``train`` names are installed, and that the decoders decode the objective's outputs, so
    that a misspelt name stops a run before any work (not after an epoch, when the dev
    evaluation first needs the decoder). The error lists the installed names."""
    spec = plugins.get("model", train.model)
    plugins.get("feature", train.features or spec.features)
    objective = plugins.get("objective", train.objective)
    for decoder in filter(None, (train.decoder, train.dev_decoder)):
        check_decodes(objective, decoder)


def build_run_config(named: Mapping[str, Any], overrides: Overrides) -> tuple[RunConfig, str]:
    """A new run's configuration from ``named`` options (``train`` fields), the model's preset
    and ``overrides`` (in that order; see the module's docstring); unknown keys are errors.
    Returns it with a line for the user: which preset, and why."""
    given = TrainConfig(**named)
    requested = apply(given, overrides.section("train"))  # which model and preset are asked for
    spec = plugins.get("model", requested.model)
    preset, why = choose_preset(spec, requested.preset, requested.devices)
    from_preset = preset_settings(spec, preset)
    features = requested.features or spec.features
    if features != spec.features:  # the preset's feature settings are for the model's own
        if from_preset.keys("features"):
            why += f"; its {spec.features} settings are not applied to {features}"
        from_preset = from_preset.without("features")
    # The objective's settings for the preset (a transducer's networks sized to the encoder).
    objective = plugins.get("objective", requested.objective)
    from_preset = from_preset + typed_overrides(objective.presets.get(preset, {}))
    # The preset first; a named option (--batch-size) and every -o win over it.
    settings = from_preset.without("train", named) + overrides
    train = replace(apply(given, settings.section("train")), preset=preset or "none",
                    features=features)
    if "decoder" not in named and "decoder" not in settings.keys("train"):
        train = replace(train, decoder=default_decoder(objective, train.decoder))
    check_names(train)
    extractor = plugins.get("feature", features)
    feature_config = apply(extractor.Config(), settings.section("features"), "features.")
    check_sample_rate(feature_config, f"features {features!r}")  # and that it declares framing
    for key in ("batch_size", "seed"):
        if key in settings.keys("pipeline"):
            raise AsrkitError(f"set the {key} with --{key.replace('_', '-')} (or -o {key}=...)")
    pipeline = apply(PipelineConfig(batch_size=train.batch_size, seed=train.seed),
                     settings.section("pipeline"), "pipeline.")
    model_config = apply(spec.Config(), settings.section("model"), "model.")
    feature_config, why = streamable_features(spec, model_config, feature_config,
                                              overrides, why)
    config = RunConfig(train, model_config, feature_config, pipeline,
                       decoder_settings(train.decoder, settings.section("decoder")),
                       objective_settings(train.objective, settings.section("objective")))
    return config, f"preset: {preset or 'none'} ({why})"


def streamable_features(spec: ModelSpec, model_config: Any, feature_config: Any,
                        overrides: Overrides, why: str) -> tuple[Any, str]:
    """A streaming model's features must stream too: normalising over the whole utterance
    (``feature``, ``utterance``) needs audio a stream has not heard yet. A preset's such
    normalisation becomes ``running`` (and ``why`` says so); the user's own is refused."""
    mode = getattr(feature_config, "normalize", None)
    if not spec.streams(model_config) or mode in (None, "none", "running"):
        return feature_config, why
    if "normalize" in overrides.keys("features"):
        raise AsrkitError(f"-o features.normalize={mode} normalises over whole utterances, "
                          "which a streaming model has not heard yet: use running (or none)")
    return (replace(feature_config, normalize="running"),
            f"{why}; features.normalize=running: a stream cannot normalise over the whole "
            "utterance")


def resume_config(config: RunConfig, overrides: Overrides) -> RunConfig:
    """``config`` with ``train`` settings changed (``--resume -o batch_size=8`` after running
    out of memory, ``-o epochs=20`` to train longer), the decoder's, and :data:`RESUMABLE`
    ones; the other sections, and the objective, are fixed once a run has started, since the
    weights depend on them (the run's own value again, as the same command line gives it, is
    fine)."""
    fixed = {"model": config.model, "features": config.features, "pipeline": config.pipeline,
             "objective": config.objective_config}
    pipeline = config.pipeline
    for section, saved in fixed.items():
        for key, value in overrides.section(section):
            if (section, key) in RESUMABLE:
                pipeline = apply(pipeline, [(key, value)], "pipeline.")
            elif apply(saved, [(key, value)], f"{section}.") != saved:
                raise AsrkitError(
                    f"-o {section}.{key}={value}: a resumed run keeps its {section} settings; "
                    "only train settings can change"
                )
    train = config.train
    own_features = plugins.get("model", train.model).features
    for key, value in overrides.section("train"):
        if key == "tokenizer" and value != train.tokenizer:
            raise AsrkitError(f"-o tokenizer={value}: a resumed run keeps its tokenizer "
                              f"({train.tokenizer}); fine-tune a new run with --init-from")
        if key == "features" and (value or own_features) != config.train.features:
            raise AsrkitError(f"-o features={value}: a resumed run keeps its feature extractor "
                              f"({config.train.features}); train a new run for another")
        if key == "objective" and value != train.objective:
            raise AsrkitError(f"-o objective={value}: a resumed run keeps its objective "
                              f"({train.objective}); train a new run for another")
        train = apply(train, [(key, value)])
    check_names(train)
    pipeline = replace(pipeline, batch_size=train.batch_size, seed=train.seed)
    same = train.decoder == config.train.decoder and not isinstance(config.decoder, dict)
    decoder = decoder_settings(train.decoder, overrides.section("decoder"),
                               config.decoder if same else None)
    return replace(config, train=train, pipeline=pipeline, decoder=decoder)


def typed_settings(section: str, config: Any) -> Overrides:
    """Every field of ``config`` as a typed setting of ``section`` (a run's model or feature
    settings, carried into a new run by ``--init-from``)."""
    return Overrides(tuple(Setting(section, field.name, getattr(config, field.name))
                           for field in dataclasses.fields(config)))


def read_train(values: Mapping[str, Any]) -> TrainConfig:
    """A saved ``train`` section, settings of older versions under today's names: runs saved
    before ``precision`` had ``mixed_precision`` (true: float16 products), and keep what they
    had; runs saved before ``best_by`` chose their best checkpoint by ``early_stop_metric``
    (the loss by default), and keep doing so."""
    values = dict(values)
    if "best_by" not in values:  # saved before it: the best checkpoint was the lowest loss
        values["best_by"] = values.pop("early_stop_metric", "loss")
    if "mixed_precision" in values:
        mixed = values.pop("mixed_precision")
        values.setdefault("precision", "mixed_float16" if mixed else "float32")
    return from_dict(TrainConfig, values)
