"""sgeval serve: a benchmark service on sgeval (uploads, a queue of evaluations, leaderboards).

Start it with ``sgeval serve --config configs/serve/demo.yaml`` (or ``python -m sgeval_serve``);
docs/service.md says how to configure benchmarks and issue tokens.
"""

from .cli import main  # noqa: F401
