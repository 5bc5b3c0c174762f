"""``python -m convert.coco_panoptic ...`` in a checkout, or ``python convert/coco_panoptic.py ...`` where sgeval is
installed: runs ``sgeval_convert.coco_panoptic`` (installed: ``sgeval convert coco_panoptic ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.coco_panoptic instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.coco_panoptic ...` from the repository "
             "root, or install sgeval and run `sgeval convert coco_panoptic ...`")
runpy.run_module("sgeval_convert.coco_panoptic", run_name="__main__", alter_sys=True)
