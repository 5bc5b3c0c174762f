"""One rank of tests/core/test_evaluator_distributed.py (run as a script, not collected by pytest):

    python tests/core/ddp_rank.py RANK WORLD PORT DATA OUT

Joins a gloo process group on 127.0.0.1:PORT, updates an Evaluator with its shard of the demo
data's prediction records as torch tensors -- DistributedSampler's shard, padded duplicates
included -- syncs and writes the computed results to OUT."""

import json
import math
import sys

import numpy as np
import torch
import torch.distributed as dist

import sgeval


def records_as_tensors(data, evaluator):
    """(image id, update arguments as torch tensors) of every evaluated image of the file."""
    gt, problems = evaluator.gt, []
    source, records = sgeval.prediction_records(f"{data}/pred.zip", len(gt.object_classes),
                                                len(gt.predicate_classes), "mask", problems)
    items = []
    for record in records:
        slot = evaluator.slot_of.get(record.image_id)
        if slot is None:
            continue
        image, n = gt.images[slot], len(record.categories)
        masks = np.zeros((n, image.height, image.width), bool)
        if n:
            bits = sgeval.load_pred_masks(source, record, image.height, image.width)
            pixels = np.unpackbits(bits.view(np.uint8), axis=1)[:, :image.height * image.width]
            masks = pixels.reshape(n, image.height, image.width).astype(bool)
        items.append((record.image_id, {
            "labels": torch.from_numpy(record.categories), "masks": torch.from_numpy(masks),
            "scores": None if record.scores is None else torch.from_numpy(record.scores),
            "triplets": torch.from_numpy(record.triplets), "ng_triplets": torch.from_numpy(record.ng_triplets)}))
    return items


def main(rank, world, port, data, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    evaluator = sgeval.Evaluator({"gt": f"{data}/psg.json", "gt_seg": f"{data}/panoptic",
                                  "pred": f"{data}/pred.zip", "protocols": list(sgeval.RECALL_PROTOCOLS)})
    items = records_as_tensors(data, evaluator)
    total = math.ceil(len(items) / world) * world  # DistributedSampler pads with the first items again
    padded = items + items[:total - len(items)]
    for image_id, arguments in padded[rank:total:world]:
        evaluator.update(int(image_id), **arguments)
    evaluator.sync()
    with open(out, "w") as handle:
        json.dump(evaluator.compute(), handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
