"""A pure-Python n-gram estimator: interpolated modified Kneser-Ney, written as ARPA.

Why it exists: the ``kenlm`` Python package loads and queries models but has no estimator
(``lmplz`` is a separate C++ build), so without this a user would need an external tool before
their first language-model decoding. This follows what ``lmplz`` computes (Heafield et al. 2013,
"Scalable modified Kneser-Ney language model estimation"; Chen & Goodman 1998), without pruning:

- Each sentence is ``<s> w1 .. wk </s>``.
- Adjusted counts: the highest order uses raw counts; a lower-order n-gram uses its number of
  distinct left extensions (the continuation count), except n-grams starting with ``<s>``,
  which cannot be extended to the left and keep their raw counts.
- Three discounts per order from the count-of-counts ``t1..t4`` of the adjusted counts:
  ``Y = t1 / (t1 + 2 t2)``, ``D1 = 1 - 2Y t2/t1``, ``D2 = 2 - 3Y t3/t2``, ``D3+ = 3 - 4Y t4/t3``.
  A corpus too small for these (a ``t`` of 0, or a discount outside ``(0, k)``) falls back to
  ``0.5, 1, 1.5`` for that order, as ``lmplz --discount_fallback`` does, and says so.
- Interpolation: ``p(w|h) = (a(hw) - D(a(hw))) / a(h.) + gamma(h) p(w|h')`` with
  ``gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3+ N3+(h.)) / a(h.)``; unigrams interpolate with the
  uniform distribution over the vocabulary (``</s>`` and ``<unk>`` included, ``<s>`` not), so
  ``<unk>`` gets the uniform share of the leftover mass.
- A word list (``vocabulary``) adds words the text never has, as SRILM's ``-vocab`` does: each
  gets the uniform share too, so a decoder can spell it instead of paying the unknown-word
  penalty. Why: a few thousand sentences of text leave out most of a language's words, and a
  word the LM cannot predict is a word the decoder will not write.
- ARPA stores the interpolated probabilities and ``gamma(h)`` as the backoff of ``h``: exactly the
  backoff model that gives the interpolated distribution, which sums to 1 for every context.

Everything is counted in memory (tuples of word ids in dicts): right for a dataset's transcripts
(millions of words), not for a web crawl; use KenLM's ``lmplz`` for those.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
#: log10 probability ARPA files give ``<s>``, which is never predicted.
NEVER = -99.0
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)

Ngram = tuple[str, ...]


@dataclass
class ArpaModel:
    """An n-gram backoff model: per order (index 0 = unigrams) the log10 probability of each
    n-gram, and the log10 backoff of those that are contexts of longer ones."""

    order: int
    probs: list[dict[Ngram, float]]
    backoffs: list[dict[Ngram, float]]
    #: (D1, D2, D3+) per order, and the orders that fell back to the defaults.
    discounts: list[tuple[float, float, float]] = field(default_factory=list)
    fallback_orders: list[int] = field(default_factory=list)
    #: Words of the vocabulary list that the text never has.
    unseen_words: int = 0

    @property
    def vocabulary(self) -> list[str]:
        """The words the model can predict (``<s>`` excluded)."""
        return [g[0] for g in self.probs[0] if g[0] != BOS]

    def counts(self) -> list[int]:
        return [len(p) for p in self.probs]

    def log10prob(self, word: str, context: Sequence[str]) -> float:
        """log10 p(word | context) by the ARPA backoff rule; ``context`` is oldest first."""
        context = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        if (word,) not in self.probs[0]:
            word = UNK
        backoff = 0.0
        for start in range(len(context) + 1):
            history = context[start:]
            gram = (*history, word)
            prob = self.probs[len(gram) - 1].get(gram)
            if prob is not None:
                return prob + backoff
            if history:
                backoff += self.backoffs[len(history) - 1].get(history, 0.0)
        raise AssertionError("unreachable: every word has a unigram")

    def write(self, path: str | Path) -> None:
        """Write the model in ARPA format (n-grams sorted, so the file is reproducible)."""
        with open(path, "w", encoding="utf-8") as out:
            out.write("\\data\\\n")
            for n, probs in enumerate(self.probs, 1):
                out.write(f"ngram {n}={len(probs)}\n")
            for n, probs in enumerate(self.probs, 1):
                out.write(f"\n\\{n}-grams:\n")
                backoffs = self.backoffs[n - 1] if n < self.order else {}
                for gram in sorted(probs):
                    line = f"{probs[gram]:.7f}\t{' '.join(gram)}"
                    if gram in backoffs:
                        line += f"\t{backoffs[gram]:.7f}"
                    out.write(line + "\n")
            out.write("\n\\end\\\n")

    @classmethod
    def read(cls, path: str | Path) -> ArpaModel:
        """Read an ARPA file (any order; what :meth:`write` and ``lmplz`` produce)."""
        probs: list[dict[Ngram, float]] = []
        backoffs: list[dict[Ngram, float]] = []
        section = 0
        with open(path, encoding="utf-8") as handle:
            for raw in handle:
                line = raw.strip()
                if not line or line.startswith("ngram ") or line == "\\data\\":
                    continue
                if line == "\\end\\":
                    break
                if line.startswith("\\") and line.endswith("-grams:"):
                    section = int(line[1:-7])
                    while len(probs) < section:
                        probs.append({})
                        backoffs.append({})
                    continue
                if section == 0:
                    continue
                parts = line.split()
                gram = tuple(parts[1:1 + section])
                probs[section - 1][gram] = float(parts[0])
                if len(parts) > section + 1:
                    backoffs[section - 1][gram] = float(parts[section + 1])
        return cls(len(probs), probs, backoffs)


def read_unigrams(path: str | Path) -> list[str]:
    """The words of an ARPA file's 1-gram section, without reading the rest of the file."""
    words = []
    inside = False
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            line = raw.strip()
            if line == "\\1-grams:":
                inside = True
            elif inside and line.startswith("\\"):
                break
            elif inside and line:
                words.append(line.split()[1])
    return words


def _count(sentences: Iterable[str], order: int,
           vocabulary: Iterable[str] = ()) -> tuple[list[str], list[dict[tuple, int]], int]:
    """Raw counts of every n-gram of order 1..order, over word ids; returns the vocabulary (id ->
    word: ``vocabulary``'s words after those of the text), the counts and the number of
    sentences."""
    ids: dict[str, int] = {BOS: 0, EOS: 1}
    words = [BOS, EOS]
    counts: list[dict[tuple, int]] = [defaultdict(int) for _ in range(order)]
    sentences_seen = 0
    for sentence in sentences:
        tokens = sentence.split()
        if not tokens:
            continue
        sentences_seen += 1
        seq = [0]
        for token in tokens:
            index = ids.get(token)
            if index is None:
                index = ids[token] = len(words)
                words.append(token)
            seq.append(index)
        seq.append(1)
        for n in range(1, order + 1):
            table = counts[n - 1]
            for start in range(len(seq) - n + 1):
                table[tuple(seq[start:start + n])] += 1
    for word in vocabulary:
        if word not in ids and word != BOS:
            ids[word] = len(words)
            words.append(word)
    return words, [dict(c) for c in counts], sentences_seen


def _discounts(adjusted: dict[tuple, int]) -> tuple[tuple[float, float, float], bool]:
    """Modified Kneser-Ney discounts from count-of-counts; ``True`` when they fell back."""
    t = [0] * 5
    for value in adjusted.values():
        if value <= 4:
            t[value] += 1
    if min(t[1:]) > 0:
        y = t[1] / (t[1] + 2 * t[2])
        d = (1 - 2 * y * t[2] / t[1], 2 - 3 * y * t[3] / t[2], 3 - 4 * y * t[4] / t[3])
        if all(0 < value < k for k, value in enumerate(d, 1)):
            return d, False
    return FALLBACK_DISCOUNTS, True


def estimate(sentences: Iterable[str], order: int = 3,
             vocabulary: Iterable[str] = ()) -> ArpaModel:
    """An interpolated modified Kneser-Ney model of ``sentences`` (whitespace-separated words,
    already normalised), whose vocabulary also holds the words of ``vocabulary`` (each unseen
    one with the uniform share of the unigrams' leftover mass). Orders with no n-gram
    (sentences too short) are left out."""
    if order < 1:
        raise ValueError("order must be at least 1")
    words, raw, sentence_count = _count(sentences, order, vocabulary)
    if sentence_count == 0:
        raise ValueError("no sentences to estimate a language model from")
    while order > 1 and not raw[order - 1]:
        order -= 1  # e.g. order 5 over one-word sentences: <s> w </s> has no 4-gram
    raw = raw[:order]
    bos = 0

    # Adjusted counts: raw at the top order and for n-grams starting with <s>, otherwise the
    # number of distinct words seen to the left.
    adjusted: list[dict[tuple, int]] = [dict() for _ in range(order)]
    adjusted[order - 1] = dict(raw[order - 1])
    for n in range(order - 1, 0, -1):
        table = adjusted[n - 1]
        for gram in raw[n]:
            table[gram[1:]] = table.get(gram[1:], 0) + 1
        for gram, count in raw[n - 1].items():
            if gram[0] == bos:
                table[gram] = count
    adjusted[0].pop((bos,), None)  # <s> is never predicted

    discounts: list[tuple[float, float, float]] = []
    fallback_orders: list[int] = []
    for n in range(1, order + 1):
        d, fell_back = _discounts(adjusted[n - 1])
        discounts.append(d)
        if fell_back:
            fallback_orders.append(n)

    # Per-context totals for the interpolation: a(h.), and N1, N2, N3+ of its continuations.
    probs: list[dict[tuple, float]] = []
    gammas: list[dict[tuple, float]] = []
    vocab_size = len(words) - 1 + (0 if UNK in words else 1)  # without <s>, with <unk>
    unseen: list[tuple] = []
    for n in range(1, order + 1):
        d1, d2, d3 = discounts[n - 1]
        totals: dict[tuple, list[float]] = {}
        for gram, count in adjusted[n - 1].items():
            entry = totals.get(gram[:-1])
            if entry is None:
                entry = totals[gram[:-1]] = [0.0, 0.0]
            entry[0] += count
            entry[1] += d1 if count == 1 else d2 if count == 2 else d3
        gamma = {h: mass / total for h, (total, mass) in totals.items()}
        lower = probs[n - 2] if n > 1 else None
        table: dict[tuple, float] = {}
        for gram, count in adjusted[n - 1].items():
            h = gram[:-1]
            discount = d1 if count == 1 else d2 if count == 2 else d3
            interpolated = gamma[h] * (lower[gram[1:]] if lower is not None else 1 / vocab_size)
            table[gram] = (count - discount) / totals[h][0] + interpolated
        if n == 1:  # the vocabulary's words the text never has: the uniform share alone
            unseen = [(index,) for index in range(2, len(words)) if (index,) not in table]
            table.update(dict.fromkeys(unseen, gamma[()] / vocab_size))
        probs.append(table)
        gammas.append(gamma)

    unk_prob = gammas[0][()] / vocab_size
    model = _to_arpa(words, order, probs, gammas, unk_prob, discounts, fallback_orders)
    model.unseen_words = len(unseen)
    return model


def _to_arpa(words: list[str], order: int, probs: list[dict[tuple, float]],
             gammas: list[dict[tuple, float]], unk_prob: float,
             discounts: list[tuple[float, float, float]], fallback_orders: list[int]) -> ArpaModel:
    out_probs: list[dict[Ngram, float]] = []
    out_backoffs: list[dict[Ngram, float]] = []
    for n in range(1, order + 1):
        table = {tuple(words[i] for i in gram): math.log10(p) for gram, p in probs[n - 1].items()}
        backoff: dict[Ngram, float] = {}
        if n < order:
            for h, gamma in gammas[n].items():  # contexts of the next order
                backoff[tuple(words[i] for i in h)] = math.log10(gamma)
        out_probs.append(table)
        out_backoffs.append(backoff)
    out_probs[0][(BOS,)] = NEVER
    if (UNK,) not in out_probs[0]:
        out_probs[0][(UNK,)] = math.log10(unk_prob)
    return ArpaModel(order, out_probs, out_backoffs, discounts, fallback_orders)
