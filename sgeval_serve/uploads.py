"""Receiving an upload: the multipart body streamed to a file under incoming/ (never whole in
memory, cut off at the size limit), then checked with sgeval's own reader against the benchmark's
ground truth before anything is queued (check_prediction, which checks.py runs in a bounded child
process)."""

from __future__ import annotations

import hashlib
import os
import secrets
import typing
import unicodedata

from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

import sgeval

from . import limits

FIELDS = ("csrf", "method", "paper_url", "code_url", "public", "file")
MAX_FIELD_BYTES = 2048
MAX_PARTS = 16
MAX_PROBLEMS = sgeval.MAX_PROBLEMS  # problem lines of one upload kept and shown; the rest are counted
DEFAULT_RECORDS_FACTOR = 4  # an upload holds at most this many image records per test image of its split


class UploadError(Exception):
    """A refused upload: the HTTP status and one line per problem."""

    def __init__(self, status, problems, fields=None):
        super().__init__("\n".join(problems))
        self.status, self.problems, self.fields = status, list(problems), fields or {}


class Upload(typing.NamedTuple):
    fields: dict  # text fields
    path: object  # the received file under incoming/, or None
    file_name: str  # the client's name for it, for display only
    size: int
    sha256: str
    kind: str  # zip | json


class GTInfo(typing.NamedTuple):
    """What validating a prediction needs of a benchmark's hidden GT."""

    n_objects: int
    n_predicates: int
    mode: str
    image_ids: frozenset


def gt_info(benchmark):
    gt = sgeval.read_gt(benchmark.gt, benchmark.gt_seg)
    return GTInfo(len(gt.object_classes), len(gt.predicate_classes), "mask" if benchmark.gt_seg else "box",
                  frozenset(image.image_id for image in gt.images))


def display_name(name):
    """A client's file name, for showing only: its last path part, printable, at most 80 characters."""
    name = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] not in "CZ" or c == " ").strip()
    return (name[:80] or "upload")


def sniff_kind(head):
    """zip or json from a file's first bytes; None for anything else."""
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    return "json" if stripped[:1] == b"{" else None


class _Receiver:
    """The multipart parser's callbacks: text fields into memory (small), the file into a file."""

    def __init__(self, incoming, max_bytes, refuse_file=None):
        self.incoming, self.max_bytes, self.refuse_file = incoming, max_bytes, refuse_file
        self.fields, self.problems, self.parts = {}, [], 0
        self.path, self.file, self.file_name, self.size, self.head = None, None, "", 0, b""
        self.digest = hashlib.sha256()
        self._header_field, self._header_value, self._headers, self._name, self._buffer = b"", b"", {}, None, b""

    def callbacks(self):
        return {"on_part_begin": self.part_begin, "on_part_data": self.part_data, "on_part_end": self.part_end,
                "on_header_field": self.header_field, "on_header_value": self.header_value,
                "on_header_end": self.header_end, "on_headers_finished": self.headers_finished}

    def part_begin(self):
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise UploadError(400, [f"the form has more than {MAX_PARTS} parts"])
        self._headers, self._name, self._buffer = {}, None, b""

    def header_field(self, data, start, end):
        self._header_field += data[start:end]

    def header_value(self, data, start, end):
        self._header_value += data[start:end]

    def header_end(self):
        self._headers[self._header_field.lower()] = self._header_value
        self._header_field, self._header_value = b"", b""

    def headers_finished(self):
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if self._name not in FIELDS:
            raise UploadError(400, [f"unknown form field '{self._name[:40]}' (expected: {', '.join(FIELDS)})"])
        if self._name == "file":
            if self.refuse_file:  # the file is too large: stop before its data
                raise UploadError(413, [self.refuse_file])
            if self.file is not None:
                raise UploadError(400, ["send one file"])
            self.file_name = display_name(options.get(b"filename", b"").decode("utf-8", "replace"))
            self.path = self.incoming / f"{secrets.token_hex(16)}.part"
            self.file = open(self.path, "xb")

    def part_data(self, data, start, end):
        chunk = data[start:end]
        if self._name != "file":
            self._buffer += chunk
            if len(self._buffer) > MAX_FIELD_BYTES:
                raise UploadError(400, [f"the field '{self._name}' is longer than {MAX_FIELD_BYTES} bytes"])
            return
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise UploadError(413, [f"the file is larger than the limit of {self.max_bytes >> 20} MiB"])
        if len(self.head) < 64:
            self.head += chunk[:64]
        self.digest.update(chunk)
        self.file.write(chunk)

    def part_end(self):
        if self._name != "file":
            try:
                self.fields[self._name] = self._buffer.decode("utf-8")
            except UnicodeDecodeError:
                raise UploadError(400, [f"the field '{self._name}' is not UTF-8 text"]) from None

    def close(self):
        if self.file is not None:
            self.file.close()

    def discard(self):
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


async def receive(request, incoming, max_bytes):
    """Stream a multipart/form-data request body to disk. Returns an Upload (path None when the
    form had no file); raises UploadError (the partial file removed)."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UploadError(415, ["send the form as multipart/form-data"])
    too_large = f"the upload is larger than the limit of {max_bytes >> 20} MiB"
    declared = limits.declared_length(request.scope)
    # a declared length over the limit: the form's fields are read (they come before the file), not the file
    receiver = _Receiver(incoming, max_bytes, too_large if (declared or 0) > max_bytes + limits.FORM_OVERHEAD else None)
    parser = MultipartParser(boundary, receiver.callbacks(), max_size=max_bytes + limits.FORM_OVERHEAD)
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    except UploadError as error:  # a refused form keeps the fields read so far
        receiver.discard()
        raise UploadError(error.status, error.problems, error.fields or receiver.fields) from None
    except limits.BodyTooLarge:
        receiver.discard()
        raise UploadError(413, [too_large], receiver.fields) from None
    except limits.BodyTimeout as error:
        receiver.discard()
        raise UploadError(408, [f"{error}: send it again"], receiver.fields) from None
    except Exception as error:  # the parser's own errors: a malformed body
        receiver.discard()
        raise UploadError(400, [f"the form data cannot be read ({type(error).__name__})"], receiver.fields) from None
    receiver.close()
    if receiver.path is None or receiver.size == 0:  # a browser sends an empty part when no file was chosen
        receiver.discard()
        return Upload(receiver.fields, None, "", 0, "", "")
    kind = sniff_kind(receiver.head)
    if kind is None:
        receiver.discard()
        raise UploadError(400, [f"{receiver.file_name}: not a ZIP archive or a JSON file"], receiver.fields)
    path = receiver.path.with_suffix(f".{kind}")  # sgeval's reader goes by the name's extension
    os.replace(receiver.path, path)
    return Upload(receiver.fields, path, receiver.file_name, receiver.size, receiver.digest.hexdigest(), kind)


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Problems(sgeval.ProblemList):
    """sgeval's ProblemList of a check (the first sgeval.MAX_PROBLEMS lines kept, the rest only
    counted; len() counts all), which can end the reading: with stop_after, the problem after
    that many raises Problems.Stop, once."""

    class Stop(Exception):
        pass

    def __init__(self, stop_after=None):
        self.stop_after, self.stopped = stop_after, False
        super().__init__()

    def append(self, line):
        super().append(line)
        if self.stop_after is not None and self.count > self.stop_after and not self.stopped:
            self.stopped = True
            raise Problems.Stop()

    @property
    def kept(self):
        return [line for line in self]  # iterating a list subclass: the kept lines (its len() is the count)

    def lines(self, name):
        """The kept lines, and one counting the rest (named after the upload) when there are more."""
        if self.stopped:
            return self.kept + [f"{name}: the check stopped after {self.stop_after:,} problems (the first "
                                f"{len(self.kept):,} are listed)"]
        rest = self.count - len(self.kept)
        return self.kept + ([f"{name}: and {rest:,} more problems (the first {len(self.kept):,} are listed)"]
                            if rest else [])


def capped(lines, name):
    """At most MAX_PROBLEMS of a list of problem lines, then one line counting the rest."""
    problems = Problems()
    problems.extend(lines)
    return problems.lines(name)


def check_prediction(path, shown_name, info, benchmark, records_factor=DEFAULT_RECORDS_FACTOR):
    """Read a prediction file with sgeval's reader (records, not masks) against a benchmark's GT,
    and apply the benchmark's rules (some test image predicted; every one if missing_images is
    refuse). Returns (counts {predicted, missing, extra, missing_examples}, problems): the problem
    lines name the file shown_name (None: the path as given, which starts sgeval's own lines).

    The reading stops after records_factor x the split's images valid records, or after as many
    problems (at least MAX_PROBLEMS); the first MAX_PROBLEMS problem lines are kept. checks.py runs
    this in a bounded child process."""
    name = str(path) if shown_name is None else shown_name
    limit = records_factor * len(info.image_ids)
    problems, ids, too_many = Problems(stop_after=max(limit, MAX_PROBLEMS)), [], []
    json_masks = info.mode == "mask" and str(path).endswith(".json")  # its masks would be looked up beside it
    try:
        source, records = sgeval.prediction_records(str(path), info.n_objects, info.n_predicates, info.mode, problems)
        try:
            for record in records:
                ids.append(record.image_id)
                if json_masks and len(record.categories) and record.seg_filename:
                    problems.append(f"{name}: image {record.image_id}: seg_filename '{record.seg_filename}' is not in "
                                    "the upload (a .json file holds no masks: send a ZIP of triplets.json and the masks)")
                if len(ids) > limit:
                    too_many.append(f"{name}: holds more than {limit} image records, {records_factor} per test image "
                                    f"of the benchmark's {len(info.image_ids)} (max_records_factor): is it for another "
                                    "split?")
                    break
        finally:
            source.close()
    except Problems.Stop:
        pass
    except sgeval.SGEvalError as error:
        problems.stop_after = None  # the reading has ended
        problems += error.problems
    except (OSError, RecursionError) as error:
        problems.stop_after = None
        problems.append(f"{name}: cannot be read ({type(error).__name__})")
    problems = problems.lines(name) + too_many
    predicted = set(ids) & info.image_ids
    missing = sorted(info.image_ids - predicted)
    counts = {"predicted": len(predicted), "missing": len(missing), "extra": len(set(ids) - info.image_ids),
              "missing_examples": missing[:10]}
    if not problems and not predicted:
        problems = [f"{name}: predicts none of the benchmark's {len(info.image_ids)} test images "
                    "(is it for another split?)"]
    if not problems and missing and benchmark.missing_images == "refuse":
        problems = [f"{name}: {len(missing)} of the benchmark's test images have no prediction "
                    f"(this benchmark needs every image), for example {', '.join(missing[:5])}"]
    return counts, problems


def submission_row(user_id, method, paper_url, code_url, public, upload, counts):
    """The submissions table's fields of a checked upload."""
    return {"user_id": user_id, "method": method, "paper_url": paper_url, "code_url": code_url, "public": int(public),
            "file_name": upload.file_name, "file_kind": upload.kind, "size": upload.size, "sha256": upload.sha256,
            "images_predicted": counts["predicted"], "images_missing": counts["missing"],
            "images_extra": counts["extra"]}
