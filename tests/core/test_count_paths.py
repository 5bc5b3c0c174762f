"""The per-image counts and the merge walk on random data: image_counts and legacy_counts against
the plain numpy path they took before (kept here as the reference: every row sorted, one count
per cut-off), edge cases included (no prediction, no GT relations, k beyond the rows, thousands
of instances); merge_walk's nodes, pixel counts and node boxes against bool masks."""

import numpy as np
import pytest
from conftest import sgeval

# ---- the numpy path image_counts and legacy_counts took before ---------------------------------


def first_occurrences(keys):
    return np.sort(np.unique(keys, return_index=True)[1]) if len(keys) else np.zeros(0, np.int64)


def first_positions(sequence, queries):
    found = {}
    for i, key in enumerate(sequence.tolist()):
        if key >= 0:
            found.setdefault(key, i)
    return np.array([found.get(q, -1) if q >= 0 else -1 for q in queries.tolist()], np.int64)


def occurrence_ranks(keys):
    seen, ranks = {}, []
    for key in keys.tolist():
        ranks.append(seen.get(key, 0))
        seen[key] = ranks[-1] + 1
    return np.array(ranks, np.int64)


def mapped_keys(rows, pred_to_gt, n_gt, C):
    subject, obj = pred_to_gt[rows[:, 0]], pred_to_gt[rows[:, 1]]
    valid = (subject >= 0) & (obj >= 0)
    pairs = np.where(valid, subject * n_gt + obj, -1)
    return pairs, np.where(valid, pairs * C + rows[:, 2], -1)


def confusion(relations, first_gc, first_pair, row_predicates, k, C):
    column = np.full(len(relations), C, np.int64)
    on_pair = (first_pair >= 0) & (first_pair < k)
    column[on_pair] = row_predicates[first_pair[on_pair]]
    hit = (first_gc >= 0) & (first_gc < k)
    column[hit] = relations[hit, 2]
    cells, counts = np.unique(relations[:, 2] * (C + 1) + column, return_counts=True)
    return np.stack([cells, counts]).astype(np.int64)


def count_fields(relations, zeroshot, ks, imr_labels, C, matched, first_gc, first_pair, first_ng, prank,
                 ng_predicates, ng_ks=None, subsets=None):
    predicate, imr_ks = relations[:, 2], [int(k) for k in imr_labels]
    gt_pairs = relations[:, 0] * len(matched) + relations[:, 1]
    first_pair = first_pair[np.unique(gt_pairs, return_index=True)[1]]
    rank_in_predicate = np.full(len(relations), np.iinfo(np.int64).max)
    found = first_ng >= 0
    rank_in_predicate[found] = occurrence_ranks(ng_predicates)[first_ng[found]]
    listed = np.bincount(ng_predicates, minlength=C)
    both_ends = matched[relations[:, 0]] & matched[relations[:, 1]]
    appears = prank >= 0
    gc = [(first_gc >= 0) & (first_gc < k) for k in ks]
    ng = [(first_ng >= 0) & (first_ng < k) for k in (ks if ng_ks is None else ng_ks)]
    per_predicate = lambda masks: np.stack([np.bincount(predicate[m], minlength=C) for m in masks])  # noqa: E731
    return {"gt_rel": np.bincount(predicate, minlength=C), "gc_hits": per_predicate(gc), "ng_hits": per_predicate(ng),
            "gt_pairs": len(first_pair),
            "pair_hits": [np.count_nonzero((first_pair >= 0) & (first_pair < k)) for k in ks],
            "inf_hits": np.bincount(predicate[both_ends], minlength=C), "gt_inst": len(matched),
            "inst_hits": np.count_nonzero(matched),
            "rank_sum": np.bincount(predicate[appears], prank[appears], minlength=C).astype(np.int64),
            "rank_n": np.bincount(predicate[appears], minlength=C), "z_gt": np.count_nonzero(zeroshot),
            "z_gc_hits": [np.count_nonzero(m & zeroshot) for m in gc],
            "z_ng_hits": [np.count_nonzero(m & zeroshot) for m in ng],
            "imr_hits": per_predicate([rank_in_predicate < k for k in imr_ks]),
            "imr_short": [int((listed[predicate] < k).any()) for k in imr_ks], "a_hits": np.zeros(len(ks), np.int64),
            **sgeval.subset_fields(predicate, subsets, gc, ng, C)}


def numpy_image_counts(relations, zeroshot, n_gt, pred_to_gt, triplets, ng, k_labels, imr_labels, C,
                       graph_constraint, confusion_k, subsets):
    n_pred = len(pred_to_gt)
    ks = sgeval.k_values(k_labels, len(relations))
    k_confusion = sgeval.k_values([confusion_k], len(relations))[0] if confusion_k else 0
    gt_pairs = relations[:, 0] * n_gt + relations[:, 1]
    gt_keys = gt_pairs * C + relations[:, 2]
    pred_pairs = triplets[:, 0] * n_pred + triplets[:, 1]
    selected = triplets[first_occurrences(pred_pairs if graph_constraint else pred_pairs * C + triplets[:, 2])
                        [:max(*ks, k_confusion)]]
    sel_pairs, sel_keys = mapped_keys(selected, pred_to_gt, n_gt, C)
    first_gc, first_pair = first_positions(sel_keys, gt_keys), first_positions(sel_pairs, gt_pairs)
    ng_selected = ng[first_occurrences((ng[:, 0] * n_pred + ng[:, 1]) * C + ng[:, 2])]
    first_ng = first_positions(mapped_keys(ng_selected, pred_to_gt, n_gt, C)[1], gt_keys)
    matched = np.zeros(n_gt, bool)
    matched[pred_to_gt[pred_to_gt >= 0]] = True
    all_pairs, all_keys = mapped_keys(ng, pred_to_gt, n_gt, C)
    kept = np.flatnonzero(all_keys >= 0)
    kept = kept[first_occurrences(all_keys[kept])]
    position = first_positions(all_keys[kept], gt_keys)
    prank = np.full(len(relations), -1)
    prank[position >= 0] = occurrence_ranks(all_pairs[kept])[position[position >= 0]]
    counts = count_fields(relations, zeroshot, ks, imr_labels, C, matched, first_gc, first_pair, first_ng, prank,
                          ng_selected[:, 2], subsets=subsets)
    if confusion_k:
        counts["confusion"] = confusion(relations, first_gc, first_pair, selected[:, 2], k_confusion, C)
    return counts


def numpy_legacy_counts(relations, zeroshot, ok, triplets, ng, k_labels, imr_labels, C, confusion_k, subsets):
    ks = sgeval.k_values(k_labels, len(relations))
    k_confusion = sgeval.k_values([confusion_k], len(relations))[0] if confusion_k else 0
    first_gc, first_pair, _ = sgeval.triplet_hits(triplets, ok, relations, max(*ks, k_confusion), C)
    first_ng, _, before = sgeval.triplet_hits(ng, ok, relations, len(ng), C)
    counts = count_fields(relations, zeroshot, ks, imr_labels, C, ok.any(axis=0), first_gc, first_pair, first_ng,
                          np.where(first_ng >= 0, before, -1), ng[:, 2], [min(k, sgeval.LEGACY_NG_LIST) for k in ks],
                          subsets)
    if confusion_k:
        counts["confusion"] = confusion(relations, first_gc, first_pair, triplets[:, 2], k_confusion, C)
    return counts


# ---- random images, edge cases included ----------------------------------------------------------


def random_rows(rng, n_rows, n_pred, C):
    """Rows with repeated rows, repeated pairs and self-pairs (n_pred 0: none)."""
    if n_pred == 0 or n_rows == 0:
        return np.zeros((0, 3), np.int64)
    ends = rng.choice(n_pred, min(n_pred, 9), replace=False)  # some rows on the same pairs
    rows = np.stack([rng.choice(ends, n_rows), rng.choice(ends, n_rows), rng.integers(0, C, n_rows)], 1)
    repeats = rng.integers(0, n_rows, n_rows // 3)
    rows[rng.integers(0, n_rows, len(repeats))] = rows[repeats]
    return rows.astype(np.int64)


def random_image(rng, case):
    """(relations, zeroshot, n_gt, pred_to_gt, triplets, ng, C, subsets) of one random image;
    case 0: no prediction, 1: no GT relations, 2: few rows (k beyond them), 5: thousands of
    instances."""
    C, n_gt = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    n_rel = 0 if case == 1 else int(rng.integers(1, 12))
    relations = np.stack([rng.integers(0, n_gt, n_rel), rng.integers(0, n_gt, n_rel), rng.integers(0, C, n_rel)], 1)
    relations = relations.astype(np.int64).reshape(-1, 3)
    n_pred = 0 if case == 0 else int(rng.integers(1, 9)) if case < 5 else int(rng.integers(2000, 9000))
    pred_to_gt = np.where(rng.random(n_pred) < 0.7, rng.integers(0, n_gt, n_pred), -1).astype(np.int64)
    n_rows = int(rng.integers(1, 4)) if case == 2 else int(rng.integers(0, 60))
    triplets = random_rows(rng, n_rows, n_pred, C)
    ng = triplets if rng.random() < 0.3 else random_rows(rng, int(rng.integers(0, 60)), n_pred, C)
    subsets = rng.random((n_rel, 2)) < 0.5 if rng.random() < 0.5 else None
    return relations, rng.random(n_rel) < 0.3, n_gt, pred_to_gt, triplets, ng, C, subsets


def assert_same_counts(fast, slow, where):
    assert fast.keys() == slow.keys(), where
    for name, value in slow.items():
        np.testing.assert_array_equal(np.asarray(fast[name], np.int64), np.asarray(value, np.int64), f"{where} {name}")


K_LABELS = ("1", "2", "5", "20", "x0.5", "x1", "x3", "100")
IMR_LABELS = ("1", "2", "4")


@pytest.mark.parametrize("seed", range(8))
def test_image_counts_match_the_numpy_path(seed):
    rng = np.random.default_rng(seed)
    for index in range(60):
        relations, zeroshot, n_gt, pred_to_gt, triplets, ng, C, subsets = random_image(rng, index % 6)
        for graph_constraint in (True, False):
            confusion_k = (None, "1", "x1", "5")[index % 4]
            args = (relations, zeroshot, n_gt, pred_to_gt, triplets, ng, K_LABELS, IMR_LABELS, C, graph_constraint,
                    confusion_k, subsets)
            assert_same_counts(sgeval.image_counts(*args), numpy_image_counts(*args), f"seed {seed} image {index}")


@pytest.mark.parametrize("seed", range(6))
def test_legacy_counts_match_the_numpy_path(seed):
    rng = np.random.default_rng(100 + seed)
    for index in range(60):
        relations, zeroshot, n_gt, pred_to_gt, triplets, ng, C, subsets = random_image(rng, index % 6)
        ok = rng.random((len(pred_to_gt), n_gt)) < 0.4
        args = (relations, zeroshot, ok, triplets, ng, K_LABELS, IMR_LABELS, C, (None, "2", "x1")[index % 3], subsets)
        assert_same_counts(sgeval.legacy_counts(*args), numpy_legacy_counts(*args), f"seed {seed} image {index}")


# ---- the merge walk ---------------------------------------------------------------------------------


def bool_walk(masks, order):
    """The merge walk with pixel claiming on bool masks: (node_of, source, the nodes' pixels)."""
    flat = masks.reshape(len(masks), -1)
    inter = (flat[:, None] & flat[None]).sum(axis=2)
    union = (flat[:, None] | flat[None]).sum(axis=2)
    twins = np.where(union > 0, inter / np.maximum(union, 1), 0.0) >= sgeval.MERGE_IOU
    node_of, source, pixels = np.full(len(masks), -1), [], []
    claimed, absorbed = np.zeros(flat.shape[1], bool), np.zeros(len(masks), bool)
    for rank, i in enumerate(order):
        if absorbed[i]:
            continue
        free = flat[i] & ~claimed
        claimed |= flat[i]
        if not free.any():
            continue
        node_of[i] = len(source)
        for j in order[rank + 1:]:
            if not absorbed[j] and j != i and twins[i, j]:
                absorbed[j], node_of[j] = True, len(source)
        source.append(i)
        pixels.append(free)
    return node_of, source, pixels


@pytest.mark.parametrize("seed", range(6))
def test_merge_walk_nodes_pixels_and_boxes_match_bool_masks(seed):
    """Random boxes of pixels at widths across word edges (rows sharing a word, rows ending
    mid-word), copies and near copies, empty masks, tied scores; the node boxes SingleMPO matches
    with hold exactly the claimed pixels (their count) inside their mask's box."""
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(2, 40)), [3, 8, 21, 64, 100, 130][seed]
    masks = np.zeros((int(rng.integers(1, 14)), height, width), bool)
    for mask in masks[1:]:
        y0, x0 = rng.integers(0, height), rng.integers(0, width)
        mask[y0:y0 + rng.integers(1, height + 1), x0:x0 + rng.integers(1, width + 1)] = True
        mask &= rng.random(mask.shape) < 0.9
    masks[rng.integers(0, len(masks), 3)] = masks[rng.integers(0, len(masks), 3)]  # copies
    bits = sgeval.pack_masks(masks)
    boxes = sgeval.mask_boxes(bits, width)
    scores = rng.integers(0, 3, len(masks)) / 2  # tied scores: the walk order of merge_order
    order = np.argsort(-scores, kind="stable").astype(np.int64)
    node_bits = np.full_like(bits, ~np.uint64(0))  # contents must not matter
    node_of, source, area = sgeval.merge_walk(np.full((len(masks),) * 2, -1, np.int8), bits, boxes, width, order,
                                              True, node_bits)
    expected_node_of, expected_source, pixels = bool_walk(masks, order)
    assert node_of.tolist() == expected_node_of.tolist() and source.tolist() == expected_source
    assert area.tolist() == [int(p.sum()) for p in pixels]
    np.testing.assert_array_equal(node_bits[:len(source)], sgeval.pack_masks(
        np.array(pixels, bool).reshape(-1, height, width)))
    twins = np.full((len(masks),) * 2, -1, np.int8)
    assert sgeval.merge_walk(twins, bits, boxes, width, order, True, np.zeros((0, bits.shape[1]), np.uint64))[
        1].tolist() == expected_source
    for node, i in enumerate(source):  # the node's box (its mask's) holds its pixels
        exact = sgeval.mask_boxes(node_bits[node:node + 1], width)[0]
        assert boxes[i, 1] <= exact[1] and exact[2] <= boxes[i, 2]
        assert boxes[i, 3] <= exact[3] and exact[4] <= boxes[i, 4]
