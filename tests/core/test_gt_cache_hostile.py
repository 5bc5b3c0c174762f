"""The GT cache against whoever can write its folder (issue 36): an entry is signed with the
folder's secret key file (this user's, readable by nobody else), bound to its own key (the GT
entry and PNG bytes). A rewritten entry -- segments swapped and its hash recomputed, signed with
a guessed or another folder's secret, another image's entry under this name -- is ignored and
prepared again, the results those of no cache; a key file that others can read, of another size
or a special file is replaced, and the entries signed with it are not used."""

import hashlib
import hmac
import json
import os

import imagecodecs
import numpy as np
import pytest
from conftest import cache_entry, perfect_case, rewrite_cache_entry

import sgeval


def _metrics(values, cache):
    return json.dumps(sgeval.evaluate(sgeval.make_config({**values, "gt_cache": cache}))["metrics"])


@pytest.fixture
def warm(tmp_path):
    """(values, the cache folder after one run, {image id: entry key}, the expected metrics)."""
    values = perfect_case(tmp_path)
    folder = tmp_path / "cache"
    expected = _metrics(values, False)
    assert _metrics(values, str(folder)) == expected
    gt = sgeval.read_gt(values["gt"], values["gt_seg"])
    entries = {image.image_id: sgeval.GTCache.key(image, open(image.seg_path, "rb").read()) for image in gt.images}
    assert set(entries.values()) <= set(sgeval.gt_cache_index(str(folder)))
    return values, folder, entries, expected


def _swapped(entry):
    """An entry's payload with its first two segments (bits and boxes) swapped."""
    payload = entry[32:]
    length = int.from_bytes(payload[:8], "little")
    boxes = np.frombuffer(payload[8 + length:], "<i8").reshape(-1, 5)
    bits = np.frombuffer(imagecodecs.lz4_decode(payload[8:8 + length]), np.uint64).reshape(len(boxes), -1)
    order = [1, 0, *range(2, len(boxes))]
    lz4 = imagecodecs.lz4_encode(np.ascontiguousarray(bits[order]))
    return len(lz4).to_bytes(8, "little") + lz4 + np.ascontiguousarray(boxes[order]).tobytes()


SIGNERS = {
    "its SHA-256 recomputed": lambda key, payload: hashlib.sha256(payload).digest(),
    "a guessed secret": lambda key, payload: hmac.new(bytes(32), key.encode() + payload, hashlib.sha256).digest(),
    "no key bound": lambda key, payload: hmac.new(bytes(32), payload, hashlib.sha256).digest(),
}


@pytest.mark.parametrize("signer", SIGNERS)
def test_an_entry_with_swapped_segments_is_not_used(warm, signer):
    values, folder, entries, expected = warm
    key = entries["101"]
    original = cache_entry(folder, key)
    payload = _swapped(original)
    rewrite_cache_entry(folder, key, SIGNERS[signer](key, payload) + payload)
    assert _metrics(values, str(folder)) == expected
    assert cache_entry(folder, key) == original  # prepared again, signed again


def test_another_images_entry_under_this_name_is_not_used(warm):
    """Both are signed with the folder's secret, each for its own key."""
    values, folder, entries, expected = warm
    rewrite_cache_entry(folder, entries["101"], cache_entry(folder, entries["102"]))
    assert _metrics(values, str(folder)) == expected


def test_an_entry_of_another_folder_is_not_used(warm, tmp_path):
    """The same image prepared in another folder: signed with that folder's secret."""
    values, folder, entries, expected = warm
    other, key = tmp_path / "other", entries["101"]
    _metrics(values, str(other))
    assert cache_entry(other, key) != cache_entry(folder, key)
    payload = _swapped(cache_entry(other, key))
    secret = (other / sgeval.GT_CACHE_KEY_FILE).read_bytes()
    rewrite_cache_entry(folder, key, hmac.new(secret, key.encode() + payload, hashlib.sha256).digest() + payload)
    assert _metrics(values, str(folder)) == expected


@pytest.mark.parametrize("change", ["readable by others", "another size", "empty", "a directory", "a fifo"])
def test_a_key_file_that_is_not_private_is_replaced(warm, change):
    """Someone writes a key file of their own (and entries signed with it): it is replaced and
    their entries are prepared again."""
    values, folder, entries, expected = warm
    key_file = folder / sgeval.GT_CACHE_KEY_FILE
    key_file.unlink()
    forged = os.urandom(32)
    if change == "a directory":
        key_file.mkdir()
    elif change == "a fifo":
        os.mkfifo(key_file)
    else:
        key_file.write_bytes({"readable by others": forged, "another size": forged + b"!", "empty": b""}[change])
        key_file.chmod(0o644 if change == "readable by others" else 0o600)
    key = entries["101"]
    payload = _swapped(cache_entry(folder, key))
    rewrite_cache_entry(folder, key, hmac.new(forged, key.encode() + payload, hashlib.sha256).digest() + payload)
    if change == "a directory":  # cannot be replaced by a file: the folder is not used
        assert _metrics(values, str(folder)) == expected
        return
    assert _metrics(values, str(folder)) == expected
    assert key_file.is_file() and len(key_file.read_bytes()) == 32 and key_file.stat().st_mode & 0o077 == 0
    assert key_file.read_bytes() != forged


def test_a_warm_cache_is_read_not_written(warm):
    """Entries signed with the folder's secret are used by another run (another GTCache)."""
    values, folder, entries, expected = warm
    times = {path: path.stat().st_mtime_ns for path in folder.iterdir()}
    assert _metrics(values, str(folder)) == expected
    assert {path: path.stat().st_mtime_ns for path in folder.iterdir()} == times


def test_what_it_assumes_whoever_reads_the_secret_can_forge(warm):
    """The limit of the protection, as documented: an entry signed with the folder's own secret
    (readable by this user only) is trusted -- here the swap changes the results."""
    values, folder, entries, expected = warm
    key, secret = entries["101"], (folder / sgeval.GT_CACHE_KEY_FILE).read_bytes()
    payload = _swapped(cache_entry(folder, key))
    rewrite_cache_entry(folder, key, hmac.new(secret, key.encode() + payload, hashlib.sha256).digest() + payload)
    assert _metrics(values, str(folder)) != expected
