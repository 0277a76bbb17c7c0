"""What a model is, read from its own files (config.json and the files beside it)."""
