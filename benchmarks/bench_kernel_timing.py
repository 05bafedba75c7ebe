"""How often the kernel's fetch times come out shorter than the server's own time.

A direct check on loopback, without Scrapy: a server thread answers each request after
a random 2-20 ms of work and logs its own time (from the request's receipt to just
before its answer is sent); the client then leaves the answer unread for 0-20 ms (a
busy crawler) and reads it. For each trial two estimates are compared with the
server's time:

* **jiffies interval**: ``tcpi_last_data_sent - tcpi_last_data_recv`` of ``TCP_INFO``
  plus one jiffy (4 ms at 250 Hz), read at the answer's read: the estimate scrapy-frontier
  0.1 used;
* **span**: ``scheduler.tcp_timing.TcpTimes`` as the scheduler uses it: the send noted by
  the wrapped socket's ``send``, the arrival by the read's ``SO_TIMESTAMPNS`` stamp.

A short estimate is one below the server's time: a rest shorter than the rule. The
unread time each removes is printed too (what the estimate is for). ``--load N``
starts N busy processes for the run (bounded by the run), as a loaded machine.

Usage::

    python benchmarks/bench_kernel_timing.py --trials 3000 --load 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scrapy_frontier.scheduler.tcp_timing import TcpTimes, stamp_reads  # noqa: E402

#: ``struct tcp_info`` up to ``tcpi_total_retrans``, and where the two stamps are.
_INFO_SIZE, _LAST_DATA_SENT, _LAST_DATA_RECV = 104, 44, 52
_U32 = struct.Struct("=I")
_JIFFY = 0.004  # 250 Hz, as on these machines


def _jiffies_interval(sock: socket.socket) -> float:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_SIZE)
    sent = _U32.unpack_from(info, _LAST_DATA_SENT)[0]
    received = _U32.unpack_from(info, _LAST_DATA_RECV)[0]
    return (sent - received) / 1000.0 + _JIFFY


class _Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock


def _spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        pass


def _serve(server: socket.socket, works: list[float], times: list[float]) -> None:
    for work in works:
        if not server.recv(100):
            return
        start = time.monotonic()
        time.sleep(work)
        times.append(time.monotonic() - start)
        server.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")


def run(trials: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    works = [rng.uniform(0.002, 0.020) for _ in range(trials)]
    unread = [rng.uniform(0.0, 0.020) for _ in range(trials)]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    transport = _Transport(client)
    stamp_reads(transport)
    timing = TcpTimes()
    server_times: list[float] = []
    thread = threading.Thread(target=_serve, args=(server, works, server_times), daemon=True)
    thread.start()
    old_short = new_short = stamped = 0
    old_worst = new_worst = float("inf")
    old_cut = new_cut = 0.0
    for i in range(trials):
        sent_before = time.monotonic()
        transport.socket.send(b"GET / HTTP/1.1\r\n\r\n")
        time.sleep(works[i] + unread[i])
        data = b""
        while not data.endswith(b"body"):
            data += transport.socket.recv(100)
        read = time.monotonic()
        old = _jiffies_interval(client)
        answer = timing.begin(transport, read)
        assert answer is not None
        span = timing.end(answer, sent_before, read)
        while len(server_times) <= i:
            time.sleep(0.0001)
        truth = server_times[i]
        old_short += old < truth
        old_worst = min(old_worst, old / truth)
        old_cut += max(0.0, (read - sent_before) - old)
        new = span.end - span.start
        stamped += span.stamped
        new_short += new < truth
        new_worst = min(new_worst, new / truth)
        new_cut += (read - sent_before) - new
    thread.join(timeout=5)
    client.close()
    server.close()
    listener.close()
    return {
        "trials": trials, "jiffy_ms": round(_JIFFY * 1000, 1), "stamped": stamped,
        "jiffies_interval": {"short": old_short, "worst_ratio": round(old_worst, 3),
                             "unread_removed_s": round(old_cut, 3)},
        "span": {"short": new_short, "worst_ratio": round(new_worst, 3),
                 "unread_removed_s": round(new_cut, 3)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--load", type=int, default=0, help="busy processes during the run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
                for _ in range(args.load)]
    for p in spinners:
        p.start()
    try:
        result = run(args.trials, args.seed)
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=5)
    result["load"] = args.load
    print(f"{result['trials']} trials, jiffy {result['jiffy_ms']} ms, {args.load} busy processes")
    print(f"{'estimate':<18}{'short':>7}{'worst/server':>14}{'unread removed':>16}")
    for name in ("jiffies_interval", "span"):
        row = result[name]
        assert isinstance(row, dict)
        print(f"{name:<18}{row['short']:>7}{row['worst_ratio']:>14}{row['unread_removed_s']:>15}s")
    print(f"arrival stamped: {result['stamped']} of {result['trials']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
