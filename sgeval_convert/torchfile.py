"""Read files written by ``torch.save`` without torch: tensors become numpy arrays, nothing in the
file runs. For Scene-Graph-Benchmark's ``eval_results.pytorch`` (sgb.py) and
``zeroshot_triplet.pytorch`` (zeroshot.py).

    value = torchfile.load("zeroshot_triplet.pytorch")            # tensors as numpy arrays
    value = torchfile.load("eval_results.pytorch", lazy=True)     # tensors as LazyTensor

``load`` returns the saved object with plain containers (a dict comes back a plain dict, a
``torch.Size`` a tuple), numpy arrays in place of tensors (native byte order, writable, sharing
nothing) and ``unpickler.BoxList`` attribute holders in place of maskrcnn_benchmark / PySGG BoxLists.
With ``lazy=True`` every tensor is a ``LazyTensor``: its dtype, shape and where its bytes are in
the file; ``read()`` gives the array (``unpickler.materialize`` reads them all; they pickle, so a
worker process can read them). A 30 GB file then loads with memory for its object pickle only.

Formats (the details, with the torch sources they were read from, are in the project notes)
---------------------------------------------------------------------------------------------
* zip (torch >= 1.6, the default): a ZIP archive, every member stored (not compressed) under one
  prefix: ``<prefix>/data.pkl`` (the object pickle), ``<prefix>/data/<key>`` (one per storage,
  exactly ``numel x itemsize`` bytes) and an optional ``<prefix>/byteorder`` (``little`` or
  ``big``; absent means little, as torch >= 2.1 reads it). A storage's persistent id is
  ``('storage', storage type, key, location, numel)``.
* legacy (``_use_new_zipfile_serialization=False``; the default before torch 1.6): pickles of the
  magic number 0x1950A86A20F9469CFC6C, the protocol version 1001, a sys_info dict, the object, the
  sorted list of storage keys; then per key, in that list's order, an int64 little-endian element
  count and the storage's bytes (little-endian). Persistent ids have a sixth field, the view
  metadata of torch < 0.4 (``None``, or ``(view key, offset, numel)``: a slice of the root).
* Any pickle protocol (torch writes 2 unless asked). Tar files (torch 0.1) and TorchScript
  archives are refused by name.

A tensor is ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`` (also
``_rebuild_tensor``, ``_rebuild_tensor_v3`` for the dtypes torch 2.x writes as untyped storage,
``_rebuild_parameter*`` and ``torch._tensor._rebuild_from_type_v2``, whose Python attributes are
dropped). Offset and strides count elements; tensors may view any part of a shared storage.
Conjugate or negative bits, quantized, sparse and nested tensors are refused. bfloat16 is
widened to float32 (exactly), bool bytes other than 0 are True.

Safety
------
The pickles are read by ``TorchUnpickler``, an ``unpickler.RestrictedUnpickler``: the one allow-list
is ``unpickler.ALLOWED_GLOBALS`` (numpy data, a few builtins, ``collections.OrderedDict``, the Result
and BoxList holders), with the torch names resolved by the file's reader (``_Reader.torch_global``:
the rebuild functions above, storage types, dtypes, ``torch.Size``); any other global, torch's
included, is refused with its name. Object state (BUILD) and class instances (NEWOBJ) only for
the holders. Every size comes from the file and is checked before anything is allocated or read:
pickle reads are bounded by the region they belong to (``_Window``: a size in the pickle cannot
make the reader allocate more than the file holds, a text line is at most ``MAX_LINE``); a zip
member holding a storage must be stored, unencrypted, of exactly ``numel x itemsize`` bytes and
inside the file, its position taken from its local header; a legacy key list must name exactly the
storages the object refers to, and every data-section count must match its id and end inside the
file; a tensor's highest element must lie inside its storage, with sizes and strides non-negative
ints and at most ``MAX_NDIM`` dimensions; an expanded tensor (stride 0) may exceed its storage
span by ``EXPAND_BYTES``; an eager load allocates at most ``max_bytes`` (default twice the file's
size + ``EXPAND_BYTES``: several tensors may view one storage). Every failure is one
``common.ConvertError`` line naming the file and what is wrong.
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import zipfile

import numpy as np

from . import common, unpickler

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
MAX_LINE = 1 << 16  # longest pickle text line (GLOBAL names, protocol 0 numbers)
EXPAND_BYTES = 1 << 24  # an expanded tensor (stride 0) may exceed its storage span by this much
MAX_NDIM = 32

_BFLOAT16 = "bfloat16"  # read as its uint16 bits, widened to float32 (exact)

# torch dtype name (a torch.dtype pickles as GLOBAL 'torch <name>') -> numpy type code, None if unreadable
TORCH_DTYPES = {
    "float64": "f8", "double": "f8", "float32": "f4", "float": "f4", "float16": "f2", "half": "f2",
    "bfloat16": _BFLOAT16, "complex128": "c16", "cdouble": "c16", "complex64": "c8", "cfloat": "c8",
    "int64": "i8", "long": "i8", "int32": "i4", "int": "i4", "int16": "i2", "short": "i2", "int8": "i1",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "b1",
    **{name: None for name in ("complex32", "chalf", "qint8", "qint32", "quint8", "quint4x2", "quint2x4",
                               "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
                               "float8_e8m0fnu", "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4",
                               "bits4x2")},
}

# typed storage classes (torch.<Name>, torch.cuda.<Name> in torch 1.x CUDA files) -> torch dtype name
STORAGE_TYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}
UNTYPED_STORAGES = {("torch.storage", "UntypedStorage"), ("torch", "UntypedStorage"), ("torch", "_UntypedStorage"),
                    ("torch.storage", "_UntypedStorage")}  # bytes; the tensor names its dtype (_rebuild_tensor_v3)
REBUILDERS = ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
              "_rebuild_parameter_with_state")


class _Invalid(Exception):
    """Sizes, positions or structure that do not fit the file (a ConvertError line)."""


class TorchDType:
    """A torch dtype named in a pickle (torch.<name>); ``code`` is numpy's, None if unreadable."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    @property
    def code(self):
        return TORCH_DTYPES[self.name]

    def itemsize(self):
        if self.code is None:
            raise unpickler.Refused(f"a tensor of dtype torch.{self.name}, which has no numpy equivalent")
        return 2 if self.code == _BFLOAT16 else np.dtype(self.code).itemsize

    def __repr__(self):
        return f"torch.{self.name}"


class _StorageType:
    """A storage class named in a pickle and the dtype of its elements (uint8 for untyped storage)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype


class _Storage:
    """One storage: ``nbytes`` bytes at ``position`` of the file (None until a legacy file's data
    section is indexed); a legacy view is ``view_offset`` bytes into the storage ``view_of``."""

    __slots__ = ("key", "storage_type", "numel", "nbytes", "position", "byteorder", "view_of", "view_offset")

    def __init__(self, key, storage_type, numel, nbytes, byteorder="<"):
        self.key, self.storage_type, self.numel, self.nbytes = key, storage_type, numel, nbytes
        self.position, self.byteorder, self.view_of, self.view_offset = None, byteorder, None, 0


class LazyTensor(unpickler.Lazy):
    """A tensor left in its file: ``span`` bytes at ``position`` hold its elements (byte order
    ``byteorder``), laid out by ``strides`` (in elements). ``read()`` gives a fresh numpy array;
    ValueError when the file changed since it was loaded."""

    __slots__ = ("path", "position", "span", "byteorder", "dtype_name", "shape", "strides")

    def __init__(self, path, position, span, byteorder, dtype_name, shape, strides):
        self.path, self.position, self.span, self.byteorder = path, position, span, byteorder
        self.dtype_name, self.shape, self.strides = dtype_name, shape, strides

    @property
    def dtype(self):
        code = TORCH_DTYPES[self.dtype_name]
        return np.dtype("f4" if code == _BFLOAT16 else code)

    @property
    def nbytes(self):
        return math.prod(self.shape) * self.dtype.itemsize

    def read(self):
        try:
            return self.read_checked()
        except (OSError, _Invalid) as error:
            raise ValueError(f"{self.path}: cannot read a tensor: {error}") from None

    def read_checked(self):
        """read(), raising OSError or _Invalid."""
        with open(self.path, "rb") as handle:
            return _read_tensor(handle.fileno(), self)

    def __reduce__(self):
        return LazyTensor, (self.path, self.position, self.span, self.byteorder, self.dtype_name, self.shape,
                            self.strides)

    def __repr__(self):
        return f"LazyTensor(shape={self.shape}, dtype={self.dtype_name})"


def _ints(value, what, ndim=None):
    """A tuple of at most MAX_NDIM ints from 0 to 2**62 (of length ndim when given), else _Invalid."""
    if not (type(value) is tuple and len(value) <= MAX_NDIM and all(type(n) is int and 0 <= n < 1 << 62 for n in value)
            and (ndim is None or len(value) == ndim)):
        raise _Invalid(f"a tensor {what} {value!r:.80} (expected a tuple of at most {MAX_NDIM} non-negative ints"
                       f"{'' if ndim is None else f' of length {ndim}'})")
    return value


def _tensor_layout(storage, dtype, offset, size, stride):
    """Check a tensor against its storage: (its first byte in the storage, the bytes from there to
    its last element, its strides)."""
    if not isinstance(dtype, TorchDType):
        raise unpickler.Refused(f"a tensor whose dtype is a {type(dtype).__name__}")
    size = _ints(size, "size")
    stride = _ints(stride, "stride", len(size))
    if type(offset) is not int or not 0 <= offset < 1 << 62:
        raise _Invalid(f"a tensor storage offset {offset!r:.40}")
    itemsize = dtype.itemsize()
    if math.prod(size) == 0:  # numpy refuses an empty shape whose other dimensions pass its index range
        if math.prod(n for n in size if n) * itemsize >= 1 << 40:
            raise _Invalid(f"an empty tensor of size {size}")
        return 0, 0, stride
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))  # the highest element used
    capacity = storage.nbytes // itemsize
    if last >= capacity:
        raise _Invalid(f"a tensor of size {size}, stride {stride} at offset {offset} reaches element {last} "
                       f"of a storage of {capacity} {dtype.name} elements ({storage.nbytes} bytes)")
    span = (last - offset + 1) * itemsize
    if math.prod(size) * itemsize > span + EXPAND_BYTES:
        raise _Invalid(f"a tensor of size {size} expanded (stride 0) from {span} bytes of storage")
    return offset * itemsize, span, stride


def _read_tensor(fd, lazy):
    """The array of a LazyTensor: its span read with os.pread (checked against the file's size),
    viewed with its strides, copied to native byte order."""
    code = TORCH_DTYPES[lazy.dtype_name]
    if math.prod(lazy.shape) == 0:
        return np.zeros(lazy.shape, lazy.dtype)
    file_size = os.fstat(fd).st_size
    if lazy.position + lazy.span > file_size:
        raise _Invalid(f"a tensor's {lazy.span} bytes at byte {lazy.position} lie past the end of the file "
                       f"({file_size} bytes)")
    data = os.pread(fd, lazy.span, lazy.position)
    if len(data) != lazy.span:
        raise _Invalid(f"the file ends inside a tensor's data at byte {lazy.position}")
    raw = np.frombuffer(data, np.dtype("u2" if code == _BFLOAT16 else "u1" if code == "b1" else code)
                        .newbyteorder(lazy.byteorder))
    if sum((n - 1) * s for n, s in zip(lazy.shape, lazy.strides)) >= len(raw):  # checked at loading; again
        raise _Invalid("a tensor's strides reach past its data")
    view = np.lib.stride_tricks.as_strided(raw, shape=lazy.shape, strides=tuple(s * raw.itemsize for s in lazy.strides),
                                           writeable=False)
    if code == _BFLOAT16:
        return (view.astype(np.uint32) << 16).view(np.float32)
    if code == "b1":
        return view != 0
    return view.astype(view.dtype.newbyteorder("="), copy=True)


class _TensorClass:
    """torch.Tensor / torch.nn.Parameter as _rebuild_from_type_v2 names them (never called)."""

    def __new__(cls, *args, **kwargs):
        raise unpickler.Refused("torch.Tensor called directly")


def _torch_size(dims=()):
    """torch.Size(dims): a tuple."""
    if not isinstance(dims, (tuple, list)):
        raise _Invalid(f"a torch.Size of {type(dims).__name__}")
    return _ints(tuple(dims), "torch.Size")


def _check_metadata(metadata):
    """torch's tensor metadata ({'conj': True} or {'neg': True}: a lazily conjugated or negated view)."""
    if metadata is not None and not (type(metadata) is dict and not any(metadata.values())):
        raise unpickler.Refused(f"a tensor with metadata {metadata!r:.80} (a conjugate or negative bit)")


def _text(value):
    """A persistent id's string (Python 2 files may hold bytes)."""
    return value.decode("ascii", "replace") if type(value) is bytes else value


class _Reader:
    """One load: the storages met so far, the tensors of a legacy file waiting for their storage's
    position, and the torch globals bound to this file."""

    def __init__(self, path, legacy, byteorder="<", locate=None):
        self.path, self.legacy, self.byteorder, self.locate = path, legacy, byteorder, locate
        self.storages = {}  # key -> _Storage
        self.pending = []  # (root storage, LazyTensor) of a legacy file: positions relative to the storage

    def torch_global(self, module, name):
        """What a torch global of the pickle stands for, or None when it is not allowed."""
        if module == "torch._utils" and name in REBUILDERS or \
                module in ("torch._tensor", "torch.tensor") and name == "_rebuild_from_type_v2":
            return getattr(self, name)
        if module in ("torch", "torch.cuda") and name in STORAGE_TYPES:
            return _StorageType(name, TorchDType(STORAGE_TYPES[name]))
        if (module, name) in UNTYPED_STORAGES:
            return _StorageType(name, TorchDType("uint8"))
        if module == "torch" and name in TORCH_DTYPES:
            return TorchDType(name)
        if (module, name) == ("torch", "Size"):
            return _torch_size
        if (module, name) in (("torch", "Tensor"), ("torch.nn.parameter", "Parameter")):
            return _TensorClass
        return None

    def persistent_load(self, pid):
        """('storage', storage type, key, location, numel[, view]) -> the _Storage it names."""
        if not (type(pid) is tuple and pid and _text(pid[0]) == "storage"):
            kind = _text(pid[0]) if type(pid) is tuple and pid else type(pid).__name__
            raise unpickler.Refused("a pickled nn.Module" if kind == "module" else f"a persistent id {kind!r:.40}")
        if len(pid) != (6 if self.legacy else 5):
            raise _Invalid(f"a storage id with {len(pid)} fields in a {'legacy' if self.legacy else 'zip'} file")
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, _StorageType):
            raise _Invalid(f"a storage of type {type(storage_type).__name__}")
        if type(key) is not str or not 0 < len(key) <= 64 or type(_text(location)) is not str:
            raise _Invalid(f"a storage key {key!r:.40} or location {location!r:.40}")
        if type(numel) is not int or not 0 <= numel < 1 << 62:
            raise _Invalid(f"a storage of {numel!r:.40} elements")
        storage = self.storages.get(key)
        if storage is None:
            storage = self.storages[key] = _Storage(key, storage_type, numel, numel * storage_type.dtype.itemsize(),
                                                    self.byteorder)
            if not self.legacy:
                storage.position = self._zip_position(storage)
        elif storage.storage_type.name != storage_type.name or storage.numel != numel:
            raise _Invalid(f"storage {key!r} named twice with different types or sizes")
        return storage if not self.legacy or pid[5] is None else self._view(storage, pid[5])

    def _zip_position(self, storage):
        position, size = self.locate(storage.key)
        if size != storage.nbytes:
            raise _Invalid(f"storage {storage.key!r}: its member holds {size} bytes, its id says {storage.nbytes}")
        return position

    def _view(self, storage, view):
        """A legacy storage view (torch < 0.4): (view key, offset, numel) of the root storage."""
        if not (type(view) is tuple and len(view) == 3 and type(view[0]) is str
                and all(type(n) is int and 0 <= n < 1 << 62 for n in view[1:])):
            raise _Invalid(f"storage view metadata {view!r:.80}")
        view_key, offset, numel = view
        if offset + numel > storage.numel:
            raise _Invalid(f"a storage view of {numel} elements at {offset} of a {storage.numel}-element storage")
        known = self.storages.get(view_key)
        if known is None:
            itemsize = storage.storage_type.dtype.itemsize()
            known = self.storages[view_key] = _Storage(view_key, storage.storage_type, numel, numel * itemsize)
            known.view_of, known.view_offset = storage, offset * itemsize
        elif known.view_of is not storage:
            raise _Invalid(f"storage view {view_key!r} named twice")
        return known

    # the rebuild functions (named as the torch._utils globals they stand for) ---------------------

    def _rebuild_tensor(self, storage, storage_offset, size, stride):
        if not isinstance(storage, _Storage):
            raise unpickler.Refused(f"a tensor whose storage is a {type(storage).__name__}")
        return self._tensor(storage, storage.storage_type.dtype, storage_offset, size, stride)

    def _rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                           metadata=None):
        _check_metadata(metadata)
        return self._rebuild_tensor(storage, storage_offset, size, stride)

    def _rebuild_tensor_v3(self, storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                           metadata=None):
        _check_metadata(metadata)
        if not isinstance(storage, _Storage) or storage.storage_type.dtype.name != "uint8":
            raise unpickler.Refused("a _rebuild_tensor_v3 tensor whose storage is not an untyped storage")
        return self._tensor(storage, dtype, storage_offset, size, stride)

    def _rebuild_parameter(self, data, requires_grad=False, backward_hooks=None):
        return _tensor_value(data)

    def _rebuild_parameter_with_state(self, data, requires_grad, backward_hooks, state):
        return _tensor_value(data)

    def _rebuild_from_type_v2(self, func, new_type, args, state):
        if new_type is not _TensorClass or getattr(func, "__self__", None) is not self or type(args) is not tuple:
            raise unpickler.Refused("_rebuild_from_type_v2 of a tensor subclass")
        return func(*args)  # state (Python attributes set on the tensor) is dropped

    def _tensor(self, storage, dtype, offset, size, stride):
        first, span, strides = _tensor_layout(storage, dtype, offset, size, stride)
        root = storage
        while root.view_of is not None:
            first += root.view_offset
            root = root.view_of
        lazy = LazyTensor(self.path, first, span, root.byteorder, dtype.name, size, strides)
        if root.position is None:
            self.pending.append((root, lazy))  # placed by index_legacy_data
        else:
            lazy.position += root.position
        return lazy

    def index_legacy_data(self, fd, keys, start, end):
        """Index a legacy data section (from byte start: per key an int64 numel and the bytes),
        then place the tensors waiting for it."""
        if set(keys) != {key for key, storage in self.storages.items() if storage.view_of is None}:
            raise _Invalid("a storage key list that differs from the storages the object refers to")
        position = start
        for key in keys:
            storage = self.storages[key]
            header = os.pread(fd, 8, position)
            if len(header) != 8:
                raise _Invalid(f"the file ends before storage {key!r} (byte {position})")
            (numel,) = struct.unpack("<q", header)
            if numel < 0 or numel * storage.storage_type.dtype.itemsize() != storage.nbytes:
                raise _Invalid(f"storage {key!r}: {numel} elements in the data section, {storage.numel} in its id")
            storage.position = position + 8
            position += 8 + storage.nbytes
            if position > end:
                raise _Invalid(f"storage {key!r}: its {storage.nbytes} bytes end at byte {position}, past the end of "
                               f"the file ({end} bytes)")
        for root, lazy in self.pending:
            lazy.position += root.position
        self.pending = []


def _tensor_value(data):
    if not isinstance(data, LazyTensor):
        raise unpickler.Refused(f"a Parameter holding a {type(data).__name__}")
    return data


class _Window:
    """A file read from ``start`` to ``end`` only: read and readline never pass ``end`` (a size in
    the pickle cannot make the reader allocate more than the region holds), and readline stops
    at MAX_LINE bytes."""

    def __init__(self, handle, start, end):
        self.handle, self.end = handle, end
        handle.seek(start)

    def tell(self):
        return self.handle.tell()

    def fileno(self):
        return self.handle.fileno()

    def read(self, n=-1):
        left = max(self.end - self.handle.tell(), 0)
        return self.handle.read(left if n is None or n < 0 else min(n, left))

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, limit=-1):
        line = self.handle.readline(min(max(self.end - self.handle.tell(), 0), MAX_LINE))
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            raise _Invalid(f"a pickle text line longer than {MAX_LINE} bytes")
        return line


class TorchUnpickler(unpickler.RestrictedUnpickler):
    """unpickler.RestrictedUnpickler over a _Window, with the file's torch names (``reader``) and its
    storages as persistent ids; without a reader (legacy header pickles) no global is allowed."""

    def __init__(self, window, reader=None):
        super().__init__(window)
        self.encoding, self.reader = "utf-8", reader  # torch.load reads Python 2 str as UTF-8

    def find_class(self, module, name):
        if self.reader is None:
            raise unpickler.Refused(f"'{module}.{name}' in a header pickle")
        found = self.reader.torch_global(module, name)
        if found is not None:
            return found
        if module == "torch" or module.startswith("torch."):
            raise unpickler.Refused(f"'{module}.{name}'")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if self.reader is None:
            raise unpickler.Refused("a persistent id in a header pickle")
        return self.reader.persistent_load(pid)


def _plain_pickle(window, what, check):
    """A pickle without globals or persistent ids (the legacy headers and key list), checked."""
    value = TorchUnpickler(window).load()
    if not check(value):
        raise _Invalid(f"{what} of another form: {value!r:.80}")
    return value


def _is_int(value):
    return type(value) is int


def _load_legacy(path, handle, size):
    window = _Window(handle, 0, size)
    if _plain_pickle(window, "the magic number", _is_int) != MAGIC_NUMBER:
        raise _Invalid("its first pickle is not torch's magic number: not a torch.save file")
    version = _plain_pickle(window, "the protocol version", _is_int)
    if version != PROTOCOL_VERSION:
        raise _Invalid(f"legacy torch.save protocol version {version}; only {PROTOCOL_VERSION} is read")
    _plain_pickle(window, "the sys_info", lambda value: type(value) is dict)
    reader = _Reader(path, legacy=True)
    value = TorchUnpickler(window, reader).load()
    keys = _plain_pickle(window, "the storage key list", lambda value: type(value) is list and all(
        type(key) is str for key in value) and len(set(value)) == len(value))
    reader.index_legacy_data(handle.fileno(), keys, window.tell(), size)
    return value


def _member_position(handle, info, size, what):
    """Where a zip member's bytes start (its local header), checked to be stored and inside the file."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size or info.flag_bits & 1:
        raise _Invalid(f"{what} is in a compressed or encrypted member (torch stores them as they are)")
    header = os.pread(handle.fileno(), 30, info.header_offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise _Invalid(f"{what}: no local zip header at byte {info.header_offset}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    position = info.header_offset + 30 + name_length + extra_length
    if position + info.file_size > size:
        raise _Invalid(f"{what}: its {info.file_size} bytes at byte {position} lie past the end of the file "
                       f"({size} bytes)")
    return position


def _zip_prefix(path, members):
    tops = [name for name in members if name.count("/") == 1 and name.endswith("/data.pkl")]
    if len(tops) == 1:
        return tops[0][:-len("data.pkl")]
    if any(name.endswith("/constants.pkl") for name in members):
        raise _Invalid("a TorchScript archive (torch.jit.save), not a torch.save file")
    raise _Invalid("a zip archive without exactly one <name>/data.pkl: not a torch.save file")


def _byteorder(archive, members, prefix):
    info = members.get(prefix + "byteorder")
    if info is None:
        return "<"
    text = archive.read(info) if info.file_size <= 16 else b""
    if text not in (b"little", b"big"):
        raise _Invalid(f"a byteorder record {text!r:.20} (expected little or big)")
    return "<" if text == b"little" else ">"


def _load_zip(path, handle, size):
    archive = zipfile.ZipFile(handle)
    members = {info.filename: info for info in archive.infolist()}
    prefix = _zip_prefix(path, members)

    def locate(key):
        info = members.get(f"{prefix}data/{key}")
        if info is None:
            raise _Invalid(f"storage {key!r} has no member {prefix}data/{key}")
        return _member_position(handle, info, size, f"storage {key!r}"), info.file_size

    reader = _Reader(path, legacy=False, byteorder=_byteorder(archive, members, prefix), locate=locate)
    pickled = members[prefix + "data.pkl"]
    start = _member_position(handle, pickled, size, "data.pkl")
    window = _Window(handle, start, start + pickled.file_size)
    value = TorchUnpickler(window, reader).load()
    if window.tell() != window.end:
        raise _Invalid(f"data.pkl has {window.end - window.tell()} bytes after its pickle")
    return value


def _finished(value, lazy, budget):
    """The loaded value with numpy data made real and, unless lazy, every LazyTensor read (at most
    budget bytes in all)."""
    spent = [0]

    def real(item):
        if isinstance(item, LazyTensor) and not lazy:
            spent[0] += item.nbytes
            if spent[0] > budget:
                raise _Invalid(f"tensors of more than {budget} bytes in all (max_bytes; several tensors may view "
                               f"one storage)")
            return item.read_checked()
        return unpickler.real_item(item)

    return unpickler.replaced(value, real)


def load(path, lazy=False, max_bytes=None):
    """The object torch.save wrote to ``path`` (zip or legacy format): tensors as numpy arrays, or
    as LazyTensor when lazy. max_bytes: most bytes of arrays an eager load makes (default twice the
    file's size + EXPAND_BYTES). Raises common.ConvertError (one line naming the file)."""
    path = os.fspath(path)
    try:
        with common.open_regular(path, "the torch.save file") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(262)
            if head.startswith(b"PK\x03\x04"):
                value = _load_zip(path, handle, size)
            elif head[257:262] == b"ustar":
                raise _Invalid("a tar archive (torch.save of torch 0.1): not supported")
            elif head[:1] in (b"\x80", b"L"):  # PROTO (protocol >= 2), or protocol 0/1's text LONG
                value = _load_legacy(path, handle, size)
            else:
                raise _Invalid("neither a zip archive nor a pickle: not a torch.save file")
        return _finished(value, lazy, 2 * size + EXPAND_BYTES if max_bytes is None else max_bytes)
    except unpickler.Refused as refused:
        problem = (f"refusing to load it: it holds {refused}; only numeric tensors, numpy data, plain containers "
                   f"and BoxLists are read, never code")
    except _Invalid as invalid:
        problem = f"not a valid torch.save file: {invalid}"
    except OSError as error:
        problem = f"cannot read: {error}"
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
        problem = f"a broken zip archive: {error}"
    except RecursionError:
        problem = "its object is nested too deeply (or holds itself)"
    except Exception as error:  # noqa: BLE001 -- truncated or corrupt pickles raise many exception types
        problem = f"cannot read the torch.save file: {type(error).__name__}: {error}"
    raise common.ConvertError([f"{path}: {problem}"])


def read_lazy(value, where):
    """unpickler.materialize(value) with a LazyTensor's read error as a ConvertError naming where."""
    try:
        return unpickler.materialize(value)
    except ValueError as error:
        raise common.ConvertError([f"{where}: {error}"]) from None
