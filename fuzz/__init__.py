"""Fuzzing sgeval's readers and the converters: python -m fuzz (see fuzz/__main__.py)."""
