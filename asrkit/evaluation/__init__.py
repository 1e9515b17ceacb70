"""What works on a trained run: its model with a checkpoint's weights, evaluation, decoder
search, watching a training, checkpoint averaging, describing runs and datasets."""
