"""Data handling: downloads, archives, audio, manifests, shards and the input pipeline."""
