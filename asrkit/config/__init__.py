"""A run's configuration: the ``-o`` syntax parsed once (:mod:`~asrkit.config.overrides`), the
sections asrkit itself declares (:mod:`~asrkit.config.train`, :mod:`~asrkit.config.pipeline`),
the models' presets (:mod:`~asrkit.config.presets`), the choice of a decoder and its settings
(:mod:`~asrkit.config.decoding`), and the one record of a run's configuration that every command
reads (:mod:`~asrkit.config.run`). Nothing here imports TensorFlow."""
