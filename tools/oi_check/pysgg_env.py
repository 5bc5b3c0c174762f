"""Import PySGG's real Open Images evaluation code (build/pysgg_src/, extracted by setup.sh) without
compiling pysgg's C/CUDA extension or installing its other dependencies.

Real code, loaded unmodified under its own module names (the normal import machinery, from
build/pysgg_src/; only the __init__ files of pysgg.data, pysgg.data.datasets and its evaluation
packages are replaced by empty packages over the real folders):
  pysgg/structures/bounding_box.py            BoxList (float32 boxes, area() with +1, resize, clip_to_image)
  pysgg/structures/boxlist_ops.py             boxlist_iou (+1 pixel convention)
  pysgg/utils/miscellaneous.py                bbox_overlaps, intersect_2d, argsort_desc
  pysgg/utils/comm.py                         (imported by miscellaneous.py and open_image.py)
  pysgg/data/datasets/open_image.py           load_cate_info, load_annotations, OIDataset (its whole
                                              __init__, get_img_info, get_groundtruth)
  pysgg/data/datasets/evaluation/oi/__init__.py        oi_evaluation, adapt_results
  pysgg/data/datasets/evaluation/oi/oi_evaluation.py   eval_rel_results, eval_classic_recall,
                                                       _compute_pred_matches
  pysgg/data/datasets/evaluation/oi/ap_eval_rel.py     prepare_mAP_dets, ap_eval, get_ap, boxes_union
  pysgg/data/datasets/evaluation/vg/sgg_eval.py        SGRecall, SGNoGraphConstraintRecall,
                                                       SGMeanRecall, SGStagewiseRecall
  pysgg/data/datasets/evaluation/vg/vg_eval.py         evaluate_relation_of_one_image, save_output
  pysgg/data/datasets/evaluation/vg/vg_stage_eval_utils.py   (SGStagewiseRecall's helpers)
Real packages from PyPI (setup.sh): torch, numpy, scikit-learn (sklearn.metrics in sgg_eval.py),
scipy (boxlist_ops.py), tqdm, six (ap_eval_rel.py), pillow (open_image.py).

Stand-ins (STAND_INS lists them with why none of them can change a number): pysgg.config.cfg,
pysgg.layers.nms, pysgg.data.datasets.visual_genome, pysgg.data.datasets.evaluation.coco.coco_eval,
pycocotools.coco / .cocoeval, ipdb, matplotlib.pyplot (when matplotlib is not installed), and the
empty packages above.
"""

import importlib
import importlib.util
import sys
import types
from pathlib import Path

from tools.oracle_common import module, never_called, package, require_source

BUILD = Path(__file__).resolve().parent / "build"
SRC = BUILD / "pysgg_src"
DATASETS = "pysgg.data.datasets"
EVALUATION = f"{DATASETS}.evaluation"

# The values the loaded files read from cfg (grep 'cfg\.' build/pysgg_src), as PySGG's Open Images v4
# relation test has them: configs/e2e_relBGNN_oiv4.yaml over pysgg/config/defaults.py, with the task's
# two flags set on the command line as scripts/rel_train_BGNN_*.sh set them (tools/relation_test_net.py
# takes the same options). Line numbers are PySGG's at the pinned commit.
CONFIG = {
    "DEBUG": False,  # oiv4.yaml:11 (defaults.py:22); open_image.py:139 (True would cut the split to 200 images)
    "OUTPUT_DIR": "checkpoints",  # never used: only get_statistics and do_vg_evaluation write there
    "DATASETS.LOAD_PRECOMPUTE_DETECTION_BOX": False,  # oiv4.yaml:7; open_image.py:181
    "MODEL.RELATION_ON": True,  # oiv4.yaml:74; open_image.py:170 (filter_empty_rels), oi/__init__.py:56
    "MODEL.ROI_RELATION_HEAD.NUM_CLASSES": 10,  # oiv4.yaml:217 (9 predicates + background); sgg_eval.py:578-587,1148
    "MODEL.ROI_RELATION_HEAD.LONGTAIL_PART_DICT": [None, "h", "b", "b", "b", "b", "t", "b", "t", "t"],  # oiv4.yaml:198
    "MODEL.ROI_RELATION_HEAD.DATA_RESAMPLING": True,  # oiv4.yaml:157; open_image.py:190 (train split only)
    "MODEL.ROI_RELATION_HEAD.USE_GT_BOX": None,  # per task (set_task): oi/__init__.py:19
    "MODEL.ROI_RELATION_HEAD.USE_GT_OBJECT_LABEL": None,  # per task: oi/__init__.py:20
    "TEST.RELATION.IOU_THRESHOLD": 0.5,  # oiv4.yaml:396 (defaults.py:792); oi_evaluation.py:422
    # SGStagewiseRecall's own settings (sgg_eval.py:598-617): defaults.py's values, those of a model without
    # the relation-proposal network (Motifs, IMP, ... as PySGG trains them on OI). BGNN's (oiv4.yaml:206-238)
    # would make it read a 'relness' field. They decide only the stage-wise entries, which are not reported.
    "MODEL.ROI_RELATION_HEAD.PREDICTOR": "MotifPredictor",  # defaults.py:284
    "MODEL.ROI_RELATION_HEAD.MAX_PROPOSAL_PAIR": 2048,  # defaults.py:290
    "MODEL.ROI_RELATION_HEAD.RELATION_PROPOSAL_MODEL.SET_ON": False,  # defaults.py:452
    "MODEL.ROI_RELATION_HEAD.RELATION_PROPOSAL_MODEL.PAIR_NUMS_AFTER_FILTERING": -1,  # defaults.py:468
    "MODEL.ROI_RELATION_HEAD.BGNN_MODULE.MP_ON_VALID_PAIRS": False,  # defaults.py:383
    "MODEL.ROI_RELATION_HEAD.BGNN_MODULE.MP_VALID_PAIRS_NUM": 200,  # defaults.py:385
    "MODEL.ROI_RELATION_HEAD.BGNN_MODULE.ITERATE_MP_PAIR_REFINE": 0,  # defaults.py:387
    "MODEL.ROI_RELATION_HEAD.GPSNET_MODULE.ITERATE_MP_PAIR_REFINE": 2,  # defaults.py:412
}
TASK_FLAGS = {"predcls": (True, True), "sgcls": (True, False), "sgdet": (False, False)}  # oi/__init__.py:19-25

STAND_INS = {
    "pysgg.config (cfg)": "the yacs config (pysgg/config/defaults.py needs yacs): a namespace of exactly the "
                          "values the loaded files read, CONFIG above, each with its source line",
    "pysgg.layers": "nms, imported by boxlist_ops.py for boxlist_nms; the real one is compiled C/CUDA. Never "
                    "called by the evaluation; the stand-in raises",
    "pysgg.data.datasets.visual_genome": "imported by open_image.py (resampling_dict_generation, get_VG_statistics, "
                                         "apply_resampling: train-split resampling and statistics, never called "
                                         "here; raise) and vg_eval.py (HEAD, BODY, TAIL: computed from "
                                         "LONGTAIL_PART_DICT as visual_genome.py:25-34 does; read only by "
                                         "do_vg_evaluation's plots). The real file needs h5py and bi_lvl_rsmp.py",
    "pysgg.data.datasets.evaluation.coco.coco_eval": "COCOResults, imported by oi_evaluation.py and vg_eval.py, "
                                                     "used only by the detection mAP of the 'bbox' iou type, which "
                                                     "the relation test does not ask for (raises); the real file "
                                                     "imports the mask head",
    "pycocotools.coco.COCO, pycocotools.cocoeval.COCOeval": "the same detection mAP (raise)",
    "ipdb": "imported by oi_evaluation.py and never called (set_trace raises)",
    "matplotlib.pyplot (only when matplotlib is not installed)": "imported by open_image.py and vg_eval.py for "
                                                                 "get_statistics' and do_vg_evaluation's plots, "
                                                                 "which are not run (raises)",
    "pysgg.data, pysgg.data.datasets, .evaluation, .evaluation.vg, .evaluation.coco": "empty packages over the "
        "real folders: their real __init__ files build the data loaders and import the COCO, VOC and VG code",
}


class Node(types.SimpleNamespace):
    """A cfg node: attribute access like yacs' CfgNode."""


def config():
    """The cfg stand-in built from CONFIG."""
    root = Node()
    for key, value in CONFIG.items():
        node, *path, name = [root, *key.split(".")]
        for part in path:
            node = node.__dict__.setdefault(part, Node())
        setattr(node, name, value)
    return root


def set_task(task):
    """Set cfg's USE_GT_BOX and USE_GT_OBJECT_LABEL for task, as the test command line would."""
    head = load().cfg.MODEL.ROI_RELATION_HEAD
    head.USE_GT_BOX, head.USE_GT_OBJECT_LABEL = TASK_FLAGS[task]


def _never_called(what):
    return never_called("oi_check", what)


def load():
    """-> types.SimpleNamespace(cfg, oi, oi_evaluation, ap_eval_rel, sgg_eval, vg_eval, open_image, misc,
    boxlist_ops, BoxList), imported once."""
    if f"{EVALUATION}.oi" not in sys.modules:
        _install()
    m = sys.modules
    return types.SimpleNamespace(cfg=m["pysgg.config"].cfg, oi=m[f"{EVALUATION}.oi"],
                                 oi_evaluation=m[f"{EVALUATION}.oi.oi_evaluation"],
                                 ap_eval_rel=m[f"{EVALUATION}.oi.ap_eval_rel"],
                                 sgg_eval=m[f"{EVALUATION}.vg.sgg_eval"], vg_eval=m[f"{EVALUATION}.vg.vg_eval"],
                                 open_image=m[f"{DATASETS}.open_image"], misc=m["pysgg.utils.miscellaneous"],
                                 boxlist_ops=m["pysgg.structures.boxlist_ops"],
                                 BoxList=m["pysgg.structures.bounding_box"].BoxList)


def _install():
    require_source(BUILD, SRC, "pysgg", "PySGG", "PYSGG")
    cfg = config()
    module("pysgg.config", cfg=cfg)
    module("pysgg.layers", nms=_never_called("pysgg.layers.nms"))
    for name in ("pysgg.data", DATASETS, EVALUATION, f"{EVALUATION}.vg", f"{EVALUATION}.coco"):
        package(name, SRC / name.replace(".", "/"))
    parts = {kind: [i for i, c in enumerate(cfg.MODEL.ROI_RELATION_HEAD.LONGTAIL_PART_DICT) if c == kind]
             for kind in "hbt"}  # visual_genome.py:25-34
    module(f"{DATASETS}.visual_genome", HEAD=parts["h"], BODY=parts["b"], TAIL=parts["t"],
           **{name: _never_called(f"visual_genome.{name}")
              for name in ("resampling_dict_generation", "get_VG_statistics", "apply_resampling")})
    module(f"{EVALUATION}.coco.coco_eval", COCOResults=_never_called("COCOResults"))
    package("pycocotools")
    module("pycocotools.coco", COCO=_never_called("pycocotools COCO"))
    module("pycocotools.cocoeval", COCOeval=_never_called("pycocotools COCOeval"))
    module("ipdb", set_trace=_never_called("ipdb.set_trace"))
    if importlib.util.find_spec("matplotlib") is None:
        package("matplotlib")
        module("matplotlib.pyplot", **{name: _never_called(f"matplotlib.pyplot.{name}")
                                       for name in ("subplots", "sca", "xticks", "figure")})
    for name in ("pysgg.structures.bounding_box", "pysgg.structures.boxlist_ops", "pysgg.utils.miscellaneous",
                 f"{DATASETS}.open_image", f"{EVALUATION}.vg.sgg_eval", f"{EVALUATION}.vg.vg_eval", f"{EVALUATION}.oi"):
        importlib.import_module(name)  # real files from here on (oi imports oi_evaluation and ap_eval_rel)
