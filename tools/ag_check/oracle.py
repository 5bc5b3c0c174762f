"""Run the Action Genome evaluation of STTran, TEMPURA and DSG-DETR, unmodified, on generated data.

    tools/ag_check/build/venv/bin/python -m tools.ag_check.oracle --data DIR --task predcls --out numbers.json

Each tool's own files (build/src/<tool>/, extracted by setup.sh at its pinned commit) are imported
under their own names (``dataloader.action_genome``, ``lib.evaluation_recall``,
``lib.ults.pytorch_misc`` and the compiled ``lib.fpn.box_intersections_cpu.bbox``), one tool at a
time. ``run`` does what each tool's test.py does (STTran test.py:17-19, 41-69, 82-93): the
dataset ``AG(mode="test", datasize="large", data_path=DIR/, filter_nonperson_box_frame=True,
filter_small_box=task != "predcls")`` with the working directory DIR (the filtered object file is
opened as 'dataloader/object_bbox_and_relationship_filtersmall.pkl'), the three evaluators
(constraint 'with'; 'semi' with semithreshold 0.9; 'no'), and per video, in the dataset's order,
``evaluate_scene_graph(gt_annotation, dict(pred))`` for each, pred being the model output of that
video (make_data's pred_<task>_{logits,probs}.pt: logits for STTran and DSG-DETR, whose evaluator
applies the softmax, probabilities for TEMPURA, whose model does).

The numbers are read from the evaluators' own state after the run:
  R@K            np.mean(result_dict[mode + '_recall'][K]) (what print_stats prints, at full precision)
  per_frame      result_dict[mode + '_recall'][K]: the recall of every frame, in evaluation order
  TEMPURA mR@K   calc_mrecall() (evaluation_recall.py:32-48: pooled hits over pooled counts per
                 predicate, + 1e-10, summed over all 26 and divided by 26), with its per-predicate
                 hit and count lists
  DSG-DETR mR@K  the mean-recall lines of print_stats, which DSG-DETR ships inside a string
                 ("uncomment the following lines if mean recall is needed", evaluation_recall.py:40-51):
                 that text is taken from the file and executed as it stands, after the run, with
                 print and the log file caught; the number is the sum_recall / float(self.num_rel)
                 it prints, computed from the block's own sum_recall at the moment it prints

Stand-ins (STAND_INS; none can change a number): what the dataloader imports for reading and
resizing images, which the evaluation never does.
"""

import argparse
import ast
import contextlib
import io
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

from tools.oracle_common import module

BUILD = Path(__file__).resolve().parent / "build"
TOOLS = ("sttran", "tempura", "dsgdetr")
ATTENTION_INPUT = {"sttran": "logits", "tempura": "probs", "dsgdetr": "logits"}
KS = (10, 20, 50, 100)
CONSTRAINTS = ("with", "semi", "no")

STAND_INS = {
    "scipy.misc.imread": "imported by STTran's and DSG-DETR's dataloader/action_genome.py:6 (removed from scipy "
                         "1.2); only __getitem__ reads images, never called here (raises)",
    "cv2": "imported by TEMPURA's dataloader/action_genome.py:7-8 for imread; only __getitem__ reads images, "
           "never called here (raises)",
    "torchvision.transforms": "imported by dataloader/action_genome.py:4 (Resize, Compose, ToTensor, Normalize); "
                              "never used by the file",
    "fasterRCNN.lib.model.utils.blob": "imported by dataloader/action_genome.py:10 (prep_im_for_blob, "
                                       "im_list_to_blob); only __getitem__ uses them, never called here (raise)",
}


def _never(name):
    def called(*args, **kwargs):
        raise RuntimeError(f"stand-in {name} called: the oracle reads no image")
    return called


def install_stand_ins():
    module("scipy", __path__=[])
    module("scipy.misc", imread=_never("scipy.misc.imread"))
    module("cv2", imread=_never("cv2.imread"), IMREAD_UNCHANGED=-1)
    module("torchvision", __path__=[])
    module("torchvision.transforms", **{n: _never(f"torchvision.transforms.{n}")
                                        for n in ("Resize", "Compose", "ToTensor", "Normalize")})
    for name in ("fasterRCNN", "fasterRCNN.lib", "fasterRCNN.lib.model", "fasterRCNN.lib.model.utils"):
        module(name, __path__=[])
    module("fasterRCNN.lib.model.utils.blob", prep_im_for_blob=_never("prep_im_for_blob"),
           im_list_to_blob=_never("im_list_to_blob"))


def load_tool(tool):
    """(dataloader.action_genome, lib.evaluation_recall) of one tool, its modules imported afresh."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("lib", "dataloader")]:
        del sys.modules[name]
    source = str(BUILD / "src" / tool)
    sys.path = [source] + [p for p in sys.path if not p.startswith(str(BUILD / "src"))]
    install_stand_ins()
    import dataloader.action_genome as action_genome
    import lib.evaluation_recall as evaluation_recall
    assert Path(evaluation_recall.__file__).resolve().is_relative_to(Path(source).resolve())
    return action_genome, evaluation_recall


def evaluators(evaluation_recall, dataset, task):
    """The three evaluators of test.py (STTran test.py:41-69; TEMPURA test.py:62-93 adds output_dir=None)."""
    common = dict(mode=task, AG_object_classes=dataset.object_classes, AG_all_predicates=dataset.relationship_classes,
                  AG_attention_predicates=dataset.attention_relationships,
                  AG_spatial_predicates=dataset.spatial_relationships,
                  AG_contacting_predicates=dataset.contacting_relationships, iou_threshold=0.5)
    return {"with": evaluation_recall.BasicSceneGraphEvaluator(constraint="with", **common),
            "semi": evaluation_recall.BasicSceneGraphEvaluator(constraint="semi", semithreshold=0.9, **common),
            "no": evaluation_recall.BasicSceneGraphEvaluator(constraint="no", **common)}


def dsgdetr_mean_recall(evaluation_recall, evaluator):
    """{K: mR} from the mean-recall block DSG-DETR keeps inside a string in print_stats, executed as written."""
    source = Path(evaluation_recall.__file__).read_text()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BasicSceneGraphEvaluator")
    stats = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "print_stats")
    string = next(n for n in ast.walk(stats) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                  and "mean recall is needed" in str(n.value.value))
    # the lines between the opening line and the closing quotes, as written (escapes such as \\n kept)
    block = textwrap.dedent("\n".join(source.splitlines()[string.lineno:string.end_lineno - 1]))
    found = {}
    namespace = {"self": evaluator, "np": np, "f": io.StringIO()}

    def caught_print(*args):
        found[namespace["k"]] = namespace["sum_recall"] / float(evaluator.num_rel)

    namespace["print"] = caught_print
    exec(compile(block, evaluation_recall.__file__, "exec"), namespace)  # noqa: S102 -- DSG-DETR's own lines
    return found


def tool_numbers(tool, evaluation_recall, evaluator, task):
    result = evaluator.result_dict
    numbers = {"R": {str(k): float(np.mean(result[f"{task}_recall"][k])) for k in KS},
               "per_frame": {str(k): [float(v) for v in result[f"{task}_recall"][k]] for k in KS}}
    if tool == "tempura":
        numbers["mR"] = {str(k): float(v) for k, v in evaluator.calc_mrecall().items()}
        numbers["hits"] = {str(k): [int(v) for v in result[f"{task}_recall_hit"][k]] for k in KS}
        numbers["counts"] = {str(k): [int(v) for v in result[f"{task}_recall_count"][k]] for k in KS}
    if tool == "dsgdetr":
        numbers["mR"] = {str(k): float(v) for k, v in dsgdetr_mean_recall(evaluation_recall, evaluator).items()}
        numbers["per_predicate"] = {str(k): [float(np.mean(v)) if v else None for v in lists]
                                    for k, lists in result[f"{task}_mean_recall_collect"].items()}
    return numbers


def run(tool, data, task):
    """One tool's numbers on data (make_data's folder) for task: {constraint: numbers}, frames."""
    data = Path(data).resolve()
    action_genome, evaluation_recall = load_tool(tool)
    preds = torch.load(data / f"pred_{task}_{ATTENTION_INPUT[tool]}.pt", weights_only=True)
    with contextlib.chdir(data), contextlib.redirect_stdout(sys.stderr):
        dataset = action_genome.AG(mode="test", datasize="large", data_path=f"{data}/",
                                   filter_nonperson_box_frame=True, filter_small_box=task != "predcls")
        evaluating = evaluators(evaluation_recall, dataset, task)
        for index, frames in enumerate(dataset.video_list):
            pred = preds[frames[0].split("/")[0]]
            for evaluator in evaluating.values():
                evaluator.evaluate_scene_graph(dataset.gt_annotations[index], dict(pred))
        numbers = {name: tool_numbers(tool, evaluation_recall, evaluator, task)
                   for name, evaluator in evaluating.items()}
    frames = [key for video in dataset.video_list for key in video]
    return numbers, frames


def run_all(data, task):
    """{tool: {constraint: numbers}}, 'frames': the evaluated frame keys in order (the same for every tool)."""
    out, frames = {}, None
    for tool in TOOLS:
        out[tool], tool_frames = run(tool, data, task)
        assert frames is None or frames == tool_frames, "the tools' loaders keep different frames"
        frames = tool_frames
    return {"task": task, "frames": frames, **out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--task", choices=("predcls", "sgcls", "sgdet"), required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    numbers = run_all(args.data, args.task)
    Path(args.out).write_text(json.dumps(numbers, indent=1) + "\n")
    for tool in TOOLS:
        for constraint in CONSTRAINTS:
            entry = numbers[tool][constraint]
            print(tool, constraint, "R", entry["R"], "mR", entry.get("mR", ""), file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
