"""Regenerate sgeval's PQ fixtures, tests/data/pq/<name>.zip, with the tools' own numbers.

    tools/pq_check/build/venv/bin/python -m tools.pq_check.make_fixtures [--out DIR]
    (from the repository root; default --out: tests/data/pq)

For each fixture, make_data.generate writes the GT and the predictions (build/data/<name>/; every case
of make_data.CASES present) and oracle.score runs panopticapi, OpenPSG (mmdet 2.20.0) and fair-psgg's
merges on them. The data must make the rules visible, or it exits: OpenPSG's numbers differ from
panopticapi's on the same segmentations (the VOID collision), and the two merges give different PQ.
The zip holds the data, numbers.json and merged_<mode>/; its bytes depend only on the contents
(tools/oracle_common.write_zip).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

from tools.oracle_common import write_zip
from tools.pq_check import make_data, oracle, pq_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURES = {"pq-0": (0, 16), "pq-1": (1, 16)}  # name: seed, images


def check_rules_visible(name, numbers):
    def all_pq(key):
        return numbers[key]["summary"]["All"]["pq"]
    problems = []
    if all_pq("openpsg") == all_pq("panopticapi"):
        problems.append("OpenPSG's PQ equals panopticapi's (no VOID collision that changes a number)")
    if all_pq("merge_hilo") == all_pq("merge_psgtr"):
        problems.append("the two merges give the same PQ")
    if problems:
        sys.exit(f"{name}: " + "; ".join(problems))


def write_fixture(name, seed, images, out):
    data = HERE / "build" / "data" / name
    shutil.rmtree(data, ignore_errors=True)
    make_data.generate(seed, images, data)
    numbers = oracle.score(data)
    check_rules_visible(name, numbers)
    (data / "numbers.json").write_text(json.dumps(numbers, indent=1) + "\n")
    files = sorted(p for p in data.rglob("*") if p.is_file())
    write_zip(out / f"{name}.zip", {p.relative_to(data).as_posix(): p.read_bytes() for p in files})
    print(f"{out / name}.zip: {len(files)} files, {(out / f'{name}.zip').stat().st_size} bytes; All PQ " +
          ", ".join(f"{key} {numbers[key]['summary']['All']['pq']:.6f}" for key in numbers), file=sys.__stdout__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "tests" / "data" / "pq"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    sink = open("/dev/null", "w")
    pq_env.LOG = sink
    sys.stdout = sink  # the tools print progress to stdout
    for name, (seed, images) in FIXTURES.items():
        write_fixture(name, seed, images, Path(args.out))


if __name__ == "__main__":
    main()
