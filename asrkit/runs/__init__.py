"""Run folders and what training and evaluation share about them: the folder itself, which
plugins made it, and scoring a model on a split."""
