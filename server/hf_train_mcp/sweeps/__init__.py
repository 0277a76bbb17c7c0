"""Sweeps: a grid of training runs under one budget, supervised until every run has ended."""
