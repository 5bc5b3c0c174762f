"""The per-image counts store (CountStore) hands back exactly the counts it was given."""

import numpy as np
import pytest
from conftest import sgeval


@pytest.mark.parametrize("n_k, n_predicates", [(5, 7), (3, 3), (2, 1)])
def test_image_counts_store_reads_back_every_field_whole(n_k, n_predicates):
    """CountStore keeps only the predicate columns of an image's GT (its other per-predicate counts
    are zero); every field it hands back equals the counts stacked whole (n_k == C included:
    fields are told apart by name)."""
    rng = np.random.default_rng(n_k * 10 + n_predicates)
    shapes = sgeval.count_shapes(n_k, 2, n_predicates)
    images = []
    for slot in range(12):  # an image's per-predicate counts are zero where its GT lacks the predicate
        gt_rel = rng.integers(1, 9, n_predicates) * (rng.random(n_predicates) < (0.0 if slot == 3 else 0.4))
        images.append({field: gt_rel if field == "gt_rel" else rng.integers(0, 9, shape) * (
            gt_rel > 0 if field in sgeval.PER_PREDICATE_FIELDS else 1) for field, shape in shapes.items()})
    store = sgeval.CountStore(13, shapes)  # slot 12 is never filled: zeros
    for slot in rng.permutation(12):
        store.put(slot, images[slot])
    assert list(store) == list(shapes) and len(store) == len(shapes)
    for field, shape in list(shapes.items()) * 2:  # twice: the cached field and a fresh one
        expected = np.stack([np.asarray(image[field], np.int64).reshape(shape) for image in images]
                            + [np.zeros(shape, np.int64)])
        np.testing.assert_array_equal(store[field], expected)
        assert store[field].dtype == np.int64
