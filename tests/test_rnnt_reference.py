"""asrkit's RNN-T loss (``asrkit.core.rnnt``) against a published implementation, torchaudio's
``rnnt_loss`` (the CPU kernel of warp-transducer's lineage), on batches larger than the sum over
alignments can check: losses and gradients to the logits equal to 1e-4 (relative), with padded
batches, utterances of one frame and utterances without labels, for the blank first and last;
on a lattice large enough for torchaudio's float32 arithmetic to drift further, asrkit's
gradients are the exact float64 ones (see :data:`BATCHES`).

torchaudio needs PyTorch, which asrkit does not depend on: it lives in an environment of its
own, ``.venv-rnnt-reference`` (``bash scripts/rnnt_reference.sh``, which the test command runs),
and is called as a process on ``.npz`` files. Without that environment the test is skipped and
says how to make it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from asrkit.core.rnnt import rnnt_loss
from tests.test_rnnt_loss import alpha_beta

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / ".venv-rnnt-reference" / "bin" / "python"
SCRIPT = Path(__file__).resolve().parent / "scripts" / "torchaudio_rnnt.py"

#: (seed, frames, labels, classes, blank, gradient tolerance) of each batch: shapes of a
#: character model's and of a subword model's, padded, with one frame and with no labels.
#: torchaudio computes its lattice in float32, asrkit in float64: on the largest lattice
#: (120 x 41 cells) torchaudio's gradients are 4e-4 (relative) from the exact float64 ones, where
#: asrkit's are within 1e-6 of them; there the tolerance is 1e-3, and the float64 reference
#: decides.
BATCHES = [
    (0, [30, 30, 30, 30], [10, 10, 10, 10], 29, -1, 1e-4),
    (1, [57, 12, 1, 33, 40, 1], [14, 0, 3, 20, 0, 0], 29, -1, 1e-4),
    (2, [80, 64, 75], [25, 30, 12], 257, -1, 1e-4),
    (3, [20, 9, 16, 1], [5, 9, 0, 1], 40, 0, 1e-4),
    (4, [120, 100], [40, 33], 64, 0, 1e-3),
]


def batch(seed: int, frames: list[int], steps: list[int], classes: int, blank: int):
    rng = np.random.default_rng(seed)
    blank_class = blank % classes
    logits = rng.normal(size=(len(frames), max(frames), max(steps) + 1, classes)) * 2
    others = [c for c in range(classes) if c != blank_class]
    labels = rng.choice(others, (len(frames), max(steps)))
    return (logits.astype(np.float32), labels.astype(np.int32), np.array(frames, np.int32),
            np.array(steps, np.int32))


@pytest.fixture(scope="module")
def torchaudio_results(tmp_path_factory) -> dict[str, np.ndarray]:
    usable = REFERENCE.exists() and subprocess.run(
        [str(REFERENCE), "-c", "from torchaudio.functional import rnnt_loss"],
        capture_output=True, check=False, timeout=300).returncode == 0
    if not usable:
        pytest.skip("no reference environment: run `bash scripts/rnnt_reference.sh` (torchaudio, "
                    "about 3 GB) to compare the RNN-T loss with torchaudio's")
    folder = tmp_path_factory.mktemp("rnnt-reference")
    arrays = {}
    for i, (seed, frames, steps, classes, blank, _) in enumerate(BATCHES):
        logits, labels, frame_lengths, label_lengths = batch(seed, frames, steps, classes, blank)
        arrays.update({f"logits_{i}": logits, f"labels_{i}": labels, f"frames_{i}": frame_lengths,
                       f"steps_{i}": label_lengths, f"blank_{i}": np.array(blank % classes)})
    np.savez(folder / "batches.npz", **arrays)
    subprocess.run([str(REFERENCE), str(SCRIPT), str(folder / "batches.npz"),
                    str(folder / "results.npz")], check=True, capture_output=True, timeout=600)
    return dict(np.load(folder / "results.npz"))


@pytest.mark.parametrize("index", range(len(BATCHES)),
                         ids=[f"batch{i}-V{b[3]}-blank{b[4]}" for i, b in enumerate(BATCHES)])
def test_losses_and_gradients_equal_torchaudios(torchaudio_results, index):
    seed, frames, steps, classes, blank, tolerance = BATCHES[index]
    logits, labels, frame_lengths, label_lengths = batch(seed, frames, steps, classes, blank)
    tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        losses, feasible = rnnt_loss(tensor, labels, frame_lengths, label_lengths, blank=blank)
        total = tf.reduce_sum(losses)
    gradient = tape.gradient(total, tensor).numpy()
    assert feasible.numpy().all()
    expected_loss = torchaudio_results[f"loss_{index}"]
    np.testing.assert_allclose(losses.numpy(), expected_loss, rtol=1e-4)
    expected_gradient = torchaudio_results[f"gradient_{index}"]
    # Relative to the largest gradient of the utterance: most entries are softmax
    # probabilities far below it, where float32 sums in another order differ in their last bits.
    for row, (t, u) in enumerate(zip(frame_lengths, label_lengths, strict=True)):
        got, want = gradient[row, :t, :u + 1], expected_gradient[row, :t, :u + 1]
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * scale)
        assert not gradient[row, t:].any() and not gradient[row, :, u + 1:].any()
        if tolerance > 1e-4:  # the exact float64 forward-backward decides
            _, exact = alpha_beta(logits[row, :t, :u + 1].astype(np.float64),
                                  labels[row, :u], blank % classes)
            assert np.abs(got - exact).max() < 1e-5 * scale
            assert np.abs(got - exact).max() < np.abs(want - exact).max()
