"""``make fuzz``: a campaign of generated bad inputs against every reader of sgeval and the
converters, each case run in a worker process (fuzz/worker.py) with an address-space limit and a
timeout. Prints the tallies per reader and outcome; saves every case whose outcome is not
``error`` or ``accepted`` to fuzz/corpus/ (tests/core/test_fuzz.py replays them).

    python -m fuzz --seconds 600                # the campaign (make fuzz FUZZ_S=600)
    python -m fuzz --seconds 60 --readers tiff,png
    python -m fuzz --examples 100 --derandomize  # the fixed slice make test runs
"""

import argparse
import collections
import contextlib
import hashlib
import pickle
import selectors
import struct
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from fuzz.cases import READERS, STRATEGIES, base_workspace

CORPUS = Path(__file__).with_name("corpus")
CLEAN = ("error", "accepted")
TIMEOUT_S = 30


class Worker:
    """One fuzz.worker child; restarted after a crash or a hang."""

    def __init__(self, base):
        self.base, self.process = base, None

    def _start(self):
        self.process = subprocess.Popen([sys.executable, "-m", "fuzz.worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._send(self.base)

    def _send(self, value):
        data = pickle.dumps(value)
        self.process.stdin.write(struct.pack(">I", len(data)) + data)
        self.process.stdin.flush()

    def run(self, case):
        """(outcome, detail) of one case."""
        if self.process is not None and self.process.poll() is not None:
            self._close_pipes()
        if self.process is None:
            self._start()
        try:
            self._send(case)
        except BrokenPipeError:
            return self._died()
        reply = _read_with_timeout(self.process, TIMEOUT_S)
        if reply is _EOF:  # the worker died
            return self._died()
        if reply is None:
            self.stop()
            return "hang", f"no answer in {TIMEOUT_S} s"
        return reply

    def _died(self):
        code = self.process.wait()
        self._close_pipes()
        return ("crash", f"worker killed by signal {-code}") if code < 0 else ("crash", f"worker exited with {code}")

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self._close_pipes()

    def _close_pipes(self):
        """Close the ended child's pipes now (left to the garbage collector, each would warn later)."""
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):  # BrokenPipeError: bytes still buffered for a dead child
                pipe.close()
        self.process = None


_EOF = object()


def _read_with_timeout(process, timeout):
    """The worker's next reply; None after timeout seconds without one; _EOF when it died."""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        return None
    header = process.stdout.read(4)
    if len(header) < 4:
        return _EOF
    return pickle.loads(process.stdout.read(struct.unpack(">I", header)[0]))


def save_case(case, outcome):
    CORPUS.mkdir(exist_ok=True)
    data = pickle.dumps(case)
    path = CORPUS / f"{case['reader']}-{outcome}-{hashlib.sha256(data).hexdigest()[:12]}.case"
    path.write_bytes(data)
    return path


def campaign(readers, worker, base, examples, derandomize, deadline, tallies, findings, round_seed=0):
    """Run `examples` generated cases per reader (fewer when the deadline passes)."""
    for reader in readers:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(st.data())
        def one(data):
            case = {"reader": reader, "argv": [], **data.draw(STRATEGIES[reader](base))}
            if time.monotonic() > deadline:  # drawn anyway: hypothesis wants every run to draw alike
                return
            outcome, detail = worker.run(case)
            tallies[reader][outcome] += 1
            if outcome not in CLEAN:
                findings.append((reader, outcome, detail, case))

        seed(round_seed)(one)() if not derandomize else one()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="run rounds until this many seconds passed")
    parser.add_argument("--examples", type=int, default=200, help="cases per reader and round (default 200)")
    parser.add_argument("--readers", default=",".join(READERS), help=f"comma-separated: {','.join(READERS)}")
    parser.add_argument("--derandomize", action="store_true", help="the same cases every time (one round)")
    parser.add_argument("--no-save", action="store_true", help="do not write fuzz/corpus/")
    args = parser.parse_args(argv)
    readers = [r for r in args.readers.split(",") if r]
    unknown = sorted(set(readers) - set(READERS))
    if unknown:
        parser.error(f"unknown readers {unknown}; known: {', '.join(READERS)}")
    base = base_workspace()
    tallies, findings = collections.defaultdict(collections.Counter), []
    start = time.monotonic()
    deadline = start + args.seconds if args.seconds else float("inf")
    worker = Worker(base)
    try:
        round_number = 0
        while True:
            campaign(readers, worker, base, args.examples, args.derandomize, deadline, tallies, findings,
                     round_seed=round_number)
            round_number += 1
            if args.derandomize or not args.seconds or time.monotonic() > deadline:
                break
    finally:
        worker.stop()
    print(report(tallies, time.monotonic() - start))
    for reader, outcome, detail, case in findings:
        where = "" if args.no_save else f" -> {save_case(case, outcome)}"
        print(f"{reader:9s} {outcome:9s} {_last_lines(detail)}{where}")
    return 1 if findings else 0


def _last_lines(detail, lines=3):
    """The end of a traceback: the failing line and the exception."""
    return " | ".join(line.strip() for line in detail.strip().splitlines()[-lines:])[:400]


def report(tallies, seconds):
    kinds = ["error", "accepted", "traceback", "crash", "hang", "memory", "silent", "refused", "dirty"]
    lines = [f"{'reader':10s}" + "".join(f"{k:>10s}" for k in kinds) + f"{'total':>10s}"]
    for reader, counts in tallies.items():
        lines.append(f"{reader:10s}" + "".join(f"{counts[k]:>10d}" for k in kinds) + f"{sum(counts.values()):>10d}")
    total = sum(sum(c.values()) for c in tallies.values())
    lines.append(f"{total} cases in {seconds:.0f} s ({total / max(seconds, 1e-9):.1f} per second)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
