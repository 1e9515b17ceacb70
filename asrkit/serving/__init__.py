"""A trained model leaving training: the graph from audio to logits, transcription, and
exports (SavedModel, TFLite, ONNX)."""
