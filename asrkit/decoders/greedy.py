"""``greedy``: best-path CTC decoding (the most likely class a frame, repeats merged, blanks
dropped). Exact for a model whose output is peaked, and thousands of utterances a second. The text
is the labels' ``decode`` of the path: characters joined, or subword pieces read as words."""

from __future__ import annotations

from typing import TYPE_CHECKING

from asrkit import hookimpl
from asrkit.types import Decoder

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register


class GreedyDecoder(Decoder):
    name = "greedy"
    description = "Best-path CTC decoding: argmax per frame, repeats merged, blanks removed."

    def decode(self, logits: np.ndarray, lengths: np.ndarray, labels: Labels) -> list[str]:
        import numpy as np

        best = np.argmax(np.asarray(logits), axis=-1)
        texts = []
        for path, length in zip(best, np.asarray(lengths), strict=True):
            path = path[: int(length)]
            keep = path[np.insert(path[1:] != path[:-1], 0, True)] if len(path) else path
            texts.append(labels.decode(int(c) for c in keep if c != labels.blank))
        return texts


@hookimpl
def register_decoders(register: Register) -> None:
    register(GreedyDecoder())
