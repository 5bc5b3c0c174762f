"""``python -m convert ...`` in a checkout: runs ``sgeval convert ...`` (sgeval_convert/cli.py)."""

import importlib.util
import runpy
import sys

if __name__ == "__main__":
    if importlib.util.find_spec("sgeval_convert") is None:
        sys.exit("error: sgeval_convert is not importable here: run `python -m convert ...` from the repository "
                 "root, or install sgeval and run `sgeval convert ...`")
    runpy.run_module("sgeval_convert", run_name="__main__", alter_sys=True)
