"""Regenerate sgeval's Action Genome fixtures, tests/data/ag/ag-<seed>.zip, with the numbers of
STTran's, TEMPURA's and DSG-DETR's own evaluation code.

    tools/ag_check/build/venv/bin/python -m tools.ag_check.make_fixtures [--out DIR]
    (from the repository root; default --out: tests/data/ag)

For each fixture, make_data.generate writes the data (build/data/<name>/, every case of
make_data.CASES present) and oracle.run_all scores predcls, sgcls and sgdet with each tool. The zip
holds the raw inputs and what the tools gave:

  annotations/object_classes.txt, annotations/relationship_classes.txt, annotations/person_bbox.pkl,
  annotations/object_bbox_and_relationship.pkl, dataloader/object_bbox_and_relationship_filtersmall.pkl
                          the data in AG's layout (make_data.py)
  pred_<task>_logits.pt, pred_<task>_probs.pt
                          the model outputs per video (torch.save of {video: pred})
  oracle_<task>.json      the tools' numbers (oracle.run_all): per tool and constraint R@K, the recall of
                          every frame, and mR@K (TEMPURA's and DSG-DETR's rules)
  summary.json            make_data's case counts

The bytes depend only on the contents (sorted names, fixed times; torch.save's zip is deterministic
for the same tensors).
"""

import argparse
import json
import shutil
from pathlib import Path

from tools.ag_check import make_data, oracle
from tools.oracle_common import write_zip

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = {"ag-0": 0, "ag-1": 1}  # name: seed
MEMBERS = ("annotations/object_classes.txt", "annotations/relationship_classes.txt", "annotations/person_bbox.pkl",
           "annotations/object_bbox_and_relationship.pkl",
           "dataloader/object_bbox_and_relationship_filtersmall.pkl", "summary.json")


def make_fixture(name, seed, out):
    data = oracle.BUILD / "data" / name
    shutil.rmtree(data, ignore_errors=True)
    summary = make_data.generate(seed, data)
    if summary["missing"]:
        raise SystemExit(f"{name}: cases missing: {summary['missing']}")
    members = {member: (data / member).read_bytes() for member in MEMBERS}
    for task in make_data.TASKS:
        for kind in ("logits", "probs"):
            members[f"pred_{task}_{kind}.pt"] = (data / f"pred_{task}_{kind}.pt").read_bytes()
        numbers = oracle.run_all(data, task)
        members[f"oracle_{task}.json"] = (json.dumps(numbers, indent=1, sort_keys=True) + "\n").encode()
    write_zip(Path(out) / f"{name}.zip", members)
    print(f"{name}: {sum(len(v) for v in members.values())} bytes of members")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tests" / "data" / "ag"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name, seed in FIXTURES.items():
        make_fixture(name, seed, args.out)


if __name__ == "__main__":
    main()
