"""Import OpenPSG's real evaluation code (build/openpsg_src/, extracted by setup.sh) without mmcv-full,
mmdet, detectron2 or panopticapi installed.

Real code loaded unmodified: openpsg/evaluation/*, openpsg/datasets/psg.py (its __init__,
get_ann_info and evaluate), openpsg/models/relation_heads/approaches/relation_util.py (Result) and,
from mmdet 2.20.0's source (build/mmdet_src/), iou2d_calculator.py (bbox_overlaps, fp16_clamp) and
core/evaluation/bbox_overlaps.py (imported by relation_util.py). Everything else those files
import is a stand-in below; none of the stand-ins computes anything the metrics depend on except
read_image and rgb2id, which turn the panoptic PNG into segment ids exactly as detectron2 and
panopticapi do.
"""

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from tools.oracle_common import load_source, module

BUILD = Path(__file__).resolve().parent / "build"
OPENPSG = BUILD / "openpsg_src"
MMDET = BUILD / "mmdet_src"


class _ProgressBar:  # mmcv.ProgressBar
    def __init__(self, task_num=0, *args, **kwargs):
        pass

    def update(self, num_tasks=1):
        pass


LOG = sys.stderr  # where print_log writes (oracle.py --quiet: devnull)


def _print_log(msg, logger=None, level=None):  # mmcv.utils.print_log with logger None: print
    print(msg, file=LOG)


class _Registry:  # mmcv.Registry: register_module() as a decorator that changes nothing
    def register_module(self, *args, **kwargs):
        return lambda cls: cls


class _CocoPanopticDataset:  # mmdet's base class: only __len__ is used by psg.py's evaluate
    def __len__(self):
        return len(self.data_infos)


class _COCOPanoptic:  # built in psg.py's __init__, not used by the scene graph evaluation
    def createIndex(self):
        self.imgToAnns, self.catToImgs = {}, {}
        self.cats = {c["id"]: c for c in self.dataset["categories"]}

    def get_cat_ids(self):
        return list(self.cats)


def _read_image(file_name, format=None):
    """detectron2.data.detection_utils.read_image: PIL open, EXIF orientation, convert(format)."""
    with open(file_name, "rb") as f:
        image = ImageOps.exif_transpose(Image.open(f))
        return np.asarray(image.convert(format) if format else image)


def _rgb2id(color):
    """panopticapi.utils.rgb2id, verbatim in effect: id = R + 256 G + 256^2 B."""
    if isinstance(color, np.ndarray) and len(color.shape) == 3:
        if color.dtype == np.uint8:
            color = color.astype(np.int32)
        return color[:, :, 0] + 256 * color[:, :, 1] + 256 * 256 * color[:, :, 2]
    return int(color[0] + 256 * color[1] + 256 * 256 * color[2])


def load():
    """-> types.SimpleNamespace(sgg_eval, sgg_metrics, psg, Result, bbox_overlaps), imported once."""
    if "openpsg.datasets.psg" not in sys.modules:
        _install()
    m = sys.modules
    return types.SimpleNamespace(sgg_eval=m["openpsg.evaluation.sgg_eval"],
                                 sgg_metrics=m["openpsg.evaluation.sgg_metrics"], psg=m["openpsg.datasets.psg"],
                                 Result=m["openpsg.models.relation_heads.approaches"].Result,
                                 bbox_overlaps=m["mmdet.core"].bbox_overlaps)


def _install():
    """The stand-ins, mmdet's two files, then OpenPSG's files, into sys.modules."""
    if not (OPENPSG / "openpsg").is_dir() or not MMDET.is_dir():
        sys.exit(f"{BUILD}: OpenPSG's or mmdet's source is missing; run OPENPSG=<checkout> {BUILD.parent}/setup.sh")
    module("mmcv", ProgressBar=_ProgressBar, FileClient=lambda **kwargs: None,
            load=lambda path: json.loads(Path(path).read_text()))
    sys.modules["mmcv"].utils = module("mmcv.utils", print_log=_print_log)
    for name in ("mmdet", "mmdet.core.bbox", "mmdet.core.bbox.iou_calculators"):
        module(name)
    module("mmdet.core.bbox.iou_calculators.builder", IOU_CALCULATORS=_Registry())
    iou2d = load_source("mmdet.core.bbox.iou_calculators.iou2d_calculator",
                  MMDET / "mmdet/core/bbox/iou_calculators/iou2d_calculator.py")
    module("mmdet.core", bbox_overlaps=iou2d.bbox_overlaps)
    module("mmdet.core.evaluation")
    load_source("mmdet.core.evaluation.bbox_overlaps", MMDET / "mmdet/core/evaluation/bbox_overlaps.py")
    module("mmdet.datasets", DATASETS=_Registry(), CocoPanopticDataset=_CocoPanopticDataset)
    module("mmdet.datasets.coco_panoptic", COCOPanoptic=_COCOPanoptic)
    module("mmdet.datasets.pipelines", Compose=lambda pipeline: None)
    module("detectron2")
    module("detectron2.data")
    module("detectron2.data.detection_utils", read_image=_read_image)
    module("panopticapi")
    module("panopticapi.utils", rgb2id=_rgb2id)

    importlib.import_module("openpsg.evaluation.sgg_eval")  # the real package (openpsg/__init__.py is empty)

    # openpsg.models and openpsg.datasets: their __init__ files import the models; load only the
    # two files needed, under their real module names.
    for name in ("openpsg.models", "openpsg.models.relation_heads", "openpsg.datasets"):
        module(name)
    relation_util = load_source("openpsg.models.relation_heads.approaches.relation_util",
                          OPENPSG / "openpsg/models/relation_heads/approaches/relation_util.py")
    module("openpsg.models.relation_heads.approaches", Result=relation_util.Result)
    load_source("openpsg.datasets.psg", OPENPSG / "openpsg/datasets/psg.py")
