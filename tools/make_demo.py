"""Generate the sgeval demo data: a small synthetic PSG-like dataset and a simulated model's output.

    python -m tools.make_demo --out demo/data [--seed 0]     # from the repository root

Writes <out>/psg.json, <out>/panoptic/<image_id>.png, and two simulated models' predictions
(through `sgeval.write_predictions`): <out>/pred.zip ("Model A", configs/demo.yaml) and
<out>/pred-b.zip ("Model B": fewer spurious rows, and wrong predicates that follow CONFUSIONS,
so its confusion matrix has a structure to see). The vocabulary has the PSG sizes and names (80
thing, 53 stuff, 56 predicate classes); relations use a long-tailed subset of the predicates, so
the report lists some predicates as absent. A fixed seed gives byte-identical files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tools import synth

THING_CLASSES = [
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
]
STUFF_CLASSES = [
    "banner", "blanket", "bridge", "cardboard", "counter", "curtain", "door-stuff", "floor-wood",
    "flower", "fruit", "gravel", "house", "light", "mirror-stuff", "net", "pillow", "platform",
    "playingfield", "railroad", "river", "road", "roof", "sand", "sea", "shelf", "snow", "stairs",
    "tent", "towel", "wall-brick", "wall-stone", "wall-tile", "wall-wood", "water-other",
    "window-blind", "window-other", "tree-merged", "fence-merged", "ceiling-merged",
    "sky-other-merged", "cabinet-merged", "table-merged", "floor-other-merged", "pavement-merged",
    "mountain-merged", "grass-merged", "dirt-merged", "paper-merged", "food-other-merged",
    "building-other-merged", "rock-merged", "wall-other-merged", "rug-merged",
]
PREDICATE_CLASSES = [
    "over", "in front of", "beside", "on", "in", "attached to", "hanging from", "on back of",
    "falling off", "going down", "painted on", "walking on", "running on", "crossing",
    "standing on", "lying on", "sitting on", "flying over", "jumping over", "jumping from",
    "wearing", "holding", "carrying", "looking at", "guiding", "kissing", "eating", "drinking",
    "feeding", "biting", "catching", "picking", "playing with", "chasing", "climbing", "cleaning",
    "playing", "touching", "pushing", "pulling", "opening", "cooking", "talking to", "throwing",
    "slicing", "driving", "riding", "parked on", "driving on", "about to hit", "kicking",
    "swinging", "entering", "exiting", "enclosing", "leaning on",
]

CONFUSIONS = {  # Model B's usual wrong predicate for a GT predicate
    "over": "on", "on": "standing on", "standing on": "on", "sitting on": "on", "lying on": "on",
    "in front of": "beside", "beside": "in front of", "in": "on", "attached to": "hanging from",
    "hanging from": "attached to", "on back of": "on", "walking on": "standing on", "running on": "walking on",
    "holding": "carrying", "carrying": "holding", "looking at": "beside", "eating": "holding",
}

N_IMAGES, HEIGHT, WIDTH = 80, 120, 160
N_USED_PREDICATES = 30  # the last 26 predicates never occur in the demo GT


def predicate_weights(n_predicates, n_used):
    """Long-tailed weights over the first n_used predicates (as in PSG, "over", "in front of",
    "beside", "on" lead); the rest get weight 0."""
    weights = np.zeros(n_predicates)
    weights[:n_used] = 1.0 / np.arange(1, n_used + 1) ** 0.8
    return weights


def make_demo(out, seed=0):
    """Write the demo GT and predictions under `out`; returns (psg.json path, pred.zip path); Model
    B's predictions are pred-b.zip beside pred.zip."""
    import sgeval  # imported here so `--help` works without it

    out = Path(out)
    rng = np.random.default_rng(seed)
    names = (THING_CLASSES, STUFF_CLASSES, PREDICATE_CLASSES)
    dataset = synth.make_dataset(
        rng, N_IMAGES, HEIGHT, WIDTH, len(THING_CLASSES), len(STUFF_CLASSES), len(PREDICATE_CLASSES),
        test_fraction=0.4, max_segments=10, max_relations=12, class_names=names,
        predicate_weights=predicate_weights(len(PREDICATE_CLASSES), N_USED_PREDICATES),
        thing_weights=1.0 / np.arange(1, len(THING_CLASSES) + 1) ** 1.5)  # "person" is most common
    gt_path = synth.write_gt(dataset, out)
    pred_path = out / "pred.zip"
    sgeval.write_predictions(pred_path, synth.simulate_predictions(rng, dataset, n_spurious=80))
    index = {name: p for p, name in enumerate(PREDICATE_CLASSES)}
    confusions = {index[gt]: index[predicted] for gt, predicted in CONFUSIONS.items()}
    sgeval.write_predictions(out / "pred-b.zip", synth.simulate_predictions(rng, dataset, n_spurious=30,
                                                                          confusions=confusions))
    return gt_path, pred_path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.make_demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="demo/data", help="output directory (default: demo/data)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    gt_path, pred_path = make_demo(args.out, args.seed)
    print(f"wrote {gt_path}, {Path(gt_path).parent / 'panoptic'}/, {pred_path} and {pred_path.parent / 'pred-b.zip'}")


if __name__ == "__main__":
    main()
