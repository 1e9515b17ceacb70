"""Core services: errors, typed settings, durable files and locks, watched subprocesses,
framing, alphabets and labels, scores, and the CTC and RNN-T losses. They know nothing of
plugins, runs or commands."""
