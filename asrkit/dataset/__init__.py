"""An imported dataset's folder: where datasets live, their CSV listings, TFRecord shards and
audio decoding; what the import engine writes and everything after it reads."""
