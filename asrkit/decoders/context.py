"""The context graph of hot words: what the beam searches add to a hypothesis for spelling one.

As icefall's ``ContextGraph`` (Yang et al. 2023, "Contextualized end-to-end speech recognition
with contextual phrase prediction network"; k2/icefall's context biasing): a prefix tree (trie)
over the *labels* of the hot words (characters, or subword pieces), each arc carrying its word's
boost a label, with Aho-Corasick fail arcs to the longest suffix of the text read that is still a
prefix of some hot word. A hypothesis walks the graph one label at a time:

- following a partial match adds the arc's boost (a log score), so a hot word's hypotheses
  survive the beam while the word is spelt;
- when the next label leaves the trie, the boost of the partial match is taken back (the walk
  follows the fail arcs: a suffix that starts another hot word keeps that one's boost);
- a completed hot word keeps its boost; at the end of the utterance an unfinished match is taken
  back (:attr:`ContextGraph.final`).

Hot words are whole words: a match starts and ends at a word boundary (the labels' word marker:
the space among characters, a ``"▁"`` piece among SentencePiece pieces, or the start or end of
the utterance). So the hot word "he" does not boost "the" or "hello", and "cat" completes only
when the next word starts or the utterance ends. The trie reads a symbol END for each boundary:
a space is END, a piece ``"▁the"`` is END then ``"▁the"``.

The walk is precomputed for every state and label (:attr:`ContextGraph.next`,
:attr:`ContextGraph.boost`): a search keeps one integer state per hypothesis and adds
``boost[state, label]`` when it extends one, with numpy over whole beams (the CTC prefix search)
or one hypothesis at a time (the transducer's and the attention decoder's).

The hot words and their boosts are :class:`asrkit.config.hotwords.Hotwords`; this module only
builds and walks the graph. numpy is imported when a graph is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from asrkit.config.hotwords import Hotwords
from asrkit.core.labels import Labels

if TYPE_CHECKING:
    import numpy as np

#: The graphs built lately, by label set and hot words: a decoder that searches batch by batch
#: (the transducer's, the attention decoder's) builds its graph once.
_BUILT: dict[tuple[object, ...], ContextGraph] = {}
_KEEP = 8


class ContextGraph:
    """The hot words' graph for one label set, as dense tables over its states and labels.

    ``next[state, label]`` is the state after ``label``, ``boost[state, label]`` the log score it
    adds (negative when a partial match is taken back), ``final[state]`` what the end of the
    utterance adds (an unfinished match taken back), ``start`` the state before any label. The
    last column (label ``size``: the blank, or an attention decoder's end symbol) stays put and
    adds nothing. A hypothesis' hot-word score is the sum of what its labels added: the boosts of
    the hot words it completed, plus those of the one it is in the middle of.
    """

    def __init__(self, spelt: Sequence[tuple[Sequence[int], float]], size: int,
                 starts: Sequence[bool], bodies: Sequence[bool]) -> None:
        """``spelt``: each hot word's labels and its boost a label; ``size``: the labels (the
        blank excluded); ``starts[label]``: whether the label begins a word (ends the one
        before), ``bodies[label]``: whether it also holds text (``"▁the"``; a space holds
        none)."""
        import numpy as np

        end = size  # the trie's symbol for a word boundary
        # The trie: node 0 the root; each node's children by symbol, the boost of the arc into
        # it, and whether a hot word ends there.
        children: list[dict[int, int]] = [{}]
        arc = [0.0]
        ends = [False]
        for labels, boost in spelt:
            symbols = [end]
            for label in labels:
                if starts[label]:
                    if symbols[-1] != end:
                        symbols.append(end)
                    if not bodies[label]:
                        continue
                symbols.append(label)
            if symbols[-1] != end:
                symbols.append(end)
            node = 0
            for symbol in symbols:
                child = children[node].get(symbol)
                if child is None:
                    child = children[node][symbol] = len(children)
                    children.append({})
                    arc.append(0.0)
                    ends.append(False)
                if symbol != end:
                    arc[child] = max(arc[child], boost)
                node = child
            ends[node] = True
        count = len(children)
        # Breadth first: a node's parent, fail state, score and outputs are known before its.
        potential = np.zeros(count)  # the boosts from the root to the node
        deepest = np.zeros(count)  # ... to the deepest hot word's end on that path
        output = np.zeros(count)  # the boosts of the hot words that end at the node's text
        fail = np.zeros(count, dtype=np.int64)
        goto = np.zeros((count, size + 1), dtype=np.int64)  # the walk on trie symbols
        order = [0]
        goto[0, list(children[0])] = list(children[0].values())
        for node in order:
            for symbol, child in children[node].items():
                potential[child] = potential[node] + arc[child]
                deepest[child] = potential[child] if ends[child] else deepest[node]
                fail[child] = goto[fail[node], symbol] if node else 0
                output[child] = (potential[child] if ends[child] else 0.0) + output[fail[child]]
                goto[child] = goto[fail[child]]
                goto[child, list(children[child])] = list(children[child].values())
                order.append(child)
        # What a partial match has added and not yet kept: its boosts past the last hot word
        # completed on its path (that one's are kept, in ``output``).
        value = potential - deepest

        def step(states: np.ndarray, symbol: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            after = goto[states, symbol]
            return after, value[after] - value[states] + output[after]

        states = np.arange(count)
        self.next = np.empty((count, size + 1), dtype=np.int64)
        self.boost = np.zeros((count, size + 1))
        at_end, end_boost = step(states, end)
        for label in range(size):
            if starts[label] and bodies[label]:
                after, added = step(at_end, label)
                self.next[:, label], self.boost[:, label] = after, end_boost + added
            elif starts[label]:
                self.next[:, label], self.boost[:, label] = at_end, end_boost
            else:
                self.next[:, label], self.boost[:, label] = step(states, label)
        self.next[:, size] = states
        self.final: np.ndarray = end_boost - value[at_end]
        self.start = int(goto[0, end])
        self.states = count
        for table in (self.next, self.boost, self.final):
            table.setflags(write=False)  # shared by every search that builds it (build)

    @classmethod
    def build(cls, labels: Labels, hotwords: Hotwords) -> ContextGraph:
        """The graph of ``hotwords`` spelt with ``labels`` (a one-line error for a character
        they cannot spell); built once for the last few label sets and hot words asked for."""
        key = (type(labels), tuple(labels.symbols), labels.word_marker, hotwords)
        graph = _BUILT.get(key)
        if graph is None:
            size = labels.size
            graph = cls(hotwords.spell(labels), size,
                        [labels.starts_word(label) for label in range(size)],
                        [bool(labels.body(label)) for label in range(size)])
            if len(_BUILT) >= _KEEP:
                _BUILT.clear()
            _BUILT[key] = graph
        return graph
