"""``python -m convert.hilo ...`` in a checkout, or ``python convert/hilo.py ...`` where sgeval is
installed: runs ``sgeval_convert.hilo`` (installed: ``sgeval convert hilo ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.hilo instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.hilo ...` from the repository "
             "root, or install sgeval and run `sgeval convert hilo ...`")
runpy.run_module("sgeval_convert.hilo", run_name="__main__", alter_sys=True)
