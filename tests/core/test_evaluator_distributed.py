"""Evaluator.sync under a real torch.distributed process group: two gloo ranks on this machine
(tests/core/ddp_rank.py), each updating its DistributedSampler shard with torch tensors, padded
duplicates included, end with the results of the file path. Skipped where torch is not installed
(make setup installs its CPU build where the machine holds it: see the Makefile)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sgeval

pytest.importorskip("torch")


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_synced_by_gloo_give_the_file_paths_results(tmp_path, demo_data, world):
    """Every rank computes the same results after sync, equal to sgeval.evaluate on the file
    (but for the padded duplicates, counted once and reported, and the file's records of images
    outside the test split, which updates cannot name)."""
    port, outputs = _free_port(), [tmp_path / f"rank{rank}.json" for rank in range(world)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = Path(__file__).with_name("ddp_rank.py")
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), str(world), str(port), str(demo_data), str(out)],
                              env=env, stderr=subprocess.PIPE, text=True)
             for rank, out in enumerate(outputs)]
    for process in ranks:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
    results = [json.loads(Path(out).read_text()) for out in outputs]
    expected = json.loads(json.dumps(sgeval.evaluate(sgeval.make_config({
        "gt": str(demo_data / "psg.json"), "gt_seg": str(demo_data / "panoptic"), "pred": str(demo_data / "pred.zip"),
        "protocols": list(sgeval.RECALL_PROTOCOLS)}))))
    n_images = expected["images"]["evaluated"] - expected["images"]["missing_predictions"]
    assert all(result == results[0] for result in results)
    assert results[0]["images"]["duplicate_updates"] == -n_images % world
    for result in results + [expected]:
        result["images"].update(duplicate_updates=0, extra_predictions=0)
    assert results[0] == expected
