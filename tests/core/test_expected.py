"""The demo data's results equal the stored ones (made before the speed work), bit for bit, for
one and two workers."""

import json

import pytest
from tools.make_expected import EXPECTED, demo_results


@pytest.mark.parametrize("workers", [1, 2])
def test_demo_results_equal_the_stored_ones(tmp_path, workers):
    expected = json.loads(EXPECTED.read_text())
    assert demo_results(tmp_path, workers) == expected
