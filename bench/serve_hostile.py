"""`make bench-serve-hostile`: the benchmark service (sgeval_serve) under the attacks of issue 29,
on loopback: the server's peak RSS and a legitimate upload's latency while each attack runs.

    python -m bench.serve_hostile                   # every attack, 10 s each
    python -m bench.serve_hostile --seconds 5 --attacks none,bomb,slowloris

One row per attack, each on a fresh server (``python -m sgeval_serve``, bench/serve_load.Server) on
the demo benchmark with the service's default limits (configs/serve/demo.yaml; one evaluation
worker). The attack runs from its own threads for SECONDS; meanwhile three legitimate users each
upload a distinct copy of the demo's pred.zip, at 2 s, 2 s + a third and 2 s + two thirds of the
run. Measured: the server process's peak RSS (its VmHWM, from its start), the peak of the sum of
its child processes' RSS (the upload checks in their bounded processes, the evaluation), sampled
every 0.1 s, the legitimate uploads' latencies and statuses, and what the attack got back.

The attacks (all traffic to 127.0.0.1, bounded in count and time):

- ``none``: no attack (the baseline);
- ``huge-body``: 8 connections at a time, each declaring a 3 GB JSON body to an admin action
  without a token and sending it as fast as it can;
- ``chunked-body``: the same with an endless chunked body to /api/signup;
- ``bad-records``: 3 attackers uploading, 2 at a time each, a 0.2 MB ZIP of 10^7 records with
  ``"id": 1.5`` (the 739 MB answer of the issue);
- ``many-records``: the same with 10^6 valid records of new image ids (the issue's 20 million:
  609 s, then accepted);
- ``bomb``: the same with a 1 MB ZIP whose triplets.json is 1 GB of white space;
- ``big-record``: the same with one record of 3 million triplets (about 400 MB decoded);
- ``replays``: 3 attackers, each with an accepted submission, sending its file again, 2 at a time;
- ``slowloris``: 1,100 connections sending a request head a byte a second, opened again when closed.

Results go to bench/results/serve-hostile.json. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from bench import serve_load
from bench.serve_load import ROOT, SLUG, Server

ATTACKERS = 3


# the attacks' files --------------------------------------------------------------------------


def zip_of(path, write):
    """A ZIP at path whose triplets.json is what write(stream) writes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive, \
            archive.open("triplets.json", "w", force_zip64=True) as member:
        write(member)
    return path


def bad_records(path, n=10**7):
    def write(member):
        member.write(b'{"version": 1, "images": [')
        block = b'{"id": 1.5},' * 100_000
        for _ in range(n // 100_000 - 1):
            member.write(block)
        member.write(block[:-1] + b"]}")
    return zip_of(path, write)


def many_records(path, n=10**6):
    def write(member):
        member.write(b'{"version": 1, "images": [')
        for start in range(0, n, 10_000):
            member.write(",".join(f'{{"id": "n{index}", "instances": [], "triplets": []}}'
                                  for index in range(start, start + 10_000)).encode())
            member.write(b"," if start + 10_000 < n else b"]}")
    return zip_of(path, write)


def bomb(path, megabytes=1024):
    def write(member):
        member.write(b'{"version": 1, "images": [')
        for _ in range(megabytes):
            member.write(b" " * (1 << 20))
        member.write(b"]}")
    return zip_of(path, write)


def big_record(path, triplets=3_000_000):
    def write(member):
        member.write(b'{"version": 1, "images": [{"id": 1, "instances": [], "triplets": [')
        member.write(b"[0,0,0]," * (triplets - 1) + b"[0,0,0]]}]}")
    return zip_of(path, write)


# the attacks ---------------------------------------------------------------------------------


def _address(url):
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def endless_body(url, stop, outcome, head, chunk=b"{" * 65536):
    """One connection at a time: head, then chunk after chunk as fast as the server takes them,
    until it answers or closes (then again) or stop."""
    while not stop.is_set():
        try:
            with socket.create_connection(_address(url), timeout=5) as sock:
                sock.sendall(head)
                sock.setblocking(False)
                sent, answer = 0, b""
                while not stop.is_set():
                    try:
                        answer = sock.recv(4096)
                        break
                    except BlockingIOError:
                        pass
                    try:
                        sent += sock.send(chunk)
                    except BlockingIOError:
                        time.sleep(0.001)
                outcome.append((answer[9:12].decode(errors="replace") or "closed", sent))
        except OSError as error:
            outcome.append((type(error).__name__, 0))
            time.sleep(0.05)


def huge_body(url, stop, outcome, **_):
    endless_body(url, stop, outcome, b"POST /api/submissions/1/approve HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Type: application/json\r\nContent-Length: 3000000000\r\n\r\n")


def chunked_body(url, stop, outcome, **_):
    head = b"POST /api/signup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    endless_body(url, stop, outcome, head, chunk=b"%x\r\n%s\r\n" % (65536, b" " * 65536))


def uploads(url, stop, outcome, token, path, method, **_):
    while not stop.is_set():
        reply = serve_load.upload(url, token, path, method)
        outcome.append((reply.status or "no answer", round(reply.seconds, 2)))
        if reply.status in (0, 429):
            time.sleep(0.2)


def slowloris(url, stop, outcome, connections=1100, **_):
    """connections sockets, each sending a request head a byte a second; one closed by the server
    is opened again."""
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    sockets = {}  # socket -> bytes sent
    try:
        while not stop.is_set():
            while len(sockets) < connections and not stop.is_set():
                try:
                    sock = socket.create_connection(_address(url), timeout=2)
                    sock.setblocking(False)
                    sockets[sock] = 0
                except OSError as error:
                    outcome.append((type(error).__name__, 0))
                    break
            for sock in list(sockets):
                try:
                    sock.send(head[sockets[sock]:sockets[sock] + 1])
                    sockets[sock] += 1
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    outcome.append(("closed", sockets.pop(sock)))
                    sock.close()
            stop.wait(1.0)
    finally:
        for sock in sockets:
            sock.close()


ATTACKS = {"none": None, "huge-body": huge_body, "chunked-body": chunked_body, "bad-records": uploads,
           "many-records": uploads, "bomb": uploads, "big-record": uploads, "replays": uploads,
           "slowloris": slowloris}
THREADS = {"huge-body": 8, "chunked-body": 8, "slowloris": 1}  # the upload attacks: 2 per attacker


# measuring -----------------------------------------------------------------------------------


def _status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    children.setdefault(int(stat.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def sample_children(pid, stop, peak):
    while not stop.is_set():
        peak[0] = max(peak[0], sum(_status_kb(child, "VmRSS") for child in descendants(pid)))
        stop.wait(0.1)


def run_attack(name, data, folder, files, seconds):
    """One attack on a fresh server: {attack, server_peak_rss_mb, children_peak_rss_mb,
    legit_upload_s, legit_status, attack_outcomes}."""
    folder.mkdir(parents=True)
    config = serve_load.write_config(folder / "serve.yaml", data, folder / "state", workers=1)
    admin = serve_load.cli(config, "token", "admin", "--admin")
    legit_files = serve_load.distinct_copies(Path(data) / "pred.zip", 3, folder)
    with Server(config, folder / "server.log") as server:
        names = [f"attacker{index}" for index in range(ATTACKERS)] + [f"legit{index}" for index in range(3)]
        tokens = serve_load.issue_tokens(server.url, admin, names)
        if name == "replays":  # each attacker's file is accepted once, then sent again
            for index in range(ATTACKERS):
                (folder / f"a{index}").mkdir()
                copy = serve_load.distinct_copies(Path(data) / "pred-b.zip", index + 1, folder / f"a{index}")[-1]
                files[f"replay{index}"] = copy
                reply = serve_load.upload(server.url, tokens[f"attacker{index}"], copy, f"Replay {index}")
                assert reply.status == 201, reply.body
        stop, done, outcome, peak = threading.Event(), threading.Event(), [], [0]
        sampler = threading.Thread(target=sample_children, args=(server.process.pid, done, peak))
        sampler.start()
        threads = []
        if ATTACKS[name] is not None:
            for index in range(THREADS.get(name, 2 * ATTACKERS)):
                attacker = index % ATTACKERS
                path = files.get(f"replay{attacker}") if name == "replays" else files.get(name)
                threads.append(threading.Thread(target=ATTACKS[name], args=(server.url, stop, outcome), kwargs={
                    "token": tokens[f"attacker{attacker}"], "path": path, "method": f"Attack {attacker}"}))
        started = time.monotonic()
        for thread in threads:
            thread.start()
        legit = []
        for index in range(3):
            stop.wait(max(0.0, started + 2 + index * (seconds - 2) / 3 - time.monotonic()))
            reply = serve_load.upload(server.url, tokens[f"legit{index}"], legit_files[index], f"Legit {index}")
            legit.append((reply.status, round(reply.seconds, 2)))
        stop.wait(max(0.0, started + seconds - time.monotonic()))
        stop.set()
        for thread in threads:
            thread.join()
        done.set()
        sampler.join()
        server_peak = _status_kb(server.process.pid, "VmHWM")
        log = server.log.read_text(errors="replace")
    statuses = {}
    for status, _ in outcome:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"attack": name, "server_peak_rss_mb": round(server_peak / 1024), "children_peak_rss_mb": round(peak[0] / 1024),
            "legit_upload_s": [seconds for _, seconds in legit], "legit_status": [status for status, _ in legit],
            "attack_outcomes": statuses, "too_many_open_files": log.count("Too many open files"),
            "tracebacks": log.count("Traceback")}


def table(rows):
    lines = [f"{'attack':14}{'server peak RSS':>17}{'children peak':>15}{'legit upload (s), max of 3':>28}  attack got"]
    for row in rows:
        outcomes = ", ".join(f"{key}: {value}" for key, value in sorted(row["attack_outcomes"].items())) or "-"
        legit = f"{max(row['legit_upload_s']):.2f}" + ("" if set(row["legit_status"]) == {201} else
                                                      f" ({row['legit_status']})")
        lines.append(f"{row['attack']:14}{row['server_peak_rss_mb']:>14} MB{row['children_peak_rss_mb']:>12} MB"
                     f"{legit:>28}  {outcomes}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.serve_hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="each attack's duration (default: 10)")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated (default: all)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "serve-hostile.json"))
    args = parser.parse_args(argv)
    from bench.run import machine

    names = args.attacks.split(",")
    unknown = [name for name in names if name not in ATTACKS]
    if unknown:
        parser.error(f"unknown attack(s) {', '.join(unknown)} (have: {', '.join(ATTACKS)})")
    rows = []
    with tempfile.TemporaryDirectory(prefix="sgeval-serve-hostile-") as scratch:
        scratch = Path(scratch)
        data = serve_load.demo_data(scratch / "data")
        makers = {"bad-records": bad_records, "many-records": many_records, "bomb": bomb, "big-record": big_record}
        files = {name: maker(scratch / f"{name}.zip") for name, maker in makers.items() if name in names}
        for name in names:
            rows.append(run_attack(name, data, scratch / name, files, args.seconds))
            print(json.dumps(rows[-1]), flush=True)
    text = table(rows)
    print(f"\neach attack {args.seconds:g} s on a fresh server; 3 legitimate uploads during it\n{text}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"machine": machine(), "arguments": vars(args), "rows": rows,
                                             "table": text}, indent=1) + "\n")
    print(f"results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
