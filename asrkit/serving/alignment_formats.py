"""An alignment (:class:`asrkit.serving.align.Alignment`) as the files other tools read: CTM
(NIST's time-marked conversation format: sclite, Kaldi) and a Praat TextGrid (Praat, Montreal
Forced Aligner, many phonetics tools). JSON is the alignment's own ``to_json``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asrkit.serving.align import Alignment, Span


def ctm(alignment: Alignment) -> str:
    """One line a word: ``NAME 1 START DURATION WORD SCORE`` (channel 1, seconds to the
    millisecond, the word's score as the confidence)."""
    return "".join(f"{alignment.name} 1 {w.start:.3f} {w.end - w.start:.3f} {w.text} "
                   f"{w.score:.4f}\n" for w in alignment.words)


def textgrid(alignment: Alignment) -> str:
    """A Praat TextGrid (long text format) with two interval tiers, ``words`` and ``chars``,
    covering the whole recording: the stretches between aligned spans are empty intervals, as
    Praat requires intervals to tile a tier."""
    words: list[Span] = list(alignment.words)
    chars: list[Span] = [c for w in alignment.words for c in w.chars]
    tiers = [("words", words), ("chars", chars)]
    lines = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "",
             "xmin = 0", f"xmax = {alignment.duration:.3f}", "tiers? <exists>",
             f"size = {len(tiers)}", "item []:"]
    for number, (name, spans) in enumerate(tiers, 1):
        intervals = _tile(spans, alignment.duration)
        lines += [f"    item [{number}]:", '        class = "IntervalTier"',
                  f'        name = "{name}"', "        xmin = 0",
                  f"        xmax = {alignment.duration:.3f}",
                  f"        intervals: size = {len(intervals)}"]
        for index, (start, end, text) in enumerate(intervals, 1):
            lines += [f"        intervals [{index}]:", f"            xmin = {start:.3f}",
                      f"            xmax = {end:.3f}", f'            text = "{_quoted(text)}"']
    return "\n".join(lines) + "\n"


def _tile(spans: Sequence[Span], duration: float) -> list[tuple[float, float, str]]:
    """Intervals from 0 to ``duration``: the spans (times rounded to the millisecond, as
    written) and empty intervals between them; a span that would start before the previous one
    ends (rounding) starts where it ends."""
    out: list[tuple[float, float, str]] = []
    cursor = 0.0
    end_of_all = round(duration, 3)
    for span in spans:
        start = max(cursor, round(span.start, 3))
        end = min(end_of_all, max(start, round(span.end, 3)))
        if end <= start:
            continue
        if start > cursor:
            out.append((cursor, start, ""))
        out.append((start, end, span.text))
        cursor = end
    if cursor < end_of_all or not out:
        out.append((cursor, max(cursor, end_of_all), ""))
    return out


def _quoted(text: str) -> str:
    """Praat doubles a double quote inside a string."""
    return text.replace('"', '""')
