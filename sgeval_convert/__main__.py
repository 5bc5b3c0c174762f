"""``python -m sgeval_convert ...``: the same as ``sgeval convert ...`` (cli.py)."""

from sgeval_convert.cli import main

main()
