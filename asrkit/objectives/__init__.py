"""asrkit's bundled training objectives (:class:`asrkit.types.Objective`), each a plugin module
registered by an entry point, as a third-party objective is."""
