"""Run in the reference environment (scripts/rnnt_reference.sh), not asrkit's: torchaudio's
RNN-T loss, per utterance, and its gradient to the logits, of the batches in an ``.npz`` file
(``logits_<i>``, ``labels_<i>``, ``frames_<i>``, ``steps_<i>``, ``blank_<i>``), written to
another (``loss_<i>``, ``gradient_<i>``)."""

import sys

import numpy as np
import torch
from torchaudio.functional import rnnt_loss

batches = np.load(sys.argv[1])
found = {}
for i in range(len([k for k in batches.files if k.startswith("logits_")])):
    logits = torch.tensor(batches[f"logits_{i}"], requires_grad=True)
    loss = rnnt_loss(logits, torch.tensor(batches[f"labels_{i}"]),
                     torch.tensor(batches[f"frames_{i}"]), torch.tensor(batches[f"steps_{i}"]),
                     blank=int(batches[f"blank_{i}"]), reduction="none")
    loss.sum().backward()
    found[f"loss_{i}"] = loss.detach().numpy()
    found[f"gradient_{i}"] = logits.grad.numpy()
np.savez(sys.argv[2], **found)
