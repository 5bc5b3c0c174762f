"""Write tests/data/demo_expected.json: the demo data's results, the regression oracle of
tests/core/test_expected.py.

    python -m tools.make_expected     # from the repository root

The stored file was made by the evaluator as it was before the speed work (commit 7d2e287); it
must only be regenerated for a deliberate change of the demo data or of a metric definition,
and the commit doing so must say why.
"""

import json
import tempfile
from pathlib import Path

import sgeval
from tools import make_demo

EXPECTED = Path(__file__).resolve().parents[1] / "tests" / "data" / "demo_expected.json"
STORED_KEYS = ("metrics", "per_predicate", "rules", "images_left_out")  # of each protocol (later additions have
# their own tests: predicate_confusion in tests/core/test_confusion.py)
IMAGE_KEYS = ("evaluated", "missing_predictions", "skipped_no_relations", "extra_predictions")  # (the Evaluator's
# scope and duplicate_updates: tests/core/test_evaluator.py)


def demo_results(out, workers=1):
    """{"mode/aggregation": results subset} for every protocol, on demo data written to out."""
    gt, pred = make_demo.make_demo(out)
    results = {}
    for mode in ("mask", "box"):
        values = {"gt": str(gt), "pred": str(pred), "protocols": list(sgeval.RECALL_PROTOCOLS), "workers": workers,
                  "k": ["20", "50", "100", "x1", "x10"]}
        if mode == "mask":
            values["gt_seg"] = str(Path(out) / "panoptic")
        for aggregation in ("per_image", "pooled"):
            result = sgeval.evaluate(sgeval.make_config({**values, "aggregation": aggregation}))
            by_protocol = {protocol: {key: value for key, value in section.items() if key in STORED_KEYS}
                           for protocol, section in result["by_protocol"].items()}
            results[f"{mode}/{aggregation}"] = {
                "by_protocol": by_protocol, "images": {key: result["images"][key] for key in IMAGE_KEYS},
                "protocol_audit": {k: v for k, v in result["protocol_audit"].items() if k != "per_image"}}
    return json.loads(json.dumps(results))  # the JSON round trip the stored file went through


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as out:
        EXPECTED.write_text(json.dumps(demo_results(out), indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}")
