"""Core services: errors, typed settings, durable files and locks, framing, alphabets and
labels, scores and the CTC loss. They know nothing of plugins, runs or commands."""
