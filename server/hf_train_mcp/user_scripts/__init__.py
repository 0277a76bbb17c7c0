"""The caller's own programs for run_script: source, header, URLs, the libraries it recognises."""
