"""Helpers for sgeval: synthetic data (`tools.synth`), the demo generator (`python -m tools.make_demo`)
and the writer of the tests' regression oracle (`python -m tools.make_expected`), run from the
repository root."""
