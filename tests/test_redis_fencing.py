"""Fencing on Redis: a worker paused past its leases never fetches under them.

A worker stopped (SIGSTOP: a long GC pause, a VM migration, a laptop lid) for longer than
``FRONTIER_REDIS_LIVENESS`` loses its leases: the others take its hosts back and fetch
them. When it is continued, it must not send what it claimed before the pause: it cannot
prove it still holds those leases, so it gives them back unfetched, logs and counts them.
The test web's own log, on its own clock, judges the crawl of all three workers together.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import BASE_SETTINGS
from tests.redis_server import RedisServer
from tests.test_redis_crawl import _reap, _settings, _spec, _wait_for, _worker

_names = itertools.count()


def _until(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``done`` until it holds; fail after ``timeout`` s (a guard, not a measure)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.05)


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more
def test_a_worker_paused_past_its_leases_gives_them_back_unfetched(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Three workers; one stops itself (SIGSTOP) as a round lands with requests claimed
    ahead of their hosts' ready times, holding no other lease. It stays stopped until the
    others have taken every one of its leases back (read in Redis) and fetched their URLs
    (read in the server's log), then it is continued. It sends none of them: at the server,
    no overlap, no short gap, no URL fetched twice, every page fetched; and it counts the
    leases it gave back (``frontier/leases/lapsed``) and names their hosts in a warning."""
    from scrapy_frontier.backends.redis.frontier import RedisFrontier

    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "6", "--pages", "30", "--latency", "0.03",
                "0.06", "--cross-links", "0", "--seed", "21"]
    name = f"zombie{next(_names)}"
    client = redis_server.client()
    marker = tmp_path / "frozen.json"
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, **_settings(
            redis_server, name, FRONTIER_REDIS_LIVENESS=1.0, FRONTIER_DELAY_FACTOR=5.0)}
        (tmp_path / "victim").mkdir()
        victim_spec = _spec(tmp_path / "victim", web, settings, freeze_claimed_ahead=3,
                            marker=str(marker))
        spec = _spec(tmp_path, web, settings)
        outs = [tmp_path / f"worker{i}.json" for i in range(3)]
        procs = [_worker(spec, outs[0]), _worker(victim_spec, outs[1]), _worker(spec, outs[2])]
        try:
            held = json.loads(_wait_for(marker, procs, timeout=120))
            assert any(lease["ahead"] for lease in held), held
            frontier = RedisFrontier(client, f"{name}:frontier:")
            mine = {(lease["host"], lease["ticket"]) for lease in held}
            # Stopped, it renews nothing: its leases lapse and the others take them back...
            _until(lambda: not mine & {(lease.host, lease.ticket)
                                       for lease in frontier.leases()},
                   "the others taking the stopped worker's leases back")
            urls = {(urlsplit(lease["url"]).hostname, urlsplit(lease["url"]).path)
                    for lease in held}
            # ... and fetch their URLs, before it is continued.
            _until(lambda: urls <= {(e.host, e.path) for e in read_log(log)},
                   "the others fetching the stopped worker's URLs")
            procs[1].send_signal(signal.SIGCONT)
            victim_output, _ = procs[1].communicate(timeout=180)
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            _reap(procs)
        entries = read_log(log)
    assert codes == [0, 0, 0], (codes, victim_output[-3000:])
    report = audit(entries, expected=web.expected, min_delay=0.0, factor=5.0)
    print(report.summary())
    print("held when stopped:", held)
    assert report.overlaps == 0 and report.short_gaps == 0, report.summary()
    assert report.duplicates == 0, report.summary()
    assert report.coverage == 1.0, report.summary()
    victim = json.loads(outs[1].read_text())
    assert victim["finish_reason"] == "finished"
    # Every lease it held when stopped was given back unfetched, counted once.
    assert victim.get("frontier/leases/lapsed") == len(held), victim_output[-3000:]
    warned = [line for line in victim_output.splitlines()
              if "WARNING" in line and "lapsed" in line]
    assert warned, victim_output[-3000:]
    assert all(any(lease["host"] in line for line in warned) for lease in held), warned
