"""asrkit's bundled corpus importers, one module per corpus.

Each module is a plugin in its own right, named by an entry point in asrkit's ``pyproject.toml``
and written against asrkit's public API only (``asrkit.hookimpl`` and ``asrkit.types``), so any
of them could move to a distribution of its own. A module holds only what is specific to its
corpus; downloading, verification, conversion, filtering and sharding are the core's.
"""
