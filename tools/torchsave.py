"""Write ``torch.save`` files without torch, for tests and fuzzing only (the converters read them
with sgeval_convert/torchfile.py; real torch files are in tests/data/torch/).

    save(path, value, legacy=False, protocol=2)

``value`` may hold dicts, lists, tuples, strings and numbers, numpy arrays (each written as a
tensor with a storage of its own, C order), ``View`` (a tensor viewing part of a shared
``Storage``) and ``BoxList`` (written as Scene-Graph-Benchmark's BoxList class pickles: NEWOBJ,
then its state by BUILD). The zip format is what torch >= 1.6 writes by default (members stored
under ``<name>/``, storage keys '0', '1', ... in first-use order, a ``byteorder`` record); the
legacy format what ``_use_new_zipfile_serialization=False`` writes (the magic number, protocol
version and sys_info pickles, the object, the sorted key list, then per storage an int64 count and
its bytes). The pickles name the same globals torch names (``torch._utils._rebuild_tensor_v2``,
``torch.<Type>Storage``, ``collections.OrderedDict``).
"""

import collections
import io
import os
import pickle
import struct
import zipfile

import numpy as np

STORAGE_NAMES = {"f4": "FloatStorage", "f8": "DoubleStorage", "f2": "HalfStorage", "i8": "LongStorage",
                 "i4": "IntStorage", "i2": "ShortStorage", "i1": "CharStorage", "u1": "ByteStorage",
                 "b1": "BoolStorage"}
BOXLIST = "maskrcnn_benchmark.structures.bounding_box.BoxList"


class Global:
    """A module-level name written as a pickle global (never imported)."""

    def __init__(self, dotted):
        self.module, _, self.name = dotted.rpartition(".")

    def __call__(self, *args):  # pickle's save_reduce wants a callable
        raise TypeError(f"{self.module}.{self.name} is only written, never called")


class Storage:
    """The elements of one storage (a 1-D numpy array of a STORAGE_NAMES dtype); ``declared``:
    another element count for its persistent id (a broken file)."""

    def __init__(self, array, declared=None):
        self.array = np.ascontiguousarray(array).reshape(-1)
        self.declared = self.array.size if declared is None else declared


class View:
    """A tensor of ``shape`` and ``strides`` (in elements) at ``offset`` of a Storage."""

    def __init__(self, storage, offset, shape, strides):
        self.storage, self.offset, self.shape, self.strides = storage, offset, tuple(shape), tuple(strides)


class BoxList:
    """A BoxList to write: bbox (N, 4) float32 array, size (w, h), mode, extra_fields."""

    def __init__(self, bbox, size, mode="xyxy", extra_fields=None, triplet_extra_fields=(), cls=BOXLIST):
        self.state = {"bbox": np.asarray(bbox, np.float32), "size": tuple(size), "mode": mode,
                      "extra_fields": dict(extra_fields or {}), "triplet_extra_fields": list(triplet_extra_fields)}
        self.cls = Global(cls)


def _as_view(array):
    array = np.asarray(array)
    strides = tuple(int(np.prod(array.shape[i + 1:])) for i in range(array.ndim))
    return View(Storage(array), 0, array.shape, strides)


class _Pickler(pickle._Pickler):
    """pickle's Python pickler with torch's persistent ids for storages, tensors reduced as torch
    reduces them, and Global / BoxList written directly."""

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, handle, protocol, legacy):
        super().__init__(handle, protocol)
        self.legacy, self.keys = legacy, {}  # id(Storage) -> (key, Storage)

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        key = self.keys.setdefault(id(obj), (str(len(self.keys)) if not self.legacy else
                                             str(94000000000000 + 64 * len(self.keys)), obj))[0]
        pid = ("storage", Global("torch." + STORAGE_NAMES[obj.array.dtype.str[1:]]), key, "cpu", obj.declared)
        return pid + (None,) if self.legacy else pid

    def save_global_name(self, obj):
        if self.proto >= 4:
            self.save(obj.module)
            self.save(obj.name)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    def save_view(self, view):
        self.save_reduce(Global("torch._utils._rebuild_tensor_v2"),
                         (view.storage, view.offset, view.shape, view.strides, False, collections.OrderedDict()))

    def save_array(self, array):
        self.save_view(_as_view(array))

    def save_boxlist(self, boxlist):
        self.save(boxlist.cls)
        self.write(pickle.EMPTY_TUPLE + pickle.NEWOBJ)
        self.memoize(boxlist)
        self.save(boxlist.state)
        self.write(pickle.BUILD)

    dispatch[Global] = save_global_name
    dispatch[View] = save_view
    dispatch[np.ndarray] = save_array
    dispatch[BoxList] = save_boxlist


def _object_pickle(value, protocol, legacy):
    """(the object pickle, {key: Storage} in first-use order)."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, protocol, legacy)
    pickler.dump(value)
    return buffer.getvalue(), {key: storage for key, storage in pickler.keys.values()}


def _storage_bytes(storage, byteorder="<"):
    return storage.array.astype(storage.array.dtype.newbyteorder(byteorder)).tobytes()


def save(path, value, legacy=False, protocol=2, byteorder="little"):
    """Write value as torch.save would (module docstring); returns path. byteorder (zip only):
    little, or big as a big-endian host writes it."""
    data, storages = _object_pickle(value, protocol, legacy)
    if legacy:
        with open(path, "wb") as handle:
            for header in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True,
                                                         "type_sizes": {"short": 2, "int": 4, "long": 4}}):
                handle.write(pickle.dumps(header, protocol=protocol))
            handle.write(data)
            keys = sorted(storages)
            handle.write(pickle.dumps(keys, protocol=protocol))
            for key in keys:
                handle.write(struct.pack("<q", storages[key].array.size) + _storage_bytes(storages[key]))
        return path
    prefix = os.path.splitext(os.path.basename(path))[0] or "archive"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", data)
        archive.writestr(f"{prefix}/byteorder", byteorder.encode())
        for key, storage in storages.items():
            archive.writestr(f"{prefix}/data/{key}", _storage_bytes(storage, "<" if byteorder == "little" else ">"))
        archive.writestr(f"{prefix}/version", b"3\n")
    return path
