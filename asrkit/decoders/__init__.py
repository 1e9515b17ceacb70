"""asrkit's bundled CTC decoders, each module a plugin registering one
:class:`~asrkit.types.Decoder`: ``greedy`` (best path) and ``beam`` (prefix beam search with an
optional word scorer). How a command picks one and sets its settings is
:mod:`asrkit.config.decoding`."""
