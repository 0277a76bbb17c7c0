"""Rendered training scripts: the Jinja2 environment, the typed CONFIG, Python source checks."""
