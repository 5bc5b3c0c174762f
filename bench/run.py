"""``make bench``: time sgeval against SGBench 1.0 and the library floor on PSG-scale workloads.

    python bench/run.py [--images 2177 | --quick] [--runs 3] [--workers 1,2] [--workload all]

1. Generates the workloads once (``python -m bench.make_workload``, cached under
   ``bench/data/<n>/`` for the default workload and ``bench/data/<workload>-<n>/`` for the
   overlap-heavy and the blob one).
2. Creates ``bench/.venv-sgbench`` once (``pip install 'sgbench[all]==1.0.0'``: its own numpy<2).
3. Per workload, untimed: which library inflater is fastest on each prediction file
   (``bench.decode_floor --compare-inflaters``); sgeval once on compact.zip and sgbench.zip, which
   fills the JIT cache and prepares the GT in this workload's GT cache folder (a new temporary
   folder, ``--gt-cache``). On the first workload (the default one unless it is not asked for):
   ``sgeval --help`` (the installed console script, PYTHONPATH set to the checkout; median of 5)
   and ``import sgeval`` with an empty JIT cache (it must compile and import nothing of numba).
4. For every workload, run and worker count, runs as child processes, interleaved:
   (a) ``python -m sgbench psg.json sgbench.zip --gt-masks panoptic --workers W'`` (W' = 0, i.e.
       in-process, for W = 1; a Pool of W otherwise),
   (b) ``sgeval.py --pred sgbench.zip --workers W --gt-cache <prepared>``, (c) the same on
   compact.zip, (g) on pages.zip (one 1-bit page per mask); (b cold), (c cold), (g cold): the same
   with a new empty GT cache folder (the first run on a GT: every PNG decoded and prepared);
   (d), (e), (h): ``python -m bench.decode_floor --pred <file> --workers W`` (the library floor:
   tifffile + the fastest inflater for the masks, ``imagecodecs.png_decode`` for the GT) on
   sgbench.zip, compact.zip, pages.zip; (f) (c) with ``--no-audit``; and on the first workload
   after the W = 1 rows, (c) and (b) at W = 1 with an empty JIT cache (a new NUMBA_CACHE_DIR);
   and reports medians of wall and CPU time, ms per evaluated image, memory (see
   ``bench/README.md`` for what the memory columns mean) and the 1-minute load average.
5. Prints a table per workload with the ratios and the targets (issue 30's and the earlier
   ones), and writes everything to ``bench/results/<n>.json`` (default workload) and
   ``bench/results/<workload>-<n>.json``.
6. Unless ``--no-loop``: ``python -m bench.loop`` on the overlap workload (the first one when
   overlap is not asked for) with the same number of runs: ``sgeval.Evaluator.update`` in a test
   loop against the file path, and the size of its state (``bench/loop.py``). Then every target
   once more, with ok / MISSED.

sgeval.py is used only through its command line, and this script imports nothing but the standard
library: the children it measures are spawned from a small process, whose size cannot leak into
their peak RSS (Linux counts the pre-exec memory of a spawned child in its ru_maxrss). Every child
runs with the repository root as its working directory (``-m bench.…`` finds the checkout there,
and with it the checkout's sgeval.py).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SGEVAL = ROOT / "sgeval.py"
SGBENCH_VENV = BENCH / ".venv-sgbench"
SGBENCH_REQUIREMENT = "sgbench[all]==1.0.0"
QUICK_IMAGES, FULL_IMAGES = 200, 2177
WORKLOADS = ("default", "overlap", "blob")
WORKLOAD_CHOICES = {**{name: [name] for name in WORKLOADS}, "both": ["default", "overlap"], "all": list(WORKLOADS)}
LAYOUTS = {"sgbench.zip": ("b", "d"), "compact.zip": ("c", "e"), "pages.zip": ("g", "h")}  # (sgeval, floor)
TOOLS = {
    "a": "sgbench 1.0.0, sgbench.zip",
    "b": "sgeval, sgbench.zip",
    "b cold": "sgeval, sgbench.zip, GT cold",
    "c": "sgeval, compact.zip",
    "c cold": "sgeval, compact.zip, GT cold",
    "g": "sgeval, pages.zip",
    "g cold": "sgeval, pages.zip, GT cold",
    "b nocache": "sgeval --no-gt-cache, sgbench.zip",
    "c nocache": "sgeval --no-gt-cache, compact.zip",
    "g nocache": "sgeval --no-gt-cache, pages.zip",
    "d": "library floor, sgbench.zip",
    "e": "library floor, compact.zip",
    "h": "library floor, pages.zip",
    "f": "sgeval --no-audit, compact.zip",
    "p": "sgeval --pq (score-order), compact.zip",
}
SGEVAL_TOOLS = ("b", "b cold", "b nocache", "c", "c cold", "c nocache", "g", "g cold", "g nocache", "f", "p")
# Targets at 2,177 images and W = 2; (a)/(x): sgeval's speed-up over SGBench, the GT prepared or cold.
SPEEDUP_TARGETS = {"default": {"b": 8.0, "c": 12.0}, "overlap": {"b": 6.0, "c": 10.0},
                   "blob": {"b": 6.0, "c": 12.0, "b cold": 5.0, "c cold": 9.0}}
# sgeval / the library floor per layout, the GT prepared (issue 39; issue 30 asked 1.3 on every layout)
FLOOR_TARGETS = {"sgbench.zip": 1.15, "compact.zip": 1.0, "pages.zip": 1.1}
FIRST_RUN_TARGET = 1.05  # the first run (GT cold) / the run without a GT cache, every layout (issue 39)
PQ_COST_TARGET = 1.15  # a mask-mode run with panoptic quality / the same run without (issue 37)
JIT_TARGET_S, HELP_TARGET_S, MAIN_RSS_TARGET_MIB = 3.0, 0.5, 300.0
PACKED_UPDATE_TARGET_MS = 1.5  # Evaluator.update's CPU in the caller's thread with PackedMasks (issue 39)
FLAT_TOLERANCE = 0.10  # "flat from 200 to 2,177 images": main-process peak grows by at most 10 %
TARGET_W = 2


def ratios(workload):
    """(x, y, target text, test of the value or None) of the ratios reported for a workload: the
    prepared row's target, then the cold row beside it."""
    speedup, found = SPEEDUP_TARGETS[workload], []
    for tool in ("b", "c", "g"):
        for row in (tool, f"{tool} cold"):
            target = speedup.get(row)
            found.append(("a", row, f">= {target:g} at W={TARGET_W}", lambda v, t=target: v >= t) if target
                         else ("a", row, "(no target)", None))
    for layout, (tool, floor) in LAYOUTS.items():
        target = FLOOR_TARGETS[layout]
        found.append((tool, floor, f"<= {target:g} at W={TARGET_W}", lambda v, t=target: v <= t))
        found.append((f"{tool} cold", floor, "(no target: GT cold)", None))
        found.append((f"{tool} cold", f"{tool} nocache", f"<= {FIRST_RUN_TARGET:g} at W={TARGET_W} (first run / "
                      f"no GT cache)", lambda v: v <= FIRST_RUN_TARGET))
    return found + [("c", "b", f"< 1 at W={TARGET_W} (compact faster end to end)", lambda v: v < 1.0),
                    ("f", "e", "(no target: without the audit)", None),
                    ("p", "c", f"<= {PQ_COST_TARGET:g} at W={TARGET_W} (panoptic quality's cost)",
                     lambda v: v <= PQ_COST_TARGET),
                    ("a", "f", "(no target)", None)]


# ----------------------------------------------------------------------------- measuring


def _tree(pid):
    """pid and all its descendants (via /proc/<pid>/task/<tid>/children)."""
    pids, index = [pid], 0
    while index < len(pids):
        try:
            for task in os.listdir(f"/proc/{pids[index]}/task"):
                with open(f"/proc/{pids[index]}/task/{task}/children") as handle:
                    pids += [int(child) for child in handle.read().split()]
        except OSError:
            pass
        index += 1
    return pids


def _rss_pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            fields = dict(line.split(":", 1) for line in handle if line.startswith(("Rss:", "Pss:")))
        return int(fields["Rss"].split()[0]), int(fields["Pss"].split()[0])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _hwm_kib(pid):
    """VmHWM (the peak resident set so far) of one process; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next((int(line.split()[1]) for line in handle if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError):
        return 0


class TreeSampler(threading.Thread):
    """Samples the summed RSS and PSS of a process tree every `interval` seconds and keeps the
    peaks; reads the top process's own VmHWM every `hwm_interval` seconds (its peak RSS, missing
    only growth in its last `hwm_interval` before exit)."""

    def __init__(self, pid, interval=0.1, hwm_interval=0.02):
        super().__init__(daemon=True)
        self.pid, self.interval, self.hwm_interval = pid, interval, hwm_interval
        self.peak_rss_kib = self.peak_pss_kib = self.peak_processes = self.main_hwm_kib = 0
        self.done = threading.Event()

    def run(self):
        next_tree = 0.0
        while not self.done.is_set():
            self.main_hwm_kib = max(self.main_hwm_kib, _hwm_kib(self.pid))
            now = time.monotonic()
            if now >= next_tree:
                next_tree = now + self.interval
                pids = _tree(self.pid)
                rss, pss = (sum(values) for values in zip(*map(_rss_pss_kib, pids)))
                self.peak_rss_kib, self.peak_pss_kib = max(self.peak_rss_kib, rss), max(self.peak_pss_kib, pss)
                self.peak_processes = max(self.peak_processes, len(pids))
            self.done.wait(self.hwm_interval)


def busy_cpu_s():
    """CPU time the whole machine spent busy so far (all CPUs; /proc/stat, steal included)."""
    with open("/proc/stat") as handle:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, handle.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(command, env):
    """Run a command (in the repository root); wall time, CPU time and peak memory of it and its
    (reaped) descendants, the CPU time the rest of the machine used meanwhile (other processes,
    this script's sampler) and the 1-minute load average before and after."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        load_before = os.getloadavg()[0]
        busy_before = busy_cpu_s()
        start = time.perf_counter()
        process = subprocess.Popen([str(part) for part in command], stdout=out, stderr=err, env=env, cwd=ROOT)
        sampler = TreeSampler(process.pid)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        other_cpu = busy_cpu_s() - busy_before - usage.ru_utime - usage.ru_stime
        sampler.done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime, "other_cpu_s": other_cpu, "max_rss_mib": usage.ru_maxrss / 1024,
            "main_rss_mib": sampler.main_hwm_kib / 1024,
            "tree_rss_mib": sampler.peak_rss_kib / 1024, "tree_pss_mib": sampler.peak_pss_kib / 1024,
            "processes": sampler.peak_processes, "returncode": process.returncode,
            "load_1min": [load_before, os.getloadavg()[0]], "stdout": stdout, "stderr": stderr}


# ----------------------------------------------------------------------------- set-up


def ensure_sgbench_venv():
    """bench/.venv-sgbench with SGBench 1.0 and the dependencies pip resolves for it (numpy<2)."""
    python = SGBENCH_VENV / "bin" / "python"
    stamp = SGBENCH_VENV / ".installed"
    if stamp.is_file() and stamp.read_text().strip() == SGBENCH_REQUIREMENT and python.exists():
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    print(f"creating {SGBENCH_VENV.relative_to(ROOT)} ({SGBENCH_REQUIREMENT})", file=sys.stderr)
    subprocess.run([base, "-m", "venv", str(SGBENCH_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", SGBENCH_REQUIREMENT],
                   check=True)
    stamp.write_text(SGBENCH_REQUIREMENT + "\n")
    return python


def pip_versions(python, names):
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                             capture_output=True, text=True, check=True).stdout
    versions = {item["name"].lower(): item["version"] for item in json.loads(listing)}
    return {name: versions.get(name) for name in names}


def machine():
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    memory = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:")), 0)
    return {"nproc": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": model,
            "memory_gib": round(memory / 2**20, 1), "kernel": platform.release(),
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}


def source_state():
    def git(*args):
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return result.stdout.strip() if result.returncode == 0 else None

    return {"git_head": git("rev-parse", "--short", "HEAD"),
            "sgeval_modified": bool(git("status", "--porcelain", "--", "sgeval.py")),
            "sgeval_sha256": sgeval_sha256()}


def sgeval_sha256():
    return hashlib.sha256(SGEVAL.read_bytes()).hexdigest()[:16]


def warm_page_cache(data):
    for path in [data / "psg.json", *(data / layout for layout in LAYOUTS), *sorted((data / "panoptic").iterdir())]:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


def data_dir(workload, n_images):
    """Where bench/make_workload.py writes a workload (its default_dir)."""
    return BENCH / "data" / (str(n_images) if workload == "default" else f"{workload}-{n_images}")


def results_path(workload, n_images):
    return BENCH / "results" / (f"{n_images}.json" if workload == "default" else f"{workload}-{n_images}.json")


def prepare_workload(workload, n_images, generation_workers):
    """Generate the workload unless cached; (data dir, stamp, seconds spent now or None)."""
    data = data_dir(workload, n_images)
    stamp_path = data / "stamp.json"
    before = stamp_path.stat().st_mtime_ns if stamp_path.exists() else None
    subprocess.run([sys.executable, "-m", "bench.make_workload", "--images", str(n_images), "--workload", workload,
                    "--out", data, "--workers", str(generation_workers)], check=True, cwd=ROOT)
    stamp = json.loads(stamp_path.read_text())
    generated_s = None if stamp_path.stat().st_mtime_ns == before else stamp["generation"]["seconds"]
    return data, stamp, generated_s


def fastest_inflaters(data, env):
    """{layout: decode_floor --compare-inflaters result} on the first 100 images of each file."""
    found = {}
    for layout in LAYOUTS:
        result = subprocess.run([sys.executable, "-m", "bench.decode_floor", "--pred", data / layout,
                                 "--compare-inflaters"], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        found[layout] = json.loads(result.stdout)
    return found


# ----------------------------------------------------------------------------- the benchmark


def commands(data, sgbench_python, workers, output, codecs=None, gt_cache=None, cold_gt_cache=None):
    """The measured commands for one worker count. codecs: {layout: inflater} for the floor;
    gt_cache: the folder of the prepared GT; cold_gt_cache: the (empty) folder of the cold rows."""
    codecs = codecs or {}
    psg, panoptic = data / "psg.json", data / "panoptic"
    base = [sys.executable, SGEVAL, "--gt", psg, "--gt-seg", panoptic, "--workers", workers, "--quiet"]
    floor = [sys.executable, "-m", "bench.decode_floor", "--gt", psg, "--gt-seg", panoptic, "--workers", workers]

    def sgeval(tool, layout, *more):
        cache = cold_gt_cache if tool.endswith(" cold") else None if tool.endswith(" nocache") else gt_cache
        more = ("--no-gt-cache", *more) if tool.endswith(" nocache") else more
        return base + ["--pred", data / layout, *(["--gt-cache", cache] if cache else []), *more,
                       "--output", output / f"{tool.replace(' ', '-')}{workers}.json"]

    def codec(layout):
        return ["--codec", codecs[layout]] if layout in codecs else []

    found = {"a": [sgbench_python, "-m", "sgbench", psg, data / "sgbench.zip", "--gt-masks", panoptic,
                   "--workers", 0 if workers == 1 else workers]}
    for layout, (tool, floor_tool) in LAYOUTS.items():
        found[tool], found[f"{tool} cold"] = sgeval(tool, layout), sgeval(f"{tool} cold", layout)
        found[f"{tool} nocache"] = sgeval(f"{tool} nocache", layout)
        found[floor_tool] = floor + ["--pred", data / layout, *codec(layout)]
    found["f"] = sgeval("f", "compact.zip", "--no-audit")
    found["p"] = sgeval("p", "compact.zip", "--pq", "--pq-merge", "score-order")
    return found


def run_order(run):
    """The order of the commands in one run: each sgeval row next to its floor and the floor next
    to the cold row, the cold row next to the row without a GT cache ((b) (d) (b cold) (b nocache),
    ...), each group reversed every other run so that a drift of the machine's speed biases neither
    side of a ratio; SGBench, by far the longest, last."""
    triples = [(tool, floor, f"{tool} cold", f"{tool} nocache") for tool, floor in LAYOUTS.values()]
    return [tool for triple in triples for tool in (triple if run % 2 else triple[::-1])] + ["f", "p", "a"]


def parse_sgbench(stdout):
    values = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(": ")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            pass
    return values


def summarise(samples, n_images):
    ok = [s for s in samples if s["returncode"] == 0]
    if not ok:
        return {"failed": len(samples), "stderr": samples[-1]["stderr"][-2000:]}
    walls = [s["wall_s"] for s in ok]
    wall = statistics.median(walls)
    found = {"runs": len(ok), "failed": len(samples) - len(ok), "wall_s": wall, "wall_min_s": min(walls),
             "wall_max_s": max(walls), "cpu_s": statistics.median(s["cpu_s"] for s in ok),
             "other_cpu_s": statistics.median(s["other_cpu_s"] for s in ok),
             "load_1min": statistics.median(s["load_1min"][0] for s in ok),
             "load_1min_range": [min(min(s["load_1min"]) for s in ok), max(max(s["load_1min"]) for s in ok)],
             "ms_per_image": 1000 * wall / n_images, "max_rss_mib": max(s["max_rss_mib"] for s in ok),
             "main_rss_mib": max(s["main_rss_mib"] for s in ok),
             "tree_rss_mib": max(s["tree_rss_mib"] for s in ok), "tree_pss_mib": max(s["tree_pss_mib"] for s in ok),
             "processes": max(s["processes"] for s in ok),
             "sgeval_versions": sorted({s["sgeval_sha256"] for s in ok if "sgeval_sha256" in s}),
             "stdout": ok[0]["stdout"][-500:]}
    if any("gt_entries" in s for s in ok):
        found["gt_entries"] = sorted({s["gt_entries"] for s in ok if "gt_entries" in s})
    return found


def _cache_files(folder, suffixes):
    return sum(1 for path in Path(folder).rglob("*") if path.suffix in suffixes) if Path(folder).is_dir() else 0


def measure_help(env):
    """``sgeval --help`` by the installed console script (beside this Python), median of 5, with
    PYTHONPATH set to the checkout so that it imports the checkout's sgeval.py (the install may be
    editable from another checkout); which file that is, checked from outside the checkout. As a
    user's Python does, it writes and reads the compiled bytecode (PYTHONDONTWRITEBYTECODE unset: with
    it set, every start compiles sgeval.py anew, about 0.1 s more)."""
    script = Path(sys.executable).with_name("sgeval")
    command = [script, "--help"] if script.exists() else [sys.executable, SGEVAL, "--help"]
    env = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])}
    imported = subprocess.run([sys.executable, "-c", "import sgeval; print(sgeval.__file__)"], env=env, cwd="/",
                              capture_output=True, text=True, check=False).stdout.strip()
    samples = [measure(command, env) for _ in range(5)]
    found = {"help_wall_s": statistics.median(s["wall_s"] for s in samples), "help_command": " ".join(map(str, command)),
             "help_imports": imported, "help_returncodes": sorted({s["returncode"] for s in samples})}
    print(f"{found['help_command']}: {found['help_wall_s']:.2f} s (imports {imported})", file=sys.stderr)
    return found


IMPORT_CHECK = ("import json, sys, time; start = time.perf_counter(); import sgeval; "
                "print(json.dumps({'file': sgeval.__file__, 'import_s': time.perf_counter() - start, "
                "'numba_imported': 'numba' in sys.modules}))")


def measure_import(env):
    """``import sgeval`` (the checkout's: run in the root) with an empty JIT cache: whether numba
    was imported and how many cache files were written (both must be none)."""
    with tempfile.TemporaryDirectory(prefix="sgeval-jit-") as cache:
        sample = measure([sys.executable, "-c", IMPORT_CHECK], {**env, "NUMBA_CACHE_DIR": cache})
        written = _cache_files(cache, (".nbi", ".nbc"))
    found = json.loads(sample["stdout"]) if sample["returncode"] == 0 else {"failed": sample["stderr"][-500:]}
    return {**found, "wall_s": sample["wall_s"], "cache_files_written": written}


def measure_jit_cold(command, env):
    """One run with an empty JIT cache: a new NUMBA_CACHE_DIR, so numba compiles what the run
    needs and caches it there; the JIT cache beside sgeval.py (which other runs on this machine
    may be using) is left alone."""
    with tempfile.TemporaryDirectory(prefix="sgeval-jit-") as cache:
        sample = measure(command, {**env, "NUMBA_CACHE_DIR": cache})
        sample["cache_files_written"] = _cache_files(cache, (".nbi", ".nbc"))
    return sample


def measure_startup(env):
    """--help and import (the JIT runs are made with the timed runs of the first workload)."""
    startup = {**measure_help(env), "import": measure_import(env), "jit_cold": {}}
    print(f"import sgeval: {startup['import']}", file=sys.stderr)
    return startup


def read_prepared(data, gt_cache, env):
    """bench.gt_read: ms per image to read a prepared GT image and to decode it (a child process)."""
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, "-m", "bench.gt_read", "--data", data, "--gt-cache", gt_cache],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"bench.gt_read failed: {done.stderr[-1500:]}", file=sys.stderr)
        return {"failed": done.stderr[-1500:]}
    found = {**json.loads(done.stdout), "load_1min": [load, os.getloadavg()[0]]}
    print(f"reading a prepared GT image: median {found['prepared']['median_ms']:.3f} ms (decoding it: "
          f"{found['decoded']['median_ms']:.2f} ms)", file=sys.stderr)
    return found


def gt_entries(folder):
    """The entries of a GT cache folder: the sum of its packs' counts (the 8 bytes before a pack's
    last 8; sgeval.gt_pack_bytes)."""
    packs = sorted(Path(folder).glob("*.gtp")) if Path(folder).is_dir() else []
    return sum(int.from_bytes(path.read_bytes()[-16:-8], "little") for path in packs)


def run_benchmark(workload, prepared, sgbench_python, runs, worker_counts, env, startup=None):
    """Everything for one workload; startup: the --help / import / empty-JIT-cache results measured
    on an earlier workload (None: measure them here)."""
    data, stamp, generated_s = prepared
    n_images = stamp["params"]["n_images"]
    results = {
        "workload_name": workload,
        "machine": machine(), "source_at_start": source_state(), "load_average": [os.getloadavg()[0]],
        "workload": {**stamp, "dir": str(data.relative_to(ROOT)), "generated_now_s": generated_s,
                     "sizes_mib": {name: (data / name).stat().st_size / 2**20 for name in ("psg.json", *LAYOUTS)},
                     "panoptic_mib": sum(p.stat().st_size for p in (data / "panoptic").iterdir()) / 2**20},
        "versions": {"sgbench_venv": pip_versions(sgbench_python, ["sgbench", "numpy", "tifffile", "imagecodecs", "pillow"]),
                     "sgeval_venv": pip_versions(sys.executable, ["numpy", "numba", "tifffile", "imagecodecs", "pillow", "click"])},
        "runs": runs, "worker_counts": worker_counts,
    }
    warm_page_cache(data)
    results["inflaters"] = fastest_inflaters(data, env)
    codecs = {layout: found["fastest"] for layout, found in results["inflaters"].items()}
    print(f"{workload}: fastest inflater " + ", ".join(
        f"{layout} {found['fastest']} (" + ", ".join(f"{c} {ms:.2f}" for c, ms in found["ms_per_image"].items())
        + " ms/img)" for layout, found in results["inflaters"].items()), file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="sgeval-bench-") as scratch:
        output = Path(scratch)
        gt_cache = output / "gt-prepared"
        # untimed: fills the JIT cache beside sgeval.py and prepares the GT, so that no timed run
        # compiles and the prepared rows find every image prepared
        results["warm_up_wall_s"] = {tool: measure(commands(data, sgbench_python, 1, output, gt_cache=gt_cache)[tool],
                                                   env)["wall_s"] for tool in ("c", "b")}
        results["gt_cache"] = {"prepared_entries": gt_entries(gt_cache),
                               "prepared_mib": sum(p.stat().st_size for p in gt_cache.glob("*.gtp")) / 2**20}
        results["gt_read"] = read_prepared(data, gt_cache, env)
        if startup is None:
            startup = {**measure_startup(env), "measured_on": workload}
            results["startup_here"] = True
        results["startup"] = startup

        samples = {(w, tool): [] for w in worker_counts for tool in TOOLS}
        jit_samples = {"c": [], "b": []}
        outputs = {}
        for run in range(1, runs + 1):
            for workers in worker_counts:
                for tool in run_order(run):
                    cold = Path(tempfile.mkdtemp(prefix="gt-cold-", dir=scratch)) if tool.endswith(" cold") else None
                    command = commands(data, sgbench_python, workers, output, codecs, gt_cache, cold)[tool]
                    version = sgeval_sha256() if tool in SGEVAL_TOOLS else None  # sgeval.py may be edited meanwhile
                    sample = measure(command, env)
                    if version:
                        sample["sgeval_sha256"] = version
                        sample["gt_entries"] = gt_entries(cold or gt_cache)
                    if cold:
                        shutil.rmtree(cold)
                    samples[workers, tool].append(sample)
                    state = "" if sample["returncode"] == 0 else f"  FAILED (exit {sample['returncode']})"
                    print(f"{workload} run {run}/{runs}  W={workers}  {'(' + tool + ')':<8} {TOOLS[tool]:<30} "
                          f"{sample['wall_s']:7.2f} s  load {sample['load_1min'][0]:.1f}{state}", file=sys.stderr)
                    if sample["returncode"] != 0:
                        print(sample["stderr"][-2000:], file=sys.stderr)
                    elif run == 1 and tool in SGEVAL_TOOLS:
                        name = f"{tool.replace(' ', '-')}{workers}.json"
                        outputs[workers, tool] = json.loads((output / name).read_text())
                    elif run == 1 and tool == "a":
                        outputs[workers, tool] = parse_sgbench(sample["stdout"])
                if workers == 1 and results.get("startup_here"):
                    for tool in jit_samples:
                        sample = measure_jit_cold(commands(data, sgbench_python, 1, output, codecs, gt_cache)[tool],
                                                  env)
                        jit_samples[tool].append(sample)
                        print(f"{workload} run {run}/{runs}  W=1  ({tool}) with an empty JIT cache "
                              f"{sample['wall_s']:7.2f} s ({sample['cache_files_written']} cache files written)",
                              file=sys.stderr)
        results["gt_cache"]["prepared_entries_at_end"] = gt_entries(gt_cache)

    results["load_average"].append(os.getloadavg()[0])
    results["source_at_end"] = source_state()
    results["measurements"] = {f"W={w} ({tool})": summarise(samples[w, tool], n_images)
                               for w in worker_counts for tool in TOOLS}
    results["floor_codecs"] = codecs
    if results.get("startup_here"):
        for tool, found in jit_samples.items():
            cold = summarise(found, n_images) if found else {}
            warm = results["measurements"].get(f"W=1 ({tool})", {}).get("wall_s")
            if "wall_s" in cold and warm is not None:
                cold.update(warm_median_wall_s=warm, added_s=cold["wall_s"] - warm,
                            cache_files_written=sorted({s["cache_files_written"] for s in found}),
                            walls_s=[s["wall_s"] for s in found])
            startup["jit_cold"][tool] = cold
    results["ratios"] = {f"({x})/({y})": {f"W={w}": _ratio(results, w, x, y) for w in worker_counts}
                         for x, y, _, _ in ratios(workload)}
    results["cpu_ratios"] = {f"({x})/({y})": {f"W={w}": _ratio(results, w, x, y, "cpu_s") for w in worker_counts}
                             for x, y, _, _ in ratios(workload)}
    results["checks"] = checks(outputs, worker_counts)
    first = outputs.get((worker_counts[0], "c")) or outputs.get((worker_counts[0], "b"))
    results["metrics"] = {"sgeval (unique protocol)": first["metrics"] if first else None,
                          "sgeval protocol audit (per image mean)":
                              (first.get("protocol_audit") or {}).get("per_image_mean") if first else None,
                          "sgbench": outputs.get((worker_counts[0], "a"))}
    return results, startup


def _ratio(results, workers, x, y, key="wall_s"):
    top = results["measurements"][f"W={workers} ({x})"].get(key)
    bottom = results["measurements"][f"W={workers} ({y})"].get(key)
    return top / bottom if top and bottom else None


def checks(outputs, worker_counts):
    """sgeval's metrics must not depend on the layout or the number of workers."""
    found = {}
    reference = outputs.get((worker_counts[0], "b"))
    for (workers, tool), result in sorted(outputs.items()):
        if tool in SGEVAL_TOOLS and reference is not None and (workers, tool) != (worker_counts[0], "b"):
            found[f"W={workers} ({tool}) == W={worker_counts[0]} (b)"] = _without_pq(result) == _without_pq(reference)
    return found


PQ_KEYS = ("PQ", "SQ", "RQ", "PQ_th", "SQ_th", "RQ_th", "PQ_st", "SQ_st", "RQ_st")  # sgeval.PQ_KEYS (stdlib only here)


def _without_pq(result):
    """A run's metrics without panoptic quality's keys (row p adds them)."""
    return {key: value for key, value in result["metrics"].items() if key not in PQ_KEYS}


# ----------------------------------------------------------------------------- report


def _verdict(ok):
    return "n/a" if ok is None else "ok" if ok else "MISSED"


def describe_statistics(stamp):
    """The workload's predicted-mask statistics (bench/make_workload.py's summarise_statistics)."""
    s = stamp.get("statistics")
    if not s:
        return "no mask statistics in the stamp"
    m = s["per_image_mean"]
    return (f"predicted masks per image: {m['pairs_iou_ge_0.5']:.1f} pairs with IoU >= 0.5, "
            f"{m['pairs_iou_0.3_0.5']:.1f} in [0.3, 0.5), {m['pairs_candidates_0.5']:.1f} whose areas and boxes allow "
            f"IoU >= 0.5, {m['pairs_overlapping']:.1f} overlapping; mean mask {s['mask_area_percent']:.1f} % of the image, mean GT segment "
            f"{s['gt_segment_area_percent']:.1f} % ({m['gt_segments']:.1f} per image), {m['triplets']:.0f} triplets")


def report(results):
    m, workload = results["machine"], results["workload"]
    params = workload["params"]
    name = results["workload_name"]
    loads = [s["load_1min"] for s in results["measurements"].values() if "load_1min" in s]
    lines = [
        (f"== workload {name}: {params['n_images']} evaluated images (+{params['n_no_relations']} test images "
         f"without relations, {params['n_train']} training entries), {params['width']}x{params['height']}, "
         f"{params['n_masks']} masks and ~{params['n_triplets']} triplets per image"),
        describe_statistics(workload),
        f"workload {workload['dir']}: generated in {workload['generation']['seconds']:.0f} s with "
        f"{workload['generation']['workers']} processes" + (" (cached)" if workload["generated_now_s"] is None else "")
        + "; " + ", ".join(f"{file} {size:.1f} MiB" for file, size in workload["sizes_mib"].items())
        + f", panoptic PNGs {workload['panoptic_mib']:.1f} MiB",
        f"machine: {m['cpu_model']}, nproc {m['nproc']} ({m['cpus_usable']} usable), {m['memory_gib']} GiB, "
        f"Python {m['python']}; {m['date']}; OPENBLAS_CORETYPE "
        + (f"set ({m['OPENBLAS_CORETYPE']})" if m["OPENBLAS_CORETYPE"] is not None else "not set"),
        f"load average (1 min): {results['load_average'][0]:.2f} at start, {results['load_average'][-1]:.2f} at end"
        + (f", {min(loads):.2f}-{max(loads):.2f} (row medians) at the rows' starts" if loads else "")
        + f" on {m['nproc']} CPUs" + ("  -- measured under load" if loads and max(loads) > 0.5 * m["nproc"] else ""),
        f"sgeval.py {results['source_at_start']['sgeval_sha256']} (HEAD {results['source_at_start']['git_head']}"
        + (", modified" if results["source_at_start"]["sgeval_modified"] else "") + ")"
        + ("" if results["source_at_start"]["sgeval_sha256"] == results["source_at_end"]["sgeval_sha256"]
           else f" -- CHANGED during the run, now {results['source_at_end']['sgeval_sha256']}"),
        "versions: sgbench venv " + ", ".join(f"{k} {v}" for k, v in results["versions"]["sgbench_venv"].items())
        + "; sgeval venv " + ", ".join(f"{k} {v}" for k, v in results["versions"]["sgeval_venv"].items()),
        "library floor inflater (fastest of "
        + "; ".join(f"{layout}: " + ", ".join(f"{c} {ms:.2f}" for c, ms in found["ms_per_image"].items())
                    + " ms/img" for layout, found in results["inflaters"].items())
        + "): " + ", ".join(f"{layout} {codec}" for layout, codec in results["floor_codecs"].items()),
        gt_cache_line(results),
        "",
        (f"median of {results['runs']} runs{'':<37}wall s  spread   cpu s  other  load  ms/img  maxRSS MiB  main RSS"
         "  tree RSS  tree PSS"),
    ]
    for w in results["worker_counts"]:
        for tool, label_text in TOOLS.items():
            s = results["measurements"][f"W={w} ({tool})"]
            label = f"{'W=' + str(w) if tool == 'a' else '':<4} {'(' + tool + ')':<8} {label_text:<30}"
            if "wall_s" not in s:
                lines.append(f"{label}  FAILED: {s['stderr'].strip().splitlines()[-1] if s['stderr'].strip() else ''}")
                continue
            spread = 100 * (s["wall_max_s"] - s["wall_min_s"]) / s["wall_s"]
            lines.append(f"{label} {s['wall_s']:8.2f} {spread:6.0f}% {s['cpu_s']:7.2f} {s['other_cpu_s']:6.2f} "
                         f"{s.get('load_1min', float('nan')):5.1f} {s['ms_per_image']:7.1f} {s['max_rss_mib']:11.0f} "
                         f"{s['main_rss_mib']:9.0f} {s['tree_rss_mib']:9.0f} {s['tree_pss_mib']:9.0f}")
    mixed = [key for key, s in results["measurements"].items() if len(s.get("sgeval_versions", ())) > 1]
    if mixed:
        lines.append("warning: sgeval.py changed between runs of " + ", ".join(mixed) + "; their medians mix versions")
    cpu_ratios = results.get("cpu_ratios", {})
    lines += ["", "ratios of median wall time      " + "".join(f"{'W=' + str(w):>8}" for w in results["worker_counts"])
              + f"   {'target':<40}{'CPU time, no target:':<22}" + "".join(
                  f"{'W=' + str(w):>6}" for w in results["worker_counts"])]
    for x, y, target, test in ratios(name):
        values = results["ratios"][f"({x})/({y})"]
        at_target = values.get(f"W={TARGET_W}")
        verdict = f"  {_verdict(test(at_target) if at_target is not None else None)}" if test else ""
        cpu = cpu_ratios.get(f"({x})/({y})", {})
        lines.append(f"{'(' + x + ')/(' + y + ')':<32}" + "".join(
            f"{values[f'W={w}']:8.2f}" if values[f"W={w}"] else f"{'n/a':>8}" for w in results["worker_counts"])
            + f"   {target + verdict:<40}" + " " * 22 + "".join(
                f"{cpu[f'W={w}']:6.2f}" if cpu.get(f"W={w}") else f"{'n/a':>6}" for w in results["worker_counts"]))
    lines.append("")
    lines += startup_lines(results["startup"], here=results.get("startup_here", False))
    if results["checks"]:
        same = all(results["checks"].values())
        lines.append("sgeval metrics identical for all layouts, GT prepared or cold, and all worker counts: "
                     + ("yes" if same else "NO: " + ", ".join(k for k, v in results["checks"].items() if not v)))
    return "\n".join(lines)


def gt_cache_line(results):
    """How many GT images the prepared folder held, and what the cold rows wrote."""
    found = results.get("gt_cache")
    if not found:
        return "GT cache: not recorded"
    n_images = results["workload"]["params"]["n_images"]
    written = sorted({n for key, s in results["measurements"].items() if "cold" in key for n in s.get("gt_entries", ())})
    return (f"GT cache: the prepared folder held {found['prepared_entries']} entries ({found['prepared_mib']:.1f} MiB) "
            f"before the timed runs and {found.get('prepared_entries_at_end', '?')} after; each cold row started with "
            f"an empty folder and left {', '.join(map(str, written)) or '?'} entries ({n_images} evaluated images)")


def startup_lines(startup, here=True):
    where = "" if here else f" (measured on the {startup.get('measured_on')} workload)"
    lines = [(f"sgeval --help: {startup['help_wall_s']:.2f} s wall (median of 5; {startup.get('help_command', '?')}, "
              f"imports {startup.get('help_imports', '?')}; target < {HELP_TARGET_S:g} s)  "
              f"{_verdict(startup['help_wall_s'] < HELP_TARGET_S)}{where}")]
    imported = startup.get("import")
    if imported:
        ok = not imported.get("failed") and not imported.get("numba_imported") and not imported["cache_files_written"]
        lines.append(f"import sgeval with an empty JIT cache: numba imported: "
                     f"{'yes' if imported.get('numba_imported') else 'no'}, {imported['cache_files_written']} cache files "
                     f"written, {imported['wall_s']:.2f} s (target: compiles nothing)  {_verdict(ok)}{where}")
    for tool, jit in startup["jit_cold"].items():
        if "added_s" in jit:
            lines.append(f"empty JIT cache ({'/'.join(map(str, jit['cache_files_written']))} cache files written): "
                         f"({tool}) W=1, median of {jit['runs']} cold runs {jit['wall_s']:.2f} s vs warm median "
                         f"{jit['warm_median_wall_s']:.2f} s: {jit['added_s']:+.2f} s (target <= {JIT_TARGET_S:g} s)  "
                         f"{_verdict(jit['added_s'] <= JIT_TARGET_S)}{where}")
            if not min(jit["cache_files_written"]):
                lines.append("  warning: nothing was cached in NUMBA_CACHE_DIR: was the cache really empty?")
        elif jit:
            lines.append(f"empty JIT cache: the ({tool}) runs failed or had no warm W=1 median to compare with")
    return lines


def _load_results(workload):
    """{n_images: saved results} of every results file of a workload."""
    found = {}
    for path in (BENCH / "results").glob("*.json"):
        stem = path.stem
        name, _, size = stem.rpartition("-") if "-" in stem else ("default", "", stem)
        if name == workload and size.isdigit():
            found[int(size)] = json.loads(path.read_text())
    return dict(sorted(found.items()))


def memory_scaling(workload):
    """Peak memory per workload size, from every results file of the workload present."""
    saved_by_size = _load_results(workload)
    if not saved_by_size:
        return ""
    keys = ("W=1 (a)", "W=1 (b)", "W=1 (c)", "W=1 (g)", "W=2 (b)", "W=2 (c)", "W=2 (g)", "W=2 (c cold)")
    lines = [(f"peak memory of the {workload} workload in MiB per results file: maxRSS for W=1; "
              "main-process RSS / tree PSS for W=2"),
             "              " + "".join(f"{key:>14}" for key in keys)]
    for n_images, saved in saved_by_size.items():
        cells = []
        for key in keys:
            s = saved["measurements"].get(key, {})
            if "max_rss_mib" not in s:
                cells.append("-")
            elif key.startswith("W=1"):
                cells.append(f"{s['max_rss_mib']:.0f}")
            else:
                main = f"{s['main_rss_mib']:.0f}" if "main_rss_mib" in s else "?"
                cells.append(f"{main}/{s['tree_pss_mib']:.0f}")
        lines.append(f"{n_images:>6} images" + "".join(f"{c:>14}" for c in cells) + f"   ({saved['machine']['date']})")
    return "\n".join(lines)


def main_rss_lines(workload):
    """The main-process peak RSS target: <= 300 MiB at W=2 on the largest file, flat from the
    200-image one (the smallest when there is none); for every sgeval row, GT prepared and cold."""
    saved_by_size = _load_results(workload)
    lines = []
    sizes = list(saved_by_size)
    for tool in ("b", "c", "g", "b cold", "c cold", "g cold"):
        peaks = {n: saved_by_size[n]["measurements"].get(f"W={TARGET_W} ({tool})", {}).get("main_rss_mib")
                 for n in sizes}
        peaks = {n: v for n, v in peaks.items() if v}
        if not peaks:
            continue
        largest = max(peaks)
        text = (f"{workload}: main-process peak RSS W={TARGET_W} ({tool}) {peaks[largest]:.0f} MiB at {largest} images "
                f"(target <= {MAIN_RSS_TARGET_MIB:g})  {_verdict(peaks[largest] <= MAIN_RSS_TARGET_MIB)}")
        smallest = QUICK_IMAGES if QUICK_IMAGES in peaks else min(peaks)  # "flat from 200 images"
        if smallest != largest:
            growth = peaks[largest] / peaks[smallest] - 1
            text += (f"; {peaks[smallest]:.0f} MiB at {smallest}: {100 * growth:+.0f} % "
                     f"(flat: within {100 * FLAT_TOLERANCE:.0f} %)  {_verdict(growth <= FLAT_TOLERANCE)}")
        lines.append(text)
    return lines


def loop_workload(workloads):
    """The workload bench/loop.py measures: the overlap one (PSG scale: 100 masks, ~350 triplets
    per image) when it is measured, else the first."""
    return "overlap" if "overlap" in workloads else workloads[0]


def loop_command(data, runs):
    return [sys.executable, "-m", "bench.loop", "--data", str(data), "--runs", str(runs)]


def loop_results_path(workload, n_images):
    """Where bench/loop.py writes its results: loop-<n>.json on the overlap workload, else
    loop-<workload>-<n>.json."""
    return BENCH / "results" / (f"loop-{n_images}.json" if workload == "overlap" else f"loop-{workload}-{n_images}.json")


GT_READ_TARGET_MS = 0.3  # issue 30, item 1: reading a prepared image at 640x480 with ~15 segments
LOOP_TARGET = 1.0  # issue 30, item 5: update's per-image cost <= the file path's minus the floor's


def _value(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def _target_kind(x, y):
    return "floor" if y in ("d", "e", "h") else "speed-up" if x == "a" else "other"


def targets_summary(all_results, loop_results=None):
    """Every target once more, numbered as issue 30's items, with ok / MISSED."""
    lines = [f"== targets (issue 30's items and the earlier ones kept; ratios at W={TARGET_W}, medians)"]
    for results in all_results:
        read = results.get("gt_read") or {}
        if "prepared" in read:
            median = read["prepared"]["median_ms"]
            lines.append(f"(1) {results['workload_name']}: reading a prepared GT image {median:.3f} ms median "
                         f"({read['prepared']['mean_ms']:.3f} mean; {read['segments_mean']:.1f} segments; decoding "
                         f"it {read['decoded']['median_ms']:.2f} ms) (target <= {GT_READ_TARGET_MS:g} ms)  "
                         f"{_verdict(median <= GT_READ_TARGET_MS)}")
    for item, kind in (("(2)", "floor"), ("(3)", "speed-up"), ("   ", "other")):
        for results in all_results:
            name, values = results["workload_name"], results["ratios"]
            for x, y, target, test in ratios(name):
                if test is None or _target_kind(x, y) != kind:
                    continue
                value = values[f"({x})/({y})"].get(f"W={TARGET_W}")
                cold_key = f"({x})/({y} cold)" if x == "a" else f"({x} cold)/({y})"
                beside = values.get(cold_key, {}).get(f"W={TARGET_W}")
                lines.append(f"{item} {name}: ({x})/({y}) {_value(value)}"
                             + (f" (GT cold: {_value(beside)})" if beside is not None else "")
                             + f" (target {target})  {_verdict(test(value) if value is not None else None)}")
    startup = next((r["startup"] for r in all_results if r.get("startup_here")), None)
    if startup:
        lines += ["(4) " + line for line in startup_lines(startup)]
    if loop_results:
        for name, config in loop_results.get("configs", {}).items():
            for clock in ("wall", "cpu"):
                row = config[clock]
                ratio = row["update_over_file_minus_floor"]
                lines.append(f"(5) {loop_results['workload']['dir']}, {name} config, {clock}: update + evaluation mean "
                             f"{row['evaluated_ms_mean']:.2f} ms / (file path {row['file_ms_per_image']:.2f} - floor "
                             f"{loop_results['floor'][clock]['ms_per_image']:.2f} ms) = {_value(ratio)} (marginal: "
                             f"{_value(row['update_over_file_minus_floor_marginal'])}) (target <= {LOOP_TARGET:g})  "
                             f"{_verdict(ratio <= LOOP_TARGET if ratio is not None else None)}")
            cpu = config.get("packed_update_cpu_ms")
            if cpu is not None:
                lines.append(f"(5) {loop_results['workload']['dir']}, {name} config: update in the caller's thread, "
                             f"masks as PackedMasks, median CPU {cpu:.2f} ms (target <= {PACKED_UPDATE_TARGET_MS:g} "
                             f"ms, issue 39)  {_verdict(cpu <= PACKED_UPDATE_TARGET_MS)}")
    for workload in dict.fromkeys(r["workload_name"] for r in all_results):
        lines += ["(6) " + line for line in main_rss_lines(workload)]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--images", type=int, default=FULL_IMAGES, help=f"evaluated images (default {FULL_IMAGES})")
    size.add_argument("--quick", action="store_true", help=f"{QUICK_IMAGES} images, for development")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per command (median; default 3)")
    parser.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    parser.add_argument("--workload", choices=list(WORKLOAD_CHOICES), default="all",
                        help="default, overlap (the overlap-heavy predictions), blob (issue 30's), both (default and "
                             "overlap) or all (default)")
    parser.add_argument("--generation-workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--loop", action=argparse.BooleanOptionalAction, default=True,
                        help="then run bench/loop.py (Evaluator.update in a test loop) on the overlap workload")
    args = parser.parse_args()
    n_images = QUICK_IMAGES if args.quick else args.images
    worker_counts = [int(w) for w in args.workers.split(",")]
    workloads = WORKLOAD_CHOICES[args.workload]

    prepared = {workload: prepare_workload(workload, n_images, args.generation_workers) for workload in workloads}
    sgbench_python = ensure_sgbench_venv()
    env = {key: value for key, value in os.environ.items() if key not in ("SGEVAL_NO_JIT_CACHE", "SGEVAL_GT_CACHE")}
    startup, texts, written, all_results = None, [], [], []
    for workload in workloads:
        results, startup = run_benchmark(workload, prepared[workload], sgbench_python, max(1, args.runs),
                                         worker_counts, env, startup)
        text = report(results)
        results["report"] = text
        out = results_path(workload, n_images)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        texts.append(text)
        written.append(out)
        all_results.append(results)
        print(text + "\n", flush=True)
    for workload in workloads:
        print(memory_scaling(workload) + "\n")
    print("results written to " + ", ".join(str(path.relative_to(ROOT)) for path in written))
    loop_results = None
    if args.loop:
        workload = loop_workload(workloads)
        print(f"\nin the test loop (bench/loop.py), {workload} workload:\n", flush=True)
        subprocess.run(loop_command(prepared[workload][0], max(1, args.runs)), cwd=ROOT, env=env, check=True)
        loop_results = json.loads(loop_results_path(workload, n_images).read_text())
    summary = targets_summary(all_results, loop_results)
    if n_images != FULL_IMAGES:
        summary.append(f"(the targets are for {FULL_IMAGES} images; this run has {n_images})")
    print("\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
