"""An image's counts survive their record (pack_record -> unpack_record -> CountStore) exactly."""

import numpy as np
import pytest
from conftest import sgeval


def _settings(n_k, n_predicates, protocols=("unique", "openpsg", "oi"), audit=True):
    return sgeval.Settings("mask", protocols, 0.5, tuple(str(k + 1) for k in range(n_k)), ("10", "20"), n_predicates,
                           audit)


def _random_result(rng, settings, relations):
    """An ImageResult whose per-predicate counts are zero where the GT lacks the predicate."""
    present = np.bincount(relations[:, 2], minlength=settings.n_predicates) > 0
    counts = {}
    for protocol in settings.protocols:
        shapes = sgeval.settings_shapes(settings, protocol)
        counts[protocol] = {field: rng.integers(0, 300 if field == "rank_sum" else 9, shape) * (
            present if field in sgeval.PER_PREDICATE_FIELDS else 1) for field, shape in shapes.items()}
        cells = np.unique(rng.integers(0, settings.n_predicates * (settings.n_predicates + 1), 4))
        counts[protocol]["confusion"] = np.stack([cells, rng.integers(1, 5, len(cells))])
        if protocol == "oi":  # listed rows: predicate, a score's float64 bits (high, low), two GT picks + 1
            n = int(rng.integers(0, 6))
            bits = rng.random(n).view(np.uint64)
            counts[protocol]["oi_dets"] = np.stack([rng.integers(0, settings.n_predicates, n),
                                                    (bits >> np.uint64(32)).astype(np.int64),
                                                    (bits & np.uint64(0xFFFFFFFF)).astype(np.int64),
                                                    rng.integers(0, 5, n), rng.integers(0, 5, n)])
    audit = list(rng.integers(0, 9, len(sgeval.AUDIT_FIELDS))) if settings.audit else None
    return sgeval.ImageResult(counts, audit, [], list(rng.integers(0, 9, len(sgeval.CHECK_FIELDS))))


@pytest.mark.parametrize("n_k, n_predicates, audit", [(5, 7, True), (3, 3, False), (2, 1, True)])
def test_record_round_trip_gives_every_count_back(n_k, n_predicates, audit):
    """Every field of every protocol, the confusion cells, the audit and the check come back from
    an image's record; a CountStore of the records hands back the counts stacked whole (an image
    without a record: zeros), n_k == C included (fields are told apart by name)."""
    rng = np.random.default_rng(n_k * 10 + n_predicates)
    settings = _settings(n_k, n_predicates, audit=audit)
    shapes = {protocol: sgeval.count_shapes(n_k, 2, n_predicates, 0, protocol) for protocol in settings.protocols}
    stores = {protocol: sgeval.CountStore(13, shapes[protocol]) for protocol in settings.protocols}
    results = []
    for slot in range(12):
        relations = np.zeros((0, 3), np.int64) if slot == 3 else \
            np.stack([np.zeros(4, np.int64), np.ones(4, np.int64), rng.integers(0, n_predicates, 4)], axis=1)
        image = sgeval.GTImage(str(slot), 2, 2, None, np.arange(2), np.zeros(2, np.int64), np.zeros((2, 4)), relations,
                               np.arange(len(relations)))
        results.append(_random_result(rng, settings, relations))
        values = sgeval.pack_record(results[-1], image, settings)
        assert values.dtype == np.min_scalar_type(int(values.max()))  # oi's score bits: up to 32 bits
        columns, blocks, audit_back, check = sgeval.unpack_record(values, settings)
        assert (audit_back is None) == (not audit) and list(check) == results[-1].check
        for protocol, fields in blocks.items():
            stores[protocol].images[slot] = columns, fields
            np.testing.assert_array_equal(fields["confusion"], results[-1].counts[protocol]["confusion"])
            assert ("oi_dets" in fields) == (protocol == "oi")  # the oi unit's own ragged field
            if "oi_dets" in fields:
                np.testing.assert_array_equal(fields["oi_dets"], results[-1].counts[protocol]["oi_dets"])
                assert len(stores[protocol].ragged("oi_dets")) == 13
    for protocol, store in stores.items():
        assert list(store) == list(shapes[protocol]) and len(store) == len(shapes[protocol])
        for field, shape in list(shapes[protocol].items()) * 2:  # twice: the cached field and a fresh one
            expected = np.stack([np.asarray(r.counts[protocol][field], np.int64).reshape(shape) for r in results]
                                + [np.zeros(shape, np.int64)])
            np.testing.assert_array_equal(store[field], expected)
            assert store[field].dtype == np.int64


def test_a_record_of_another_layout_is_refused():
    """unpack_record raises ValueError for a record too short or too long for the settings."""
    settings = _settings(2, 3)
    image = sgeval.GTImage("1", 2, 2, None, np.arange(2), np.zeros(2, np.int64), np.zeros((2, 4)),
                           np.array([[0, 1, 2]]), np.arange(1))
    values = sgeval.pack_record(_random_result(np.random.default_rng(0), settings, image.relations), image, settings)
    for bad in (values[:-1], np.r_[values, 0], np.r_[[5], values[1:]]):
        with pytest.raises(ValueError):
            sgeval.unpack_record(bad, settings)
