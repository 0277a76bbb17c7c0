"""Where a rendered script runs: Hugging Face Jobs (`hf_jobs`) or this machine (`local`)."""
