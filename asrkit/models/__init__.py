"""asrkit's bundled network architectures; each module is a plugin registering one ModelSpec."""
