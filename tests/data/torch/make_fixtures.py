"""Write the torch.save fixtures of tests/convert/test_torchfile.py with real torch (not a dependency of
sgeval: run it by hand with a Python that has torch, from the repository root):

    /path/to/python-with-torch tests/data/torch/make_fixtures.py

Every value is deterministic, so the tests state what torch wrote without torch. Files written:
<name>.zip.pytorch (torch's default format) and <name>.legacy.pytorch
(_use_new_zipfile_serialization=False), plus zeroshot_triplet at pickle protocol 4. Made with
torch 2.13.0+cpu. Rewriting the legacy files changes their bytes (their storage keys are heap
addresses), not their values.
"""

import os
import sys
import types

import torch

OUT = os.path.dirname(os.path.abspath(__file__))


def boxlist_class():
    """A class importable as maskrcnn_benchmark.structures.bounding_box.BoxList with the attributes
    Scene-Graph-Benchmark's BoxList pickles (bbox, size, mode, extra_fields, triplet_extra_fields)."""
    names = ["maskrcnn_benchmark", "maskrcnn_benchmark.structures", "maskrcnn_benchmark.structures.bounding_box"]
    for name in names:
        sys.modules.setdefault(name, types.ModuleType(name))

    class BoxList:
        def __init__(self, bbox, size, mode="xyxy"):
            self.bbox = torch.as_tensor(bbox, dtype=torch.float32)
            self.size, self.mode, self.extra_fields, self.triplet_extra_fields = size, mode, {}, []

        def add_field(self, name, value, is_triplet=False):
            self.extra_fields[name] = value
            if is_triplet:
                self.triplet_extra_fields.append(name)

    BoxList.__module__, BoxList.__qualname__ = names[-1], "BoxList"
    sys.modules[names[-1]].BoxList = BoxList
    return BoxList


def eval_results():
    """Two images as Scene-Graph-Benchmark's save_output writes them (sgcls-like): the second
    prediction has no relation rows; predict_logits are slices of one (5, 4) tensor (offsets and a
    storage shared between BoxLists)."""
    BoxList = boxlist_class()
    logits = torch.arange(20, dtype=torch.float32).reshape(5, 4) / 4
    gt0 = BoxList([[0, 0, 10, 10], [5, 5, 20, 15], [1, 2, 3, 4]], (32, 24))
    gt0.add_field("labels", torch.tensor([3, 1, 2]))
    gt0.add_field("relation", torch.tensor([[0, 2, 0], [0, 0, 0], [0, 1, 0]]), is_triplet=True)
    gt0.add_field("relation_tuple", torch.tensor([[0, 1, 2], [2, 1, 1]]))
    gt1 = BoxList([[2, 2, 8, 8], [0, 0, 4, 4]], (16, 16))
    gt1.add_field("labels", torch.tensor([1, 1]))
    gt1.add_field("relation_tuple", torch.tensor([[1, 0, 3]]))
    pred0 = BoxList([[0.5, 0, 10, 10.25], [5, 5, 20, 15], [1, 2, 3, 4.5]], (32, 24))
    pred0.add_field("pred_labels", torch.tensor([3, 1, 2]))
    pred0.add_field("pred_scores", torch.tensor([0.5, 0.25, 0.75]))
    pred0.add_field("rel_pair_idxs", torch.tensor([[0, 1], [2, 1], [1, 0]]))
    pred0.add_field("pred_rel_scores", torch.tensor([[0.1, 0.2, 0.6, 0.1], [0.4, 0.5, 0.05, 0.05],
                                                     [0.25, 0.25, 0.25, 0.25]]))
    pred0.add_field("pred_rel_labels", torch.tensor([2, 1, 1]))
    pred0.add_field("labels", torch.tensor([3, 1, 2]))
    pred0.add_field("predict_logits", logits[0:3])
    pred1 = BoxList([[2, 2, 8, 8], [0, 0, 4, 4]], (16, 16))
    pred1.add_field("pred_labels", torch.tensor([1, 1]))
    pred1.add_field("pred_scores", torch.tensor([1.0, 0.5]))
    pred1.add_field("rel_pair_idxs", torch.zeros((0, 2), dtype=torch.int64))
    pred1.add_field("pred_rel_scores", torch.zeros((0, 4)))
    pred1.add_field("pred_rel_labels", torch.zeros(0, dtype=torch.int64))
    pred1.add_field("labels", torch.tensor([1, 1]))
    pred1.add_field("predict_logits", logits[3:5])
    return {"groundtruths": [gt0, gt1], "predictions": [pred0, pred1]}


def zeroshot_triplet():
    """(6, 3) int64 rows (subject class, object class, predicate), 1-based, sorted."""
    return torch.tensor([[1, 1, 33], [1, 2, 5], [4, 150, 50], [7, 3, 1], [150, 150, 1], [150, 150, 50]])


def views_and_dtypes():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "base": base,
        "view": base[1:, ::2],  # storage offset 6, strides (6, 2)
        "transposed": base.t(),  # strides (1, 6)
        "row": base[2],  # base's storage at offset 12
        "scalar_view": base[3, 5],  # 0-d at offset 23
        "expanded": torch.arange(3).expand(4, 3),  # stride 0
        "float64": torch.tensor([[0.5, -1.25, 3.0]], dtype=torch.float64),
        "float16": torch.tensor([1.5, -2.0, 65504.0], dtype=torch.float16),
        "int32": torch.tensor([-7, 2 ** 31 - 1], dtype=torch.int32),
        "int16": torch.tensor([-3, 7], dtype=torch.int16),
        "int8": torch.tensor([-3, 7], dtype=torch.int8),
        "uint8": torch.tensor([[0, 255], [7, 9]], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "int64": torch.tensor([-2 ** 40, 2 ** 62]),
        "empty": torch.zeros((0, 2), dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "size": torch.Size([3, 4]),
        "parameter": torch.nn.Parameter(torch.ones(2, 2)),
        "nested": [base[0], (base[:, 1], {"deep": base[1:3, 1:3]})],
    }


def new_dtypes():
    """dtypes torch 2.x writes as untyped storage + dtype (_rebuild_tensor_v3), and bfloat16."""
    return {"uint16": torch.tensor([1, 65535], dtype=torch.uint16),
            "uint32": torch.tensor([1, 2 ** 32 - 1], dtype=torch.uint32),
            "uint64": torch.tensor([1, 2 ** 63], dtype=torch.uint64),
            "bfloat16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}


def main():
    objects = {"eval_results": eval_results(), "zeroshot_triplet": zeroshot_triplet(),
               "views": views_and_dtypes(), "new_dtypes": new_dtypes()}
    for name, value in objects.items():
        for kind, zipped in (("zip", True), ("legacy", False)):
            torch.save(value, os.path.join(OUT, f"{name}.{kind}.pytorch"), _use_new_zipfile_serialization=zipped)
    torch.save(objects["zeroshot_triplet"], os.path.join(OUT, "zeroshot_triplet.zip-p4.pytorch"), pickle_protocol=4)
    torch.save(objects["zeroshot_triplet"], os.path.join(OUT, "zeroshot_triplet.legacy-p4.pytorch"),
               pickle_protocol=4, _use_new_zipfile_serialization=False)
    print("torch", torch.__version__)


if __name__ == "__main__":
    main()
