"""Import Scene-Graph-Benchmark.pytorch's real VG evaluation code (build/sgb_src/, extracted by
setup.sh) without compiling maskrcnn_benchmark's C/CUDA extension or installing its other dependencies.

Real code, loaded unmodified under its own module names:
  maskrcnn_benchmark/structures/bounding_box.py   BoxList (float32 boxes, area() with +1, resize)
  maskrcnn_benchmark/structures/boxlist_ops.py    boxlist_iou (+1 pixel convention)
  maskrcnn_benchmark/utils/miscellaneous.py       bbox_overlaps, intersect_2d, argsort_desc
  maskrcnn_benchmark/utils/comm.py                (imported by miscellaneous.py; nothing of it runs)
  maskrcnn_benchmark/data/datasets/evaluation/vg/sgg_eval.py   SGRecall ... SGNGMeanRecall, _triplet,
                                                                _compute_pred_matches
  maskrcnn_benchmark/data/datasets/evaluation/vg/vg_eval.py    evaluate_relation_of_one_image
  maskrcnn_benchmark/data/datasets/visual_genome.py   load_graphs, VGDataset.get_groundtruth and
                                                       get_img_info (the GT as the evaluation gets it)

Stand-ins (STAND_INS lists them with why none of them can change a number):
  maskrcnn_benchmark.layers.nms, scipy.linalg, maskrcnn_benchmark.data (get_dataset_statistics),
  the packages maskrcnn_benchmark.data.datasets[.evaluation[.vg]], pycocotools.coco.COCO,
  pycocotools.cocoeval.COCOeval and tqdm.
"""

import importlib
import importlib.util
import sys
import types
from pathlib import Path

from tools.oracle_common import load_source, module, never_called, package, require_source

BUILD = Path(__file__).resolve().parent / "build"
SGB = BUILD / "sgb_src"
EVAL_VG = "maskrcnn_benchmark.data.datasets.evaluation.vg"

STAND_INS = {
    "maskrcnn_benchmark.layers": "nms, imported by boxlist_ops.py for boxlist_nms; the real one is compiled "
                                 "C/CUDA (_C). boxlist_nms is never called by the evaluation; the stand-in raises",
    "scipy.linalg": "block_diag, imported by boxlist_ops.py for cat_boxlist of triplet fields, never called by the "
                    "evaluation; the stand-in raises",
    "maskrcnn_benchmark.data": "get_dataset_statistics, imported by sgg_eval.py and vg_eval.py, never called by "
                               "them (the real package __init__ builds the data loaders); the stand-in raises",
    "maskrcnn_benchmark.data.datasets, .evaluation, .evaluation.vg": "empty packages: their real __init__ files "
                                                                     "import the COCO, VOC and VG dataset code",
    "pycocotools.coco.COCO, pycocotools.cocoeval.COCOeval": "the detection mAP of do_vg_evaluation's 'bbox' iou "
                                                           "type, which the emulated loop does not run; raise",
    "tqdm": "imported by sgg_eval.py, vg_eval.py and visual_genome.py; used only by VGDataset's custom-image "
            "loading, which is not run",
    "VGDataset.__init__": "not run (it needs VG's image_data.json of 108,073 entries and the jpgs): oracle.py "
                          "sets what it would set, load_graphs' lists and img_info from the data's "
                          "image_data.json. It affects the numbers only through those, which are the inputs",
}


def _never_called(what):
    return never_called("sgb_check", what)


def load():
    """-> types.SimpleNamespace(sgg_eval, vg_eval, visual_genome, misc, boxlist_ops, BoxList), imported once."""
    if f"{EVAL_VG}.vg_eval" not in sys.modules:
        _install()
    m = sys.modules
    return types.SimpleNamespace(sgg_eval=m[f"{EVAL_VG}.sgg_eval"], vg_eval=m[f"{EVAL_VG}.vg_eval"],
                                 visual_genome=m["maskrcnn_benchmark.data.datasets.visual_genome"],
                                 misc=m["maskrcnn_benchmark.utils.miscellaneous"],
                                 boxlist_ops=m["maskrcnn_benchmark.structures.boxlist_ops"],
                                 BoxList=m["maskrcnn_benchmark.structures.bounding_box"].BoxList)


def _install():
    require_source(BUILD, SGB, "maskrcnn_benchmark", "Scene-Graph-Benchmark", "SGB")
    module("maskrcnn_benchmark.layers", nms=_never_called("maskrcnn_benchmark.layers.nms"))
    if importlib.util.find_spec("scipy") is None:
        package("scipy")
        module("scipy.linalg", block_diag=_never_called("scipy.linalg.block_diag"))
    package("maskrcnn_benchmark.data").get_dataset_statistics = _never_called("get_dataset_statistics")
    for name in ("maskrcnn_benchmark.data.datasets", "maskrcnn_benchmark.data.datasets.evaluation", EVAL_VG):
        package(name)
    package("pycocotools")
    module("pycocotools.coco", COCO=_never_called("pycocotools COCO"))
    module("pycocotools.cocoeval", COCOeval=_never_called("pycocotools COCOeval"))
    if importlib.util.find_spec("tqdm") is None:
        module("tqdm", tqdm=_never_called("tqdm"))

    importlib.import_module("maskrcnn_benchmark.structures.bounding_box")  # real packages from here on
    importlib.import_module("maskrcnn_benchmark.structures.boxlist_ops")
    importlib.import_module("maskrcnn_benchmark.utils.miscellaneous")
    folder = SGB / "maskrcnn_benchmark/data/datasets/evaluation/vg"
    load_source(f"{EVAL_VG}.sgg_eval", folder / "sgg_eval.py")
    load_source(f"{EVAL_VG}.vg_eval", folder / "vg_eval.py")
    load_source("maskrcnn_benchmark.data.datasets.visual_genome", SGB / "maskrcnn_benchmark/data/datasets/visual_genome.py")
