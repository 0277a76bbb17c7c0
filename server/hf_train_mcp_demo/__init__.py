"""Tiny models and datasets built in-process, for the demo and the tests: not part of the server."""
