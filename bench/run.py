"""``make bench``: time sgeval against SGBench 1.0 and the decode floor on a PSG-scale workload.

    python bench/run.py [--images 2177 | --quick] [--runs 3] [--workers 1,2]

1. Generates the workload once (``bench/make_workload.py``, cached under ``bench/data/<n>/``).
2. Creates ``bench/.venv-sgbench`` once (``pip install 'sgbench[all]==1.0.0'``: its own numpy<2).
3. Measures ``--help`` (median of 5) and a first sgeval run with an empty JIT cache, (c) then (b).
4. For every run and worker count, runs as child processes, interleaved:
   (a) ``python -m sgbench psg.json sgbench.zip --gt-masks panoptic --workers W'`` (W' = 0, i.e.
       in-process, for W = 1; a Pool of W otherwise),
   (b) ``sgeval.py --pred sgbench.zip --workers W``, (c) ``sgeval.py --pred compact.zip ...``,
   (d) ``decode_floor.py --pred sgbench.zip --workers W`` (zlib-ng, PNG image data inflated only),
   (e) the same on compact.zip, (f) (c) with ``--no-audit``, (g) the floor on sgbench.zip as the
   issue first measured it (libdeflate, PNGs decoded by PIL);
   and reports medians of wall and CPU time, ms per evaluated image and memory (see
   ``bench/README.md`` for what the memory columns mean).
5. Prints the table and the ratios, and writes everything to ``bench/results/<n>.json``.

sgeval.py is used only through its command line, and this script imports nothing but the standard
library: the children it measures are spawned from a small process, whose size cannot leak into
their peak RSS (Linux counts the pre-exec memory of a spawned child in its ru_maxrss).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
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
TOOLS = {
    "a": "sgbench 1.0.0, sgbench.zip",
    "b": "sgeval, sgbench.zip",
    "c": "sgeval, compact.zip",
    "d": "decode floor, sgbench.zip",
    "e": "decode floor, compact.zip",
    "f": "sgeval --no-audit, compact.zip",
    "g": "old floor, sgbench.zip",
}
RATIOS = [("a", "b", ">= 2.0 at W=2"), ("a", "c", ">= 10"), ("b", "d", "<= 1.3"), ("c", "e", "(no target)"),
          ("a", "f", "(no target)"), ("b", "g", "(the floor as first measured)")]


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


class TreeSampler(threading.Thread):
    """Samples the summed RSS and PSS of a process tree every `interval` seconds; keeps the peaks."""

    def __init__(self, pid, interval=0.1):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_rss_kib = self.peak_pss_kib = self.peak_processes = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            pids = _tree(self.pid)
            rss, pss = (sum(values) for values in zip(*map(_rss_pss_kib, pids)))
            self.peak_rss_kib, self.peak_pss_kib = max(self.peak_rss_kib, rss), max(self.peak_pss_kib, pss)
            self.peak_processes = max(self.peak_processes, len(pids))
            self.done.wait(self.interval)


def busy_cpu_s():
    """CPU time the whole machine spent busy so far (all CPUs; /proc/stat, steal included)."""
    with open("/proc/stat") as handle:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, handle.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(command, env):
    """Run a command; wall time, CPU time and peak memory of it and its (reaped) descendants, and
    the CPU time the rest of the machine used meanwhile (other processes, this script's sampler)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy_before = busy_cpu_s()
        start = time.perf_counter()
        process = subprocess.Popen([str(part) for part in command], stdout=out, stderr=err, env=env)
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
            "tree_rss_mib": sampler.peak_rss_kib / 1024, "tree_pss_mib": sampler.peak_pss_kib / 1024,
            "processes": sampler.peak_processes, "returncode": process.returncode,
            "stdout": stdout, "stderr": stderr}


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
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    return {"git_head": git("rev-parse", "--short", "HEAD"),
            "sgeval_modified": bool(git("status", "--porcelain", "--", "sgeval.py")),
            "sgeval_sha256": sgeval_sha256()}


def sgeval_sha256():
    return hashlib.sha256(SGEVAL.read_bytes()).hexdigest()[:16]


def warm_page_cache(data):
    for path in [data / "psg.json", data / "sgbench.zip", data / "compact.zip", *sorted((data / "panoptic").iterdir())]:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


def jit_cache_files():
    cache = SGEVAL.parent / "__pycache__"
    return sorted(cache.glob("sgeval*.nbi")) + sorted(cache.glob("sgeval*.nbc"))


# ----------------------------------------------------------------------------- the benchmark


def commands(data, sgbench_python, workers, output):
    """The measured commands for one worker count."""
    psg, panoptic = data / "psg.json", data / "panoptic"
    sgeval = [sys.executable, SGEVAL, "--gt", psg, "--gt-seg", panoptic, "--workers", workers, "--quiet"]
    floor = [sys.executable, BENCH / "decode_floor.py", "--gt", psg, "--gt-seg", panoptic, "--workers", workers]
    return {
        "a": [sgbench_python, "-m", "sgbench", psg, data / "sgbench.zip", "--gt-masks", panoptic,
              "--workers", 0 if workers == 1 else workers],
        "b": sgeval + ["--pred", data / "sgbench.zip", "--output", output / f"b{workers}.json"],
        "c": sgeval + ["--pred", data / "compact.zip", "--output", output / f"c{workers}.json"],
        "d": floor + ["--pred", data / "sgbench.zip"],
        "e": floor + ["--pred", data / "compact.zip"],
        "f": sgeval + ["--pred", data / "compact.zip", "--no-audit", "--output", output / f"f{workers}.json"],
        "g": floor + ["--pred", data / "sgbench.zip", "--codec", "libdeflate", "--png", "pil"],
    }


def run_order(run):
    """The order of the commands in one run: each sgeval row next to its floor ((b) with (d), (c)
    with (e)), the two swapped every other run so that a drift of the machine's speed during a run
    biases neither; SGBench, by far the longest, last."""
    pairs = [("b", "d"), ("c", "e")] if run % 2 else [("d", "b"), ("e", "c")]
    return [tool for pair in pairs for tool in pair] + ["f", "g", "a"]


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
    return {"runs": len(ok), "failed": len(samples) - len(ok), "wall_s": wall, "wall_min_s": min(walls),
            "wall_max_s": max(walls), "cpu_s": statistics.median(s["cpu_s"] for s in ok),
            "other_cpu_s": statistics.median(s["other_cpu_s"] for s in ok),
            "ms_per_image": 1000 * wall / n_images, "max_rss_mib": max(s["max_rss_mib"] for s in ok),
            "tree_rss_mib": max(s["tree_rss_mib"] for s in ok), "tree_pss_mib": max(s["tree_pss_mib"] for s in ok),
            "processes": max(s["processes"] for s in ok),
            "sgeval_versions": sorted({s["sgeval_sha256"] for s in ok if "sgeval_sha256" in s})}


def run_benchmark(n_images, runs, worker_counts, generation_workers):
    data = BENCH / "data" / str(n_images)
    stamp_path = data / "stamp.json"
    before = stamp_path.stat().st_mtime_ns if stamp_path.exists() else None
    subprocess.run([sys.executable, BENCH / "make_workload.py", "--images", str(n_images), "--out", data,
                    "--workers", str(generation_workers)], check=True)
    stamp = json.loads(stamp_path.read_text())
    generated_s = None if stamp_path.stat().st_mtime_ns == before else stamp["generation"]["seconds"]
    sgbench_python = ensure_sgbench_venv()
    env = {key: value for key, value in os.environ.items() if key != "SGEVAL_NO_JIT_CACHE"}
    results = {
        "machine": machine(), "source_at_start": source_state(),
        "workload": {**stamp, "dir": str(data.relative_to(ROOT)), "generated_now_s": generated_s,
                     "sizes_mib": {name: (data / name).stat().st_size / 2**20
                                   for name in ("psg.json", "sgbench.zip", "compact.zip")},
                     "panoptic_mib": sum(p.stat().st_size for p in (data / "panoptic").iterdir()) / 2**20},
        "versions": {"sgbench_venv": pip_versions(sgbench_python, ["sgbench", "numpy", "tifffile", "imagecodecs", "pillow"]),
                     "sgeval_venv": pip_versions(sys.executable, ["numpy", "numba", "tifffile", "imagecodecs", "pillow", "click"])},
        "runs": runs, "worker_counts": worker_counts,
    }
    warm_page_cache(data)

    with tempfile.TemporaryDirectory(prefix="sgeval-bench-") as scratch:
        output = Path(scratch)
        help_walls = [measure([sys.executable, SGEVAL, "--help"], env)["wall_s"] for _ in range(5)]
        results["help_wall_s"] = statistics.median(help_walls)
        # a first run with an empty JIT cache, on each layout (they compile different kernels:
        # uint8 pages need the run decoder, 1-bit pages do not)
        results["jit_cold"] = {}
        for tool in ("c", "b"):
            removed = jit_cache_files()
            for path in removed:
                path.unlink(missing_ok=True)
            cold = measure(commands(data, sgbench_python, 1, output)[tool], env)
            results["jit_cold"][tool] = {"removed_cache_files": len(removed), "wall_s": cold["wall_s"],
                                         "cpu_s": cold["cpu_s"], "returncode": cold["returncode"],
                                         "cache_files_after": len(jit_cache_files())}
            print(f"first ({tool}) W=1 run with an empty JIT cache ({len(removed)} files removed) "
                  f"{cold['wall_s']:.1f} s", file=sys.stderr)
        print(f"sgeval --help {results['help_wall_s']:.2f} s", file=sys.stderr)

        samples = {(w, tool): [] for w in worker_counts for tool in TOOLS}
        outputs = {}
        for run in range(1, runs + 1):
            for workers in worker_counts:
                todo = commands(data, sgbench_python, workers, output)
                for tool in run_order(run):
                    command = todo[tool]
                    version = sgeval_sha256() if tool in "bcf" else None  # sgeval.py may be edited meanwhile
                    sample = measure(command, env)
                    if version:
                        sample["sgeval_sha256"] = version
                    samples[workers, tool].append(sample)
                    state = "" if sample["returncode"] == 0 else f"  FAILED (exit {sample['returncode']})"
                    print(f"run {run}/{runs}  W={workers}  ({tool}) {TOOLS[tool]:<30} {sample['wall_s']:7.2f} s"
                          f"{state}", file=sys.stderr)
                    if sample["returncode"] != 0:
                        print(sample["stderr"][-2000:], file=sys.stderr)
                    elif run == 1 and tool in "bcf":
                        outputs[workers, tool] = json.loads((output / f"{tool}{workers}.json").read_text())
                    elif run == 1 and tool == "a":
                        outputs[workers, tool] = parse_sgbench(sample["stdout"])

    results["source_at_end"] = source_state()
    results["measurements"] = {f"W={w} ({tool})": summarise(samples[w, tool], n_images)
                               for w in worker_counts for tool in TOOLS}
    for tool, cold in results["jit_cold"].items():
        warm = results["measurements"].get(f"W=1 ({tool})", {}).get("wall_s")
        if warm is not None and cold["returncode"] == 0:
            cold["warm_median_wall_s"] = warm
            cold["added_s"] = cold["wall_s"] - warm
    results["ratios"] = {f"({x})/({y})": {f"W={w}": _ratio(results, w, x, y) for w in worker_counts}
                         for x, y, _ in RATIOS}
    results["checks"] = checks(outputs, worker_counts)
    first = outputs.get((worker_counts[0], "c")) or outputs.get((worker_counts[0], "b"))
    results["metrics"] = {"sgeval (unique protocol)": first["metrics"] if first else None,
                          "sgbench": outputs.get((worker_counts[0], "a"))}
    return results


def _ratio(results, workers, x, y):
    top = results["measurements"][f"W={workers} ({x})"].get("wall_s")
    bottom = results["measurements"][f"W={workers} ({y})"].get("wall_s")
    return top / bottom if top and bottom else None


def checks(outputs, worker_counts):
    """sgeval's metrics must not depend on the layout or the number of workers."""
    found = {}
    reference = outputs.get((worker_counts[0], "b"))
    for (workers, tool), result in sorted(outputs.items()):
        if tool in "bcf" and reference is not None and (workers, tool) != (worker_counts[0], "b"):
            found[f"W={workers} ({tool}) == W={worker_counts[0]} (b)"] = result["metrics"] == reference["metrics"]
    return found


# ----------------------------------------------------------------------------- report


def report(results):
    m, workload = results["machine"], results["workload"]
    params = workload["params"]
    lines = [
        f"sgeval bench: {params['n_images']} evaluated images (+{params['n_no_relations']} test images without "
        f"relations, {params['n_train']} training entries), {params['width']}x{params['height']}, "
        f"{params['n_masks']} masks and {params['n_triplets']} triplets per image",
        f"workload {workload['dir']}: generated in {workload['generation']['seconds']:.0f} s with "
        f"{workload['generation']['workers']} processes" + (" (cached)" if workload["generated_now_s"] is None else "")
        + "; " + ", ".join(f"{name} {size:.1f} MiB" for name, size in workload["sizes_mib"].items())
        + f", panoptic PNGs {workload['panoptic_mib']:.1f} MiB",
        f"machine: {m['cpu_model']}, nproc {m['nproc']} ({m['cpus_usable']} usable), {m['memory_gib']} GiB, "
        f"Python {m['python']}; {m['date']}; OPENBLAS_CORETYPE "
        + (f"set ({m['OPENBLAS_CORETYPE']})" if m["OPENBLAS_CORETYPE"] is not None else "not set"),
        f"sgeval.py {results['source_at_start']['sgeval_sha256']} (HEAD {results['source_at_start']['git_head']}"
        + (", modified" if results["source_at_start"]["sgeval_modified"] else "") + ")"
        + ("" if results["source_at_start"]["sgeval_sha256"] == results["source_at_end"]["sgeval_sha256"]
           else f" -- CHANGED during the run, now {results['source_at_end']['sgeval_sha256']}"),
        "versions: sgbench venv " + ", ".join(f"{k} {v}" for k, v in results["versions"]["sgbench_venv"].items())
        + "; sgeval venv " + ", ".join(f"{k} {v}" for k, v in results["versions"]["sgeval_venv"].items()),
        "",
        f"median of {results['runs']} runs{'':<29}wall s  spread   cpu s  other  ms/img  maxRSS MiB  tree RSS  tree PSS",
    ]
    for w in results["worker_counts"]:
        for tool, name in TOOLS.items():
            s = results["measurements"][f"W={w} ({tool})"]
            label = f"{'W=' + str(w) if tool == 'a' else '':<4} ({tool}) {name:<30}"
            if "wall_s" not in s:
                lines.append(f"{label}  FAILED: {s['stderr'].strip().splitlines()[-1] if s['stderr'].strip() else ''}")
                continue
            spread = 100 * (s["wall_max_s"] - s["wall_min_s"]) / s["wall_s"]
            lines.append(f"{label} {s['wall_s']:8.2f} {spread:6.0f}% {s['cpu_s']:7.2f} {s['other_cpu_s']:6.2f} "
                         f"{s['ms_per_image']:7.1f} "
                         f"{s['max_rss_mib']:11.0f} {s['tree_rss_mib']:9.0f} {s['tree_pss_mib']:9.0f}")
    mixed = [key for key, s in results["measurements"].items() if len(s.get("sgeval_versions", ())) > 1]
    if mixed:
        lines.append("warning: sgeval.py changed between runs of " + ", ".join(mixed) + "; their medians mix versions")
    lines += ["", "ratios of median wall time      " + "".join(f"{'W=' + str(w):>8}" for w in results["worker_counts"])
              + "   target"]
    for x, y, target in RATIOS:
        values = results["ratios"][f"({x})/({y})"]
        lines.append(f"({x})/({y}){'':<24}" + "".join(
            f"{values[f'W={w}']:8.2f}" if values[f"W={w}"] else f"{'n/a':>8}" for w in results["worker_counts"])
            + f"   {target}")
    lines += ["", f"sgeval.py --help: {results['help_wall_s']:.2f} s wall (median of 5; target < 1 s)"]
    for tool, jit in results["jit_cold"].items():
        if "added_s" in jit:
            lines.append(f"empty JIT cache ({jit['removed_cache_files']} cache files removed): first ({tool}) W=1 run "
                         f"{jit['wall_s']:.2f} s vs warm median {jit['warm_median_wall_s']:.2f} s: "
                         f"+{jit['added_s']:.2f} s (target <= 10 s)")
        else:
            lines.append(f"empty JIT cache: the first ({tool}) run failed (exit {jit['returncode']})")
    if results["checks"]:
        same = all(results["checks"].values())
        lines.append("sgeval metrics identical for both layouts and all worker counts: "
                     + ("yes" if same else "NO: " + ", ".join(k for k, v in results["checks"].items() if not v)))
    return "\n".join(lines)


def memory_scaling():
    """Peak memory per workload size, from every results file present."""
    rows = []
    for path in sorted((BENCH / "results").glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
        saved = json.loads(path.read_text())
        cells = []
        for key in ("W=1 (a)", "W=1 (b)", "W=1 (c)", "W=2 (b)", "W=2 (c)"):
            s = saved["measurements"].get(key, {})
            cells.append(f"{s['max_rss_mib']:.0f}/{s['tree_pss_mib']:.0f}" if "max_rss_mib" in s else "-")
        rows.append(f"{saved['workload']['params']['n_images']:>6} images  " + "  ".join(f"{c:>10}" for c in cells)
                    + f"   ({saved['machine']['date']})")
    header = ("peak memory, max RSS / tree PSS in MiB, per results file:\n"
              "                W=1 (a)     W=1 (b)     W=1 (c)     W=2 (b)     W=2 (c)")
    return header + "\n" + "\n".join(rows) if rows else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--images", type=int, default=FULL_IMAGES, help=f"evaluated images (default {FULL_IMAGES})")
    size.add_argument("--quick", action="store_true", help=f"{QUICK_IMAGES} images, for development")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per command (median; default 3)")
    parser.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    parser.add_argument("--generation-workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args()
    n_images = QUICK_IMAGES if args.quick else args.images
    worker_counts = [int(w) for w in args.workers.split(",")]
    results = run_benchmark(n_images, max(1, args.runs), worker_counts, args.generation_workers)
    text = report(results)
    results["report"] = text
    out = BENCH / "results" / f"{n_images}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    print()
    print(memory_scaling())
    print(f"\nresults written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
