"""The package EvalAI's submission worker imports from evaluation_script.zip; see main.py."""

from .main import evaluate  # noqa: F401  (the function the worker calls)
