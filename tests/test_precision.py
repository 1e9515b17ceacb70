"""Training precision: which one ``auto`` picks and why, bfloat16 training end to end, and runs
that outlive the precision they were trained in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from asrkit.testing import check_precision
from asrkit.train.machine import machine_record, machine_text
from asrkit.train.precision import AMX_FLAG, choose_precision, cpu_flags, policy
from asrkit.types import ModelSpec

TINY_DS2 = ["model.conv_channels=4", "model.rnn_units=16", "model.rnn_layers=1",
            "features.num_mel_bins=20"]


def test_auto_picks_bfloat16_on_a_cpu_that_multiplies_it_and_float32_elsewhere(monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    precision, why = choose_precision("auto", False, {"avx2", AMX_FLAG, "avx512_bf16"})
    assert precision == "mixed_bfloat16" and "AMX" in why
    precision, why = choose_precision("auto", False, {"avx2", "avx512_bf16"})
    assert precision == "mixed_bfloat16" and "AVX512-BF16" in why
    assert choose_precision("auto", False, {"avx2", "avx512f"})[0] == "float32"
    assert choose_precision("auto", True, {AMX_FLAG})[0] == "float32"  # GPUs: the user's choice
    assert choose_precision("mixed_float16", False, set()) == (
        "mixed_float16", "precision=mixed_float16")
    assert choose_precision("float32", False, {AMX_FLAG})[0] == "float32"
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # bfloat16 would be emulated: slower
    precision, why = choose_precision("auto", False, {AMX_FLAG})
    assert precision == "float32" and "AMX" in why


def test_cpu_flags_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 amx_tile\nbugs\t\t: spectre\n")
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16", "amx_tile"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_a_session_records_the_first_processor_of_cpuinfo(tmp_path):
    """The machine record reads the first processor's block only (every core repeats it),
    and says which bfloat16 unit, if any, the CPU has."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\ncpu MHz\t\t: 2600.004\n"
                    "flags\t\t: fpu avx512_bf16\n\nprocessor\t: 1\nmodel name\t: other\n"
                    "flags\t\t: fpu amx_bf16\n")
    record = machine_record(7, "float32", 1, info)
    assert record["cpu"] == "AMD EPYC 9R14" and record["cpu_mhz"] == 2600
    assert record["bfloat16_unit"] == "AVX512-BF16" and record["step"] == 7
    assert record["tensorflow"] and record["python"] and record["cores"] >= 1
    assert machine_text(record).startswith(
        f"AMD EPYC 9R14 ({record['cores']} cores at 2,600 MHz, AVX512-BF16, ")
    assert machine_text(record).endswith(f", 1 tower, float32, TensorFlow {record['tensorflow']}")
    bare = machine_record(0, "float32", 2, tmp_path / "missing")  # not Linux
    assert bare["cpu"] and bare["cpu_mhz"] is None and bare["bfloat16_unit"] is None
    assert ", 2 towers, " in machine_text(bare)


def test_the_policy_holds_while_building_only():
    import keras

    before = keras.config.dtype_policy().name
    with policy("mixed_bfloat16"):
        layer = keras.layers.Dense(3)
    assert keras.config.dtype_policy().name == before
    assert (layer.compute_dtype, layer.variable_dtype) == ("bfloat16", "float32")


def test_a_bfloat16_run_trains_evaluates_and_resumes_in_float32(tiny_dataset, tmp_path,
                                                               asrkit_cli):
    import keras

    run = tmp_path / "run"
    result = asrkit_cli(["train", "--model", "ds2", "--dataset", str(tiny_dataset),
                         "--run-dir", str(run), "--batch-size", "4", "--precision",
                         "mixed_bfloat16", "-o", "max_steps=4", "-o", "log_every=1",
                         *[item for s in TINY_DS2 for item in ("-o", s)], "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert "precision: mixed_bfloat16 (precision=mixed_bfloat16)" in result.stdout
    assert keras.config.dtype_policy().name == "float32"  # nothing else in the process changed
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["precision"] == "mixed_bfloat16"
    # The checkpoint holds float32 weights: a float32 evaluation and resumption read it.
    result = asrkit_cli(["evaluate", str(run), "--split", "test", "--no-progress"])
    assert result.exit_code == 0, result.stderr
    result = asrkit_cli(["train", "--resume", str(run), "-o", "max_steps=6",
                         "-o", "precision=float32", "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert "precision: float32" in result.stdout
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in steps if e["event"] == "step"][-2:] == [5, 6]
    # Each session says what it ran on, in which precision.
    sessions = [(e["step"], e["precision"]) for e in steps if e["event"] == "machine"]
    assert sessions == [(0, "mixed_bfloat16"), (4, "float32")]


def test_runs_saved_with_mixed_precision_keep_it(tiny_run, tmp_path):
    import shutil

    from asrkit.runs.run import load_run

    for mixed, expected in ((True, "mixed_float16"), (False, "float32")):
        run = tmp_path / f"run-{mixed}"
        shutil.copytree(tiny_run, run)
        config = json.loads((run / "config.json").read_text())
        del config["train"]["precision"]
        config["train"]["mixed_precision"] = mixed
        (run / "config.json").write_text(json.dumps(config))
        assert load_run(run).train.precision == expected


@dataclass(frozen=True)
class NoConfig:
    pass


class Float32Offset(ModelSpec):
    """Adds a float32 constant to its inputs: the mistake that breaks under mixed precision."""

    name = "float32-offset"
    description = "a model that makes its own float32 tensors"
    Config = NoConfig

    def time_stride(self, config: Any) -> int:
        return 1

    def build(self, config: Any, num_features: int, num_classes: int) -> Any:
        import keras
        import tensorflow as tf

        class Model(keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.dense = keras.layers.Dense(num_classes)

            def call(self, inputs: Any, training: bool = False) -> Any:
                return self.dense(inputs[0]) + tf.constant(0.5, tf.float32)

        return Model()


def test_the_precision_check_names_a_layer_that_mixes_dtypes():
    with pytest.raises(AssertionError, match="a forward pass under mixed_bfloat16 fails"):
        check_precision(Float32Offset(), NoConfig(), 5)
