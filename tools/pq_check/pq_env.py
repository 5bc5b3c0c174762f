"""Import the panoptic quality code of panopticapi, OpenPSG (through mmdet 2.20.0) and fair-psgg's merge
script, from build/src/ (extracted by setup.sh), without mmcv, mmdet, detectron2 or their builds installed.

Real code loaded unmodified:
- panopticapi/evaluation.py and utils.py (the package as committed);
- mmdet 2.20.0's datasets/coco.py (CocoDataset.format_results), datasets/coco_panoptic.py
  (COCOPanoptic, CocoPanopticDataset: _pan2json, evaluate_pan_json, evaluate), datasets/api_wrappers/
  (COCO over the real pycocotools, pq_compute_single_core / pq_compute_multi_core) and
  core/evaluation/bbox_overlaps.py;
  (api_wrappers/__init__.py only re-exports those names; the stand-in package sets the same names);
- OpenPSG's openpsg/datasets/psg.py (PanopticSceneGraphDataset: __init__, _init_cocoapi, evaluate) and
  openpsg/models/relation_heads/approaches/relation_util.py (Result);
- fair-psgg's scripts/convert_openpsg.py (mask_merge, convert).

Everything else they import is a stand-in (STAND_INS below says why none changes a number).
"""

import importlib
import io
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
from PIL import Image

from tools.oracle_common import load_source, module

BUILD = Path(__file__).resolve().parent / "build"
SRC = BUILD / "src"

STAND_INS = {
    "mmcv.imwrite / imread / imfrombytes": "PNG through Pillow instead of OpenCV: lossless 8-bit RGB either way, "
                                           "so the decoded segment ids are the same",
    "mmcv.FileClient": "reads the file's bytes from disk, as mmcv's disk backend does",
    "mmcv.load / dump": "json through the standard library (mmcv's json handler does the same for these values)",
    "mmcv.ProgressBar, mmcv.utils.print_log": "progress and log output only",
    "mmdet.datasets.builder.DATASETS, mmdet.datasets.pipelines.Compose": "registration and the training pipeline; "
                                                                        "neither runs in evaluation",
    "mmdet.datasets.custom.CustomDataset": "the base class; only __len__ (len(self.data_infos), as mmdet's) is used",
    "mmdet.core.eval_recalls": "box proposal recall, not on the PQ path",
    "openpsg.evaluation.sgg_evaluation": "the scene graph evaluation, not called by evaluate(metric=['PQ'])",
    "detectron2.data.detection_utils.read_image": "used by psg.py's scene graph branch only",
}


class _FileClient:  # mmcv.FileClient(backend='disk')
    def __init__(self, backend="disk", **kwargs):
        self.backend = backend

    def get(self, filepath):
        return Path(filepath).read_bytes()


class _ProgressBar:  # mmcv.ProgressBar
    def __init__(self, *args, **kwargs):
        pass

    def update(self, *args, **kwargs):
        pass


class _Registry:  # mmcv.Registry: register_module() as a decorator that changes nothing
    def register_module(self, *args, **kwargs):
        return lambda cls: cls


class _CustomDataset:  # mmdet.datasets.custom.CustomDataset: only __len__ is used on the PQ path
    def __len__(self):
        return len(self.data_infos)


LOG = sys.stderr  # where print_log writes


def _print_log(msg, logger=None, level=None):
    print(msg, file=LOG)


def _imwrite(img, file_path, params=None, auto_mkdir=True):
    """mmcv.imwrite: img is BGR (as OpenCV takes it); the file holds RGB."""
    if auto_mkdir:
        os.makedirs(os.path.dirname(os.path.abspath(file_path)), exist_ok=True)
    Image.fromarray(np.ascontiguousarray(img[:, :, ::-1])).save(file_path, format="PNG")
    return True


def _decode(data, flag="color", channel_order="bgr"):
    if flag != "color":
        raise ValueError(f"stand-in mmcv image reader: flag {flag!r} is not used on the PQ path")
    with Image.open(io.BytesIO(data)) as image:
        rgb = np.asarray(image.convert("RGB"))
    return rgb if channel_order == "rgb" else rgb[:, :, ::-1]


def _imread(img_or_path, flag="color", channel_order="bgr", backend=None):
    return _decode(Path(img_or_path).read_bytes(), flag, channel_order)


def _imfrombytes(content, flag="color", channel_order="bgr", backend=None):
    return _decode(content, flag, channel_order)


def _dump(obj, file=None, file_format=None, **kwargs):
    def plain(value):  # mmcv's json handler turns numpy scalars and arrays into Python values
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
        raise TypeError(f"{type(value)} is not JSON serializable")
    Path(file).write_text(json.dumps(obj, default=plain))


def _load(file, file_format=None, **kwargs):
    return json.loads(Path(file).read_text())


def load():
    """-> types.SimpleNamespace(evaluation, utils, psg, Result, coco_panoptic, panoptic_evaluation, fair_psgg)."""
    if "openpsg.datasets.psg" not in sys.modules:
        _install()
    m = sys.modules
    return types.SimpleNamespace(evaluation=m["panopticapi.evaluation"], utils=m["panopticapi.utils"],
                                 psg=m["openpsg.datasets.psg"],
                                 Result=m["openpsg.models.relation_heads.approaches"].Result,
                                 coco_panoptic=m["mmdet.datasets.coco_panoptic"],
                                 panoptic_evaluation=m["mmdet.datasets.api_wrappers.panoptic_evaluation"],
                                 fair_psgg=m["convert_openpsg"])


def _install():
    if not (SRC / "openpsg").is_dir() or not (SRC / "panopticapi").is_dir():
        sys.exit(f"{SRC}: the tools' sources are missing; run tools/pq_check/setup.sh")
    module("mmcv", FileClient=_FileClient, ProgressBar=_ProgressBar, load=_load, dump=_dump, imwrite=_imwrite,
           imread=_imread, imfrombytes=_imfrombytes)
    sys.modules["mmcv"].utils = module("mmcv.utils", print_log=_print_log)
    importlib.import_module("panopticapi.evaluation")  # the real package, on the path through build/src
    _install_mmdet()
    _install_openpsg()
    load_source("convert_openpsg", SRC / "fair_psgg_scripts" / "convert_openpsg.py")


def _install_mmdet():
    mmdet = SRC / "mmdet"
    module("mmdet")
    module("mmdet.core", eval_recalls=None)
    module("mmdet.core.evaluation")
    load_source("mmdet.core.evaluation.bbox_overlaps", mmdet / "core/evaluation/bbox_overlaps.py")
    module("mmdet.datasets")
    module("mmdet.datasets.builder", DATASETS=_Registry())
    module("mmdet.datasets.custom", CustomDataset=_CustomDataset)
    module("mmdet.datasets.pipelines", Compose=lambda pipeline: None)
    coco_api = load_source("mmdet.datasets.api_wrappers.coco_api", mmdet / "datasets/api_wrappers/coco_api.py")
    evaluation = load_source("mmdet.datasets.api_wrappers.panoptic_evaluation",
                             mmdet / "datasets/api_wrappers/panoptic_evaluation.py")
    module("mmdet.datasets.api_wrappers", COCO=coco_api.COCO, COCOeval=coco_api.COCOeval,  # its __init__'s imports
           pq_compute_multi_core=evaluation.pq_compute_multi_core,
           pq_compute_single_core=evaluation.pq_compute_single_core)
    load_source("mmdet.datasets.coco", mmdet / "datasets/coco.py")
    coco_panoptic = load_source("mmdet.datasets.coco_panoptic", mmdet / "datasets/coco_panoptic.py")
    module("mmdet.datasets", DATASETS=sys.modules["mmdet.datasets.builder"].DATASETS,
           CocoPanopticDataset=coco_panoptic.CocoPanopticDataset)


def _install_openpsg():
    module("detectron2")
    module("detectron2.data")
    module("detectron2.data.detection_utils", read_image=None)
    for name in ("openpsg", "openpsg.models", "openpsg.models.relation_heads", "openpsg.datasets"):
        module(name)
    module("openpsg.evaluation", sgg_evaluation=None)
    relation_util = load_source("openpsg.models.relation_heads.approaches.relation_util",
                                SRC / "openpsg/models/relation_heads/approaches/relation_util.py")
    module("openpsg.models.relation_heads.approaches", Result=relation_util.Result)
    load_source("openpsg.datasets.psg", SRC / "openpsg/datasets/psg.py")
