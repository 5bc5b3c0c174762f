"""The restricted unpickler of the converters: reads the data in a model's pickle (or, with
torchfile.py, a torch.save file) and never runs code from it.

``RestrictedUnpickler`` gives numpy arrays, dtypes and scalars (``numpy.core`` and
``numpy._core`` spellings), latin-1 ``_codecs.encode``, a few builtins (bytes, sets),
``collections.OrderedDict``, the ``Result`` classes of ``RESULT_CLASSES`` (read into the plain
attribute holder ``RawResult``), the BoxList classes of ``BOXLIST_CLASSES`` (``BoxList``, for
torch.save files) and inert stand-ins for every torch global (an empty tensor becomes an empty
array; a tensor that holds data cannot be read without torch and is an error where a converter
needs it; in a torch.save file torchfile.py resolves the torch names to real readers). Any other
global is refused (``Refused``, naming it): no code from a pickle runs. numpy data is rebuilt by
``np.frombuffer`` from bytes that match its shape, plain numeric dtypes only (never by numpy's
reconstructors, which trust their arguments); ``bytes(n)`` is refused.

A pickle is streamed (``RestrictedUnpickler.items``): each result is handed out as soon as it is
complete and the memo entries holding its data are released, so memory holds a few images
whatever the pickle's size; large strings and bytes (over ``LAZY_BYTES``) are left in the file as
``_Payload`` positions and read by ``materialize``, in the process that converts the image.
common.py turns what this module raises into ``ConvertError`` lines (``iter_pickle``,
``load_pickle``).
"""

import builtins
import collections
import math
import os
import pickle
import struct
import sys
import typing

import numpy as np

RESULT_CLASSES = (
    "openpsg.models.relation_heads.approaches.relation_util.Result",  # OpenPSG models, PSGTR, PSGFormer, HiLo
    "pairnet.models.relation_heads.approaches.relation_util.Result",  # Pair-Net
)
BOXLIST_CLASSES = (  # in torch.save files of Scene-Graph-Benchmark (sgb.py)
    "maskrcnn_benchmark.structures.bounding_box.BoxList",  # Scene-Graph-Benchmark.pytorch and its forks
    "pysgg.structures.bounding_box.BoxList",  # PySGG (BGNN and derived code): the same class
)

class RawResult:
    """One image's raw result: the fields of a pickled ``Result`` or the arrays of an .npz, kept in
    a dict of their own (a field named like a method does not shadow it)."""

    built = False  # unpickled: its state has been set (nothing later in the pickle changes it)

    def __init__(self, fields=None, **more):
        self.fields = {**(fields or {}), **more}

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("a Result's state must map field names to values")
        self.__dict__.setdefault("fields", {}).update(state)
        self.built = True

    def get(self, name):
        return self.fields.get(name)

    def __getattr__(self, name):  # the fields as attributes too (methods and `fields` come first)
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __reduce__(self):  # to a worker process
        return type(self), (self.fields,)


class BoxList(RawResult):
    """A maskrcnn_benchmark ``BoxList`` (BOXLIST_CLASSES): its state (``bbox``, ``size``, ``mode``,
    ``extra_fields``, ``triplet_extra_fields``) as fields; ``extra_field`` reads one of its
    ``extra_fields``."""

    def extra_field(self, name):
        extra = self.fields.get("extra_fields")
        return extra.get(name) if isinstance(extra, dict) else None


class Lazy:
    """Base of data left in a file (a tensor of a torch.save file): ``read()`` gives its array;
    materialize() reads it, in the process that converts the image."""

    def read(self):
        raise NotImplementedError


class TorchObject:
    """Inert stand-in for any torch global in a pickle: accepts any arguments, keeps nothing."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class TorchTensor(TorchObject):
    """A torch tensor that holds data (unreadable without torch); only its shape is kept."""

    def __init__(self, shape):
        self.shape = shape


def _torch_tensor(*args):
    """Stand-in for torch._utils._rebuild_tensor*(storage, offset, size, ...): an empty float32
    array when ``size`` has no elements, else a TorchTensor."""
    size = args[2] if len(args) > 2 else None
    if isinstance(size, tuple) and all(isinstance(n, int) and n >= 0 for n in size):
        return np.zeros(size, np.float32) if math.prod(size) == 0 else TorchTensor(size)
    return TorchObject()


class Refused(Exception):
    """A global the restricted unpickler does not provide, or numpy data it does not build."""


# numpy's own reconstructors trust their arguments (a crafted dtype state or sub-array scalar
# crashes numpy; ndarray(shape) allocates): pickled numpy data goes through these stand-ins, which
# build plain arrays of simple dtypes whose bytes match their shape, through np.frombuffer.
_SIMPLE_DTYPES = {"b1", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8"}


class _DType:
    """A dtype being unpickled: numpy.dtype(name, align, copy), then its state (byte order)."""

    def __init__(self, name, align=False, copy=False):
        self.name, self.state = name, None

    def __setstate__(self, state):
        self.state = state

    def real(self):
        state = self.state
        if self.name not in _SIMPLE_DTYPES or state is not None and not (  # as numpy writes a simple dtype
                isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)
                and state[1] in ("<", ">", "|", "=") and state[2:5] == (None, None, None) and state[5:8] == (-1, -1, 0)
                and state[8:] in ((), (None,))):
            raise Refused(f"a numpy dtype other than {', '.join(sorted(_SIMPLE_DTYPES))} (fields, sub-arrays, objects)")
        order = "=" if state is None or state[1] == "|" else state[1]
        return np.dtype(self.name).newbyteorder(order)


def _numpy_array(raw, dtype, shape, order="C"):
    """An array of the given bytes, dtype (_DType) and shape, checked before numpy sees them; for a
    _Payload not read yet, a _LazyArray (checked again when it is read)."""
    if not isinstance(dtype, _DType):
        raise Refused("numpy data without a dtype")
    dtype = dtype.real()
    if isinstance(raw, pickle.PickleBuffer):
        raw = raw.raw()
    if not isinstance(raw, (bytes, bytearray, memoryview, _Payload)):
        raise Refused("a numpy array of Python objects")
    if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
        raise _mismatch(shape, raw)
    if not isinstance(raw, _Payload):
        return _shaped(raw, dtype, shape, order)
    if math.prod(shape) * dtype.itemsize not in raw.decoded_sizes():
        raise _mismatch(shape, raw)
    return _LazyArray(raw, dtype, shape, order)


def _shaped(raw, dtype, shape, order):
    """np.frombuffer of bytes that match the shape (read-only when raw is bytes); else Refused."""
    if math.prod(shape) * dtype.itemsize != len(raw):
        raise _mismatch(shape, raw)
    return np.frombuffer(raw, dtype).reshape(shape, order="F" if order == "F" else "C")


def _mismatch(shape, raw):
    return Refused(f"a numpy array of shape {shape!r} whose data is {len(raw)} bytes")


class _Payload:
    """The bytes of a large string or bytes object in a pickle file, not read yet: ``size`` bytes
    at ``offset`` of ``path``. ``utf8``: a string's UTF-8 bytes, which stand for bytes encoded as
    latin-1 (how protocol 2 pickles bytes); read() gives the bytes they stand for."""

    __slots__ = ("path", "offset", "size", "utf8")

    def __init__(self, path, offset, size, utf8):
        self.path, self.offset, self.size, self.utf8 = path, offset, size, utf8

    def __len__(self):
        return self.size

    def decoded_sizes(self):
        """The lengths read() can give: UTF-8 takes 1 or 2 bytes per latin-1 character."""
        return range((self.size + 1) // 2, self.size + 1) if self.utf8 else range(self.size, self.size + 1)

    def read(self):
        with open(self.path, "rb") as handle:
            data = os.pread(handle.fileno(), self.size, self.offset)
        if len(data) < self.size:
            raise ValueError(f"the pickle ends inside a {self.size}-byte value at byte {self.offset}")
        return data if not self.utf8 or data.isascii() else str(data, "utf-8", "surrogatepass").encode("latin-1")


class _LazyArray(typing.NamedTuple):
    """A numpy array whose data is a _Payload: read by materialize() (in a worker process)."""

    payload: _Payload
    dtype: np.dtype
    shape: tuple
    order: str

    def read(self):
        return _shaped(self.payload.read(), self.dtype, self.shape, self.order)


def replaced(value, replace):
    """value with replace(item) for every item that is not a list, tuple, set, dict or RawResult,
    inside those (a dict comes back a plain dict, a RawResult a new one of its class)."""
    if isinstance(value, RawResult):
        return type(value)(replaced(value.fields, replace))
    if type(value) in (list, tuple, set, frozenset):
        return type(value)(replaced(item, replace) for item in value)
    if isinstance(value, dict):
        return {key: replaced(item, replace) for key, item in value.items()}
    return replace(value)


def materialize(value):
    """value with every _LazyArray and Lazy read."""
    return replaced(value, lambda item: item.read() if isinstance(item, (_LazyArray, Lazy)) else item)


class _Array:
    """An ndarray being unpickled (_reconstruct, then its state); load_pickle replaces it by .array."""

    array = None

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise Refused("a numpy array state of another form")
        version, shape, dtype, fortran, raw = state
        if version != 1:
            raise Refused(f"a numpy array state of version {version!r}")
        self.array = _numpy_array(raw, dtype, shape, "F" if fortran else "C")


class _NdarrayClass:
    """numpy.ndarray as pickles name it: only an argument of _reconstruct, never called."""

    def __new__(cls, *args, **kwargs):
        raise Refused("numpy.ndarray called directly (an allocation)")


def _reconstruct(cls, shape=None, typecode=None):
    if cls is not _NdarrayClass or shape != (0,) or typecode != b"b":  # as numpy pickles an ndarray
        raise Refused("numpy _reconstruct of another class or form than an ndarray's")
    return _Array()


def _scalar(dtype, data=None):
    return _numpy_array(data, dtype, ())[()]


def _frombuffer(buffer, dtype, shape, order="C"):
    return _numpy_array(buffer, dtype, shape, order)


def _no_count(kind):
    """bytes / bytearray without the bytes(n) form (n zero bytes: an allocation by a few bytes of pickle)."""
    def build(*args):
        if args and isinstance(args[0], int):
            raise Refused(f"{kind.__name__}(n), an allocation")
        return kind(*args)
    return build


def real_arrays(value):
    """value with every unpickled _Array and _DType made real."""
    return replaced(value, real_item)


def real_item(item):
    if isinstance(item, _Array):
        if item.array is None:
            raise Refused("a numpy array without data")
        return item.array
    return item.real() if isinstance(item, _DType) else item


def _latin1(text, encoding="latin1"):
    """``_codecs.encode`` as protocol-2 pickles use it for bytes objects: latin-1 only."""
    if not isinstance(text, str) and not (isinstance(text, _Payload) and text.utf8) \
            or str(encoding).lower().replace("-", "").replace("_", "") not in ("latin1", "iso88591"):
        raise Refused(f"_codecs.encode with encoding {encoding!r}")
    return text if isinstance(text, _Payload) else text.encode("latin-1")


ALLOWED_GLOBALS = {
    **{(f"numpy.{core}.multiarray", name): function for core in ("core", "_core")
       for name, function in (("_reconstruct", _reconstruct), ("scalar", _scalar))},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _frombuffer for core in ("core", "_core")},
    ("numpy", "ndarray"): _NdarrayClass,
    ("numpy", "dtype"): _DType,
    **{(module, name): _no_count(getattr(builtins, name)) for module in ("__builtin__", "builtins")
       for name in ("bytes", "bytearray")},
    **{(module, name): getattr(builtins, name) for module in ("__builtin__", "builtins")
       for name in ("set", "frozenset", "complex")},
    ("_codecs", "encode"): _latin1,
    ("collections", "OrderedDict"): collections.OrderedDict,
    **{tuple(path.rsplit(".", 1)): RawResult for path in RESULT_CLASSES},
    **{tuple(path.rsplit(".", 1)): BoxList for path in BOXLIST_CLASSES},
    **{("torch._utils", name): _torch_tensor for name in ("_rebuild_tensor", "_rebuild_tensor_v2",
                                                          "_rebuild_tensor_v3")},
    ("torch._utils", "_rebuild_parameter"): lambda data, *rest: data,
}


def _large(value):
    """Whether a memo value holds data of one result, released after it: anything over 1 KiB (or
    left in the file) and every non-empty container. Kept: globals, dtypes, field names and tiny
    constants (an empty array) that later results may refer back to."""
    if isinstance(value, _Array):
        value = value.array
    if isinstance(value, (_Payload, _LazyArray)) or value is None:
        return True
    if isinstance(value, (bytes, bytearray, str)):
        return len(value) > 1024
    if isinstance(value, np.ndarray):
        return value.nbytes > 1024
    if isinstance(value, tuple):
        return any(map(_large, value))
    return isinstance(value, RawResult) or isinstance(value, (dict, list, set, frozenset)) and len(value) > 0


LAZY_BYTES = 1 << 20  # strings and bytes this large are left in the file by a lazy reader (read by workers)


def _payload_loader(size_format, utf8):
    """pickle's BINUNICODE / BINUNICODE8 (utf8) or BINBYTES / BINBYTES8: a size, then the data. A
    lazy reader leaves large data outside protocol 4's frames in the file (a _Payload)."""
    size_bytes = struct.calcsize(size_format)

    def load(self):
        (size,) = struct.unpack(size_format, self.read(size_bytes))
        if size > sys.maxsize:
            raise pickle.UnpicklingError("a value longer than this machine can hold")
        if self.lazy_path is None or size <= LAZY_BYTES or not self.outside_frames():
            data = self.read(size)
            if len(data) < size:
                raise EOFError(f"the pickle ends inside a {size}-byte value")
            self.append(str(data, "utf-8", "surrogatepass") if utf8 else data)
            return
        offset = self.handle.tell()
        if offset + size > os.fstat(self.handle.fileno()).st_size:
            raise EOFError(f"the pickle ends inside a {size}-byte value at byte {offset}")
        self.handle.seek(size, os.SEEK_CUR)
        self.append(_Payload(self.lazy_path, offset, size, utf8))
    return load


_RELEASED = object()  # a memo entry whose data was released (kept as an entry: protocol 4 numbers them by count)


def _checked_get(load):
    """A memo-reading opcode that refuses a released entry."""
    def get(self):
        load(self)
        if self.stack[-1] is _RELEASED:
            raise pickle.UnpicklingError("a result refers back to data (over 1 KiB) of an earlier one: results "
                                         "that share data cannot be streamed")
    return get


def _checked_build(load):
    """BUILD (an object's state) only for the stand-ins that take one and OrderedDict (torch's carry
    attributes): pickle's Python unpickler would ignore an empty state given to any other object,
    its C unpickler refuses it."""
    def build(self):
        if len(self.stack) < 2 or not isinstance(self.stack[-2], (RawResult, _DType, _Array, TorchObject,
                                                                  collections.OrderedDict)):
            target = type(self.stack[-2]).__name__ if len(self.stack) > 1 else "nothing"
            raise Refused(f"an object state for a {target}")
        load(self)
    return build


def _checked_newobj(load, arguments):
    """NEWOBJ / NEWOBJ_EX (``cls.__new__(cls, *args)``: how a plain class instance is pickled) only
    for the attribute holders (a Result, a BoxList), without arguments; ``arguments``: how many
    stack items (args, kwargs) follow the class."""
    def newobj(self):
        if len(self.stack) <= arguments or not (isinstance(self.stack[-1 - arguments], type)
                                                and issubclass(self.stack[-1 - arguments], RawResult)) \
                or any(self.stack[-1 - n] for n in range(arguments)):
            raise Refused("a class instance (NEWOBJ) of anything but a Result or BoxList, or with arguments")
        load(self)
    return newobj


def _load_bytearray8(self):
    """BYTEARRAY8 without the Python unpickler's ``bytearray(n)`` before reading (n from the file:
    an allocation of any size by 9 bytes of pickle): the bytes are read, then checked."""
    (size,) = struct.unpack("<Q", self.read(8))
    data = self.read(size)
    if len(data) != size:
        raise EOFError(f"the pickle ends inside a {size}-byte bytearray")
    self.append(bytearray(data))


class _NotingMemo(dict):
    """The unpickler's memo, noting the keys set since the last look (RestrictedUnpickler._release
    looks at those only, not at the whole memo after every result)."""

    def __init__(self):
        super().__init__()
        self.fresh = []

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.fresh.append(key)


class RestrictedUnpickler(pickle._Unpickler):
    """pickle's own unpickler (its Python implementation, which lets the items of a list be taken
    as they are read) with only ALLOWED_GLOBALS and inert torch stand-ins; refuses everything else."""

    dispatch = {**pickle._Unpickler.dispatch,
                **{code[0]: _checked_get(pickle._Unpickler.dispatch[code[0]])
                   for code in (pickle.GET, pickle.BINGET, pickle.LONG_BINGET)},
                **{code[0]: _payload_loader(size_format, utf8) for code, size_format, utf8 in (
                    (pickle.BINUNICODE, "<I", True), (pickle.BINUNICODE8, "<Q", True),
                    (pickle.BINBYTES, "<I", False), (pickle.BINBYTES8, "<Q", False))},
                pickle.BUILD[0]: _checked_build(pickle._Unpickler.dispatch[pickle.BUILD[0]]),
                pickle.NEWOBJ[0]: _checked_newobj(pickle._Unpickler.dispatch[pickle.NEWOBJ[0]], 1),
                pickle.NEWOBJ_EX[0]: _checked_newobj(pickle._Unpickler.dispatch[pickle.NEWOBJ_EX[0]], 2),
                pickle.BYTEARRAY8[0]: _load_bytearray8}

    def __init__(self, handle, lazy_path=None):
        """lazy_path: the path of handle's file; large data is then left there (see _Payload)."""
        super().__init__(handle)
        self.handle, self.lazy_path, self.memo = handle, lazy_path, _NotingMemo()

    def outside_frames(self):
        """Whether the next bytes come straight from the file (not from a protocol 4 frame)."""
        frame = self._unframer.current_frame
        if frame is not None:
            position = frame.tell()
            if position == frame.seek(0, os.SEEK_END):
                self._unframer.current_frame = frame = None  # used up
            else:
                frame.seek(position)
        return frame is None

    def find_class(self, module, name):
        found = ALLOWED_GLOBALS.get((module, name))
        if found is not None:
            return found
        if module == "torch" or module.startswith("torch."):
            return TorchObject
        raise Refused(f"'{module}.{name}'")

    def persistent_load(self, pid):
        raise Refused("a persistent id (a torch.save file?)")

    def items(self):
        """The items of the pickled top-level list, each as soon as it is complete, with its numpy
        data made real; the memo entries holding its data are released then, so memory holds about
        one item whatever the pickle's size. A Result is complete once its state is set; an item of
        another type (a dict) when the list appends it (pickle appends in batches of 1,000)."""
        self._unframer = pickle._Unframer(self._file_read, self._file_readline)
        self.read, self.readinto, self.readline = self._unframer.read, self._unframer.readinto, self._unframer.readline
        self.metastack, self.stack, self.proto = [], [], 0
        self.append, top = self.stack.append, None
        while True:
            key = self.read(1)
            if not key:
                raise EOFError("the pickle ends before its STOP")
            try:
                self.dispatch[key[0]](self)
            except pickle._Stop as stop:
                if stop.value is not top:
                    raise NotAList(type(stop.value).__name__) from None
                yield from self._release(top, len(top))
                return
            outer = self.metastack[0] if self.metastack else self.stack
            if top is None and outer:  # the first object: the list (or a global that will make it)
                if type(outer[0]) is list:
                    top = outer[0]
                elif not callable(outer[0]):
                    raise NotAList(type(outer[0]).__name__)
            complete = len(top) if top else 0  # appended by APPEND(S)
            yield from self._release(top, complete)
            if self.metastack and len(self.metastack[0]) == 1 and self.metastack[0][0] is top:  # after MARK
                pending = self.stack if len(self.metastack) == 1 else self.metastack[1]
                built = next((n for n, item in enumerate(pending) if not getattr(item, "built", False)), len(pending))
                yield from self._release(pending, built)

    def _release(self, holder, count):
        """Take the first count items out of holder (a list), yield them, release their memo data."""
        if count <= 0:
            return
        taken = holder[:count]
        del holder[:count]
        for item in taken:
            yield real_arrays(item)
        fresh, self.memo.fresh = self.memo.fresh, []
        for key in fresh:
            if _large(self.memo[key]) and self.memo[key] is not holder:
                dict.__setitem__(self.memo, key, _RELEASED)


class NotAList(Exception):
    """The pickle's top-level object is not a list."""
