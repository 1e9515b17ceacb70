"""The training engine: configuration, devices, checkpoints and the training loop."""
