"""The import engine: downloads (resumed, verified), archives read without unpacking,
conversion to 16 kHz mono, and the engine that turns an importer's records into a dataset."""
