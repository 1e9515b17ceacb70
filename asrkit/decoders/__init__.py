"""asrkit's bundled CTC decoders; each module is a plugin registering one Decoder."""
