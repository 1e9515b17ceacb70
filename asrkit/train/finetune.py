"""Fine-tuning: a new run that starts from another run's weights (``asrkit train --init-from``).

The new run trains on its own dataset, with its own optimiser state, learning-rate schedule and
loop counters; only the weights come from the source run's ``best`` (else ``latest``)
checkpoint. It takes the source's model, feature and training-objective settings unless ``-o``
says otherwise, and its model and sizes must be the source's: every layer's weights must have
the same shapes, or the run is refused in one line naming the settings that differ. A different
alphabet, or an objective asking for another output width (``Objective.encoder_width``), is
the one allowed difference: the layers whose shapes depend on that width
(found by building the model for another width, so any model plugin works) start afresh, the
run says so in one line and records them in ``config.json`` (``train.init_reset``). The
model's weights are loaded by layer name; the objective's head (if any) is loaded too when
the source was trained with the same objective, else it starts afresh.

``train.freeze`` names layers whose weights training leaves as they start (Keras'
``trainable = False``; a frozen batch normalisation also keeps its statistics and runs in
inference mode, as Keras does). Names are the model's layers that hold weights; anything else is
a one-line error listing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from asrkit.config.overrides import Overrides, Setting
from asrkit.config.run import typed_settings
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import to_dict
from asrkit.core.storage import Location, location
from asrkit.runs.run import Run, load_run
from asrkit.train.checkpoints import KINDS, Checkpoints, networks

if TYPE_CHECKING:
    import keras


@dataclass(frozen=True)
class InitSource:
    """A run folder and which of its checkpoints to start from."""

    folder: Location
    kind: str

    def __str__(self) -> str:
        return f"{self.folder}:{self.kind}"


def parse_init_from(text: str) -> InitSource:
    """``RUN``, ``RUN:best`` or ``RUN:latest``; without a kind, ``best`` when the run has one,
    else ``latest``. A folder that is not a run, or has no such checkpoint, is an error."""
    name, colon, kind = text.rpartition(":")
    if not (colon and kind in KINDS):
        name, kind = text, ""
    folder = location(name)
    if not (folder / "config.json").exists():
        raise AsrkitError(f"--init-from {text}: {folder} is not a run folder (no config.json)")
    found = [k for k in KINDS if _has_checkpoint(folder, k)]
    if not found:
        raise AsrkitError(f"--init-from {text}: {folder} has no checkpoint yet; train it first")
    if not kind:
        kind = "best" if "best" in found else "latest"
    elif kind not in found:
        raise AsrkitError(f"--init-from {text}: {folder} has no {kind} checkpoint; use "
                          f"{folder}:{found[0]}")
    return InitSource(folder, kind)


def _has_checkpoint(folder: Location, kind: str) -> bool:
    checkpoints = folder / "checkpoints"
    return checkpoints.is_dir() and Checkpoints(checkpoints).state(kind) is not None


def source_settings(source: Run, given: Overrides | None = None) -> Overrides:
    """Settings giving a new run the source run's feature extractor, training objective, and
    model, feature and objective settings, typed; the user's own ``-o`` (``given``) come after
    them and win (the sizes check then says if they do not fit). The objective's settings are
    carried over only to the same objective."""
    chosen = dict((given or Overrides()).section("train")).get("objective",
                                                               source.train.objective)
    same = chosen == source.train.objective
    return (Overrides((Setting("train", "features", source.train.features),
                       Setting("train", "objective", source.train.objective)))
            + typed_settings("model", source.model_config)
            + typed_settings("features", source.feature_config)
            + (typed_settings("objective", source.objective_config) if same else Overrides()))


def layer_weights(model: keras.Model) -> dict[str, keras.Layer]:
    """The model's layers that hold weights, by name, in the model's order."""
    return {layer.name: layer for layer in model.layers if layer.weights}


def check_layer_names(model: keras.Model, names: Iterable[str], setting: str) -> None:
    """One line listing the model's layers when ``names`` holds another name."""
    known = layer_weights(model)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise AsrkitError(f"{setting}: the model has no layer {unknown[0]!r}; its layers: "
                          f"{', '.join(known)}")


def _shapes(model: keras.Model) -> dict[str, list[tuple[int, ...]]]:
    return {name: [tuple(w.shape) for w in layer.weights]
            for name, layer in layer_weights(model).items()}


def _build(run: Run, width: int | None = None) -> keras.Model:
    """``run``'s model, its output frames ``width`` wide (default: its objective's)."""
    return run.spec.build(run.model_config, run.num_features(),
                          run.encoder_width() if width is None else width)


def prepare(run: Run, source_run: Run, source: InitSource) -> tuple[Run, str]:
    """``run`` set to start from ``source``, and the line to print when the labels differ
    (another alphabet or tokenizer; else ""). Refuses another model, other sizes, and unknown
    ``init_reset`` and ``freeze`` names."""
    if source_run.train.model != run.train.model:
        raise AsrkitError(f"--init-from {source.folder} is a {source_run.train.model} run, this "
                          f"run a {run.train.model}: the model must be the same")
    width = run.encoder_width()
    mine = _build(run, width)
    check_layer_names(mine, run.train.init_reset, "init_reset")
    check_layer_names(mine, run.train.freeze, "freeze")
    shapes = _shapes(mine)
    theirs = _shapes(_build(source_run))
    output: list[str] = []
    other_labels = run.labels.symbols != source_run.labels.symbols
    if other_labels or width != source_run.encoder_width():
        other = _shapes(_build(run, width + 1))
        output = [name for name in shapes if shapes[name] != other.get(name)]
    differ = [name for name in {**theirs, **shapes}
              if name not in output and shapes.get(name) != theirs.get(name)]
    if differ:
        raise AsrkitError(f"--init-from {source.folder}: its {run.train.model} has other sizes "
                          f"({_differences(source_run, run, differ[0], theirs, shapes)}); the "
                          "model and its sizes must be the run's it starts from")
    reset = tuple(dict.fromkeys([*output, *run.train.init_reset]))
    train = replace(run.train, init_from=str(source), init_reset=reset)
    note = ""
    if output and other_labels:
        what = "alphabet" if run.train.tokenizer == source_run.train.tokenizer else "tokenizer"
        note = (f"the {what} differs from {source.folder}'s ({source_run.labels.size} "
                f"symbols there, {run.labels.size} here): the output layer "
                f"{', '.join(output)} starts afresh")
    elif output:
        note = (f"the objective differs from {source.folder}'s ({source_run.train.objective} "
                f"there, {run.train.objective} here; output width {source_run.encoder_width()} "
                f"there, {width} here): the output layer {', '.join(output)} starts afresh")
    return replace(run, config=replace(run.config, train=train)), note


def _differences(source_run: Run, run: Run, layer: str,
                 theirs: dict[str, list[tuple[int, ...]]],
                 mine: dict[str, list[tuple[int, ...]]]) -> str:
    """The model and feature settings that differ, else the first layer's shapes."""

    found = []
    for section in ("model_config", "feature_config"):
        there, here = to_dict(getattr(source_run, section)), to_dict(getattr(run, section))
        prefix = "model" if section == "model_config" else "features"
        found += [f"{prefix}.{key} {there.get(key)} there, {here.get(key)} here"
                  for key in here if here.get(key) != there.get(key)]
    return "; ".join(found) or f"layer {layer}: {theirs.get(layer)} there, {mine.get(layer)} here"


def freeze(model: keras.Model, names: Iterable[str]) -> None:
    """Make the named layers untrainable (before the optimiser is built)."""
    names = list(names)
    check_layer_names(model, names, "freeze")
    layers = layer_weights(model)
    for name in names:
        layers[name].trainable = False


def initialise(model: keras.Model, init_from: str, reset: Iterable[str],
               head: keras.Model | None = None, objective: str = "ctc") -> str:
    """Copy the weights of ``init_from`` (``RUN:kind``) into ``model``, layer by layer name,
    all layers but the ``reset`` ones, and into the objective's ``head`` when the source was
    trained with the same ``objective``; return a line saying what was loaded."""
    name, _, kind = init_from.rpartition(":")
    source_run = load_run(name)
    source_model = _build(source_run)
    source_head = (source_run.objective.build(source_run.objective_config,
                                              source_run.encoder_width(), source_run.labels)
                   if head is not None and source_run.train.objective == objective else None)
    state = Checkpoints(location(name) / "checkpoints",
                        **networks(source_model, source_head)).restore(kind)
    if state is None:
        raise AsrkitError(f"init_from {init_from}: {name} has no checkpoint")
    theirs, skip = layer_weights(source_model), set(reset)
    for layer_name, layer in layer_weights(model).items():
        if layer_name not in skip:
            layer.set_weights(theirs[layer_name].get_weights())
    if head is not None and source_head is not None:
        head.set_weights(source_head.get_weights())
    afresh = f"; {', '.join(sorted(skip))} afresh" if skip else ""
    return (f"starting from the weights of {name} ({kind} checkpoint, step "
            f"{state.get('global_step', '?')}){afresh}")
