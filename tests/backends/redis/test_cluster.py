"""The frontier on a real Redis Cluster of three masters, and partitioned on one Redis.

Each partition's keys carry one hash tag, so its scripts run on one node; a host lives in
one partition, so politeness stays exact across the cluster. Crawl tests run real
``scrapy crawl`` workers of the test web's harness.
"""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import BASE_SETTINGS, FRONTIER_ADDON, run_crawl
from scrapy_frontier.backends.redis.partitions import (
    Layout,
    PartitionedFrontier,
    open_frontier,
    open_seen,
    partition_of,
)
from scrapy_frontier.core import DelayPolicy
from scrapy_frontier.errors import RedisFrontierDataError
from tests.backends.redis.test_crawl import _reap, _spec, _wait_for, _worker, check_one_killed
from tests.backends.test_contract import RedisBackend
from tests.backends.test_contract import test_connections_per_host as connections_per_host
from tests.invariants import check_redis_frontier
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer

_names = itertools.count()


def _layout(name: str, count: int, tagged: bool = True) -> Layout:
    return Layout(f"{name}:frontier:", f"{name}:seen:", f"{name}:history:", count=count,
                  tagged=tagged)


def test_partitions_spread_over_the_cluster_and_each_host_stays_in_one(
        redis_cluster: RedisClusterServers) -> None:
    """Six partitions on three masters: every partition's keys sit in one slot, the slots
    cover every node, and each host's URLs are claimed one at a time from its partition."""
    client = redis_cluster.client()
    layout = _layout(f"spread{next(_names)}", 6)
    frontier = open_frontier(client, layout, front_queues=2, back_queues=4,
                             policy=DelayPolicy(0.0, 0.0, 0.0))
    hosts = [f"h{i}.example" for i in range(30)]
    for n, host in enumerate(hosts):
        assert frontier.push_many([(host, 1, f"{host}/{k}".encode()) for k in range(3)]) \
            == [True] * 3, n
    nodes = {client.get_node_from_key(layout.frontier_prefix(i) + "meta").name
             for i in range(layout.count)}
    assert len(nodes) >= 2, nodes  # six slots spread over the masters
    for i in range(layout.count):
        part = frontier.parts[i]
        slots = {client.keyslot(k) for k in client.scan_iter(match=f"{{{layout.frontier}p{i}}}*")}
        assert len(slots) == 1, (i, slots)
        assert all(partition_of(h, 6) == i for h, _, _ in part.iter_queued())
    # Claim everything in rounds: one lease per host at a time, across partitions.
    held: dict[str, int] = {}
    got = []
    for _ in range(100):
        reply = frontier.round([], [], want=8)
        for lease in reply.leases:
            assert lease.host not in held  # a host is leased once at a time
            held[lease.host] = 1
        got += reply.leases
        done = [f for f in _finish(reply.leases)]
        frontier.round([], done, want=0)
        held.clear()
        if reply.front + reply.back == 0 and not reply.leases:
            break
    assert sorted(lease.item for lease in got) == sorted(
        f"{h}/{k}".encode() for h in hosts for k in range(3))
    assert frontier.idle()
    for part in frontier.parts:
        check_redis_frontier(part)


def _finish(leases: list[Any]) -> list[Any]:
    from scrapy_frontier.backends.redis.frontier import Finished

    return [Finished(lease, 0.0) for lease in leases]


def test_hosts_of_several_connections_on_the_cluster(
        redis_cluster: RedisClusterServers) -> None:
    """The contract's hosts of several connections, with the frontier's keys on one node of
    the cluster (its connections' members stay in the prefix's slot)."""
    client = redis_cluster.client()
    prefix = f"{{conns{next(_names)}}}:frontier:"

    def make(policy: DelayPolicy | None = None, **kw: Any) -> RedisBackend:
        kw = {"front_queues": 4, "back_queues": 2, "back_queues_max": 3, **kw}
        return RedisBackend(client, prefix, policy or DelayPolicy(0.0, 0.0, 10.0), **kw)

    connections_per_host(make)


def test_a_round_claims_where_the_ready_hosts_are(redis_server: RedisServer) -> None:
    """Partitioned on one Redis: the claims of a round go to the partitions that have
    ready hosts, so one round fills the slots even when its first guess was wrong."""
    client = redis_server.client()
    layout = _layout(f"weigh{next(_names)}", 4)
    frontier = open_frontier(client, layout, policy=DelayPolicy(0.0, 0.0, 0.0))
    # Eight hosts, all in partition 3.
    hosts = [h for h in (f"w{i}.example" for i in range(400)) if partition_of(h, 4) == 3][:8]
    reply = frontier.round([(h, 1, h.encode(), None) for h in hosts], [], want=8)
    assert sorted(lease.host for lease in reply.leases) == sorted(hosts)


def test_a_crawl_keeps_its_partition_layout(redis_server: RedisServer) -> None:
    """A crawl started unpartitioned is not opened partitioned (its hosts would be looked for
    in other keys), nor one of three partitions as one of four; nothing is changed."""
    client = redis_server.client()
    name = f"keep{next(_names)}"
    flat = open_frontier(client, _layout(name, 1, tagged=False))
    flat.push("a.example", 1, b"x")
    with pytest.raises(RedisFrontierDataError, match="FRONTIER_REDIS_PARTITIONS"):
        open_frontier(client, _layout(name, 3))
    other = f"keep{next(_names)}"
    open_frontier(client, _layout(other, 3))
    with pytest.raises(RedisFrontierDataError, match="FRONTIER_REDIS_PARTITIONS=3"):
        open_frontier(client, _layout(other, 4))
    with pytest.raises(RedisFrontierDataError, match="FRONTIER_REDIS_PARTITIONS"):
        open_frontier(client, _layout(other, 1, tagged=False))
    assert len(flat) == 1


def test_the_seen_set_lives_in_the_hosts_partition(redis_cluster: RedisClusterServers) -> None:
    """A push tests and marks its URL in the seen set of its host's partition, in the same
    script on the same node: a second push of it is refused, whichever worker sends it."""
    client = redis_cluster.client()
    layout = _layout(f"seen{next(_names)}", 3)
    frontier = open_frontier(client, layout)
    seen = open_seen(client, layout, expected=1000)
    entries = [(f"s{i}.example", 1, b"u%d" % i, (*seen.bucket(f"s{i}.example", i), True))
               for i in range(12)]
    assert frontier.push_unseen(entries) == [1] * 12
    assert frontier.push_unseen(entries) == [2] * 12
    assert seen.contains_many([(f"s{i}.example", i) for i in range(12)]) == [True] * 12


def _cluster_settings(cluster: RedisClusterServers, name: str, **extra: Any) -> dict[str, Any]:
    return {"ADDONS": FRONTIER_ADDON, "FRONTIER_BACKEND": "redis",
            "REDIS_URL": cluster.url, "FRONTIER_REDIS_CLUSTER": True,
            "FRONTIER_REDIS_PARTITIONS": 3, "FRONTIER_REDIS_KEY": f"{name}:frontier:",
            "FRONTIER_REDIS_HISTORY_KEY": f"{name}:history:", "FRONTIER_MIN_DELAY": 0.0,
            "FRONTIER_REDIS_IDLE_GRACE": 1.0, **extra}


@pytest.mark.crawl
def test_one_worker_crawls_politely_on_the_cluster(redis_cluster: RedisClusterServers,
                                                   tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "6", "--pages", "6", "--latency", "0.005", "0.01",
                "--seed", "4"]
    name = f"cone{next(_names)}"
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, _cluster_settings(redis_cluster, name),
                           allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl",
                           timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    print(report.summary())
    assert report.coverage == 1.0 and report.duplicates == 0, report.summary()
    assert report.polite, report.summary()
    assert result.stats["finish_reason"] == "finished"
    assert result.stats["frontier/queued"] == 0
    # Every fetch went through its host's partition, and the hosts spread over them.
    client = redis_cluster.client()
    fetched = [int(client.hget(f"{{{name}:frontier:p{i}}}:stats", "completed") or 0)
               for i in range(3)]
    assert sum(fetched) == report.requests and sum(map(bool, fetched)) >= 2, fetched


@pytest.mark.crawl
@pytest.mark.slow  # 10 s or more: the newest leg runs it, the oldest leg leaves it out
def test_three_workers_one_killed_on_the_cluster(redis_cluster: RedisClusterServers,
                                                 tmp_path: Path) -> None:
    """As test_redis_crawl's three-worker test, on a three-master cluster with three
    partitions: the victim stops itself holding a lease at its sixth request, the others
    start, the victim is killed; its leases lapse and the survivors finish politely."""
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "8", "--pages", "8", "--latency", "0.3", "0.5",
                "--seed", "9"]
    name = f"cthree{next(_names)}"
    client = redis_cluster.client()
    marker = tmp_path / "frozen.txt"
    layout = _layout(name, 3)
    with ServerProcess(web_args, log_path=str(log)) as web:
        settings = {**BASE_SETTINGS, **_cluster_settings(
            redis_cluster, name, FRONTIER_REDIS_LIVENESS=2.0, FRONTIER_DELAY_FACTOR=1.0)}
        (tmp_path / "victim").mkdir()
        victim_spec = _spec(tmp_path / "victim", web, settings, mark_at=6,
                            marker=str(marker), freeze=True)
        spec = _spec(tmp_path, web, settings, wait_for=str(marker))
        outs = [tmp_path / f"worker{i}.json" for i in range(3)]
        procs = [_worker(spec, outs[0]), _worker(victim_spec, outs[1]), _worker(spec, outs[2])]
        try:
            frozen_url = _wait_for(marker, procs, timeout=120)
            leased = {lease.host for lease in _open(client, layout).leases()}
            procs[1].send_signal(signal.SIGKILL)
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            _reap(procs)
        entries = read_log(log)
        expired = _open(client, layout).stats().get("expired", 0)
    check_one_killed(codes, entries, web.expected, frozen_url, leased, expired, outs)


def _open(client: redis.Redis, layout: Layout) -> PartitionedFrontier:
    return open_frontier(client, layout)


def test_reset_deletes_every_partition_of_one_crawl_on_the_cluster(
        redis_cluster: RedisClusterServers) -> None:
    """``scrapy frontier reset`` on a partitioned crawl deletes the keys of all its
    partitions, on every node, and nothing of the spider whose name starts the same way."""
    import subprocess
    import sys

    from scrapy_frontier.backends.redis.partitions import open_history
    from scrapy_frontier.core.history import PageRecord

    client = redis_cluster.client()
    for spider in ("crst", "crstx"):
        layout = Layout(f"{spider}:frontier:", f"{spider}:seen:", f"{spider}:history:",
                        count=3, tagged=True)
        frontier = open_frontier(client, layout)
        frontier.push_many([(f"r{i}.example", 1, b"x") for i in range(12)])
        seen = open_seen(client, layout, expected=1000)
        frontier.push_unseen([("r0.example", 1, b"y", (*seen.bucket("r0.example", 7), True))])
        history = open_history(client, layout)
        for fp in range(6):
            history.put(PageRecord(fp=fp, url=f"http://r{fp}.example/"))
        history.flush()

    def keys(spider: str) -> set[bytes]:
        return {k for k in client.scan_iter(match="*", count=1000)
                if f"{spider}:".encode() in k}

    mine, others = keys("crst"), keys("crstx")
    assert len({client.get_node_from_key(k).name for k in mine}) >= 2  # spread over nodes
    done = subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", "frontier", "reset", "--spider", "crst",
         "--yes", "-s", "FRONTIER_BACKEND=redis", "-s", f"REDIS_URL={redis_cluster.url}",
         "-s", "FRONTIER_REDIS_CLUSTER=True", "-s", "FRONTIER_REDIS_PARTITIONS=3"],
        capture_output=True, text=True, timeout=120, cwd="/tmp")
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(mine)} key(s)" in done.stdout
    assert keys("crst") == set() and keys("crstx") == others


def test_a_master_without_replicas_in_sync_is_waited_for_and_nothing_is_lost(
        redis_cluster: RedisClusterServers) -> None:
    """``min-replicas-to-write`` on a master without a replica refuses writes (NOREPLICAS),
    as during a failover: the frontier says Redis is unavailable for now (the workers retry),
    not that the crawl failed; once writes are taken again, the push lands."""
    from scrapy_frontier.errors import RedisFrontierUnavailable

    client = redis_cluster.client()
    layout = _layout(f"norep{next(_names)}", 1)
    frontier = open_frontier(client, layout)
    host = "n.example"
    node = client.get_node_from_key(layout.frontier_prefix(0) + "meta")
    direct = redis.Redis(host=node.host, port=node.port)
    direct.config_set("min-replicas-to-write", 1)
    try:
        with pytest.raises(RedisFrontierUnavailable, match="min-replicas-to-write"):
            frontier.push(host, 1, b"x")
    finally:
        direct.config_set("min-replicas-to-write", 0)
    assert frontier.push(host, 1, b"x") and len(frontier) == 1


def _host_in(partition: int, count: int, stem: str) -> str:
    return next(h for h in (f"{stem}{i}.example" for i in range(1000))
                if partition_of(h, count) == partition)


def test_a_fetch_lets_go_of_its_lease_only_after_its_links_are_queued(
        redis_server: RedisServer) -> None:
    """A round's completion in one partition runs only after its pushes to the others have
    landed: at the moment the lease goes, the links are queued, so no other worker can see
    the crawl empty between the two."""
    client = redis_server.client()
    layout = _layout(f"order{next(_names)}", 3)
    frontier = open_frontier(client, layout, policy=DelayPolicy(0.0, 0.0, 0.0))
    fetched = _host_in(2, 3, "f")
    links = [_host_in(0, 3, "a"), _host_in(1, 3, "b"), _host_in(2, 3, "c")]
    frontier.push(fetched, 1, b"page")
    lease = frontier.round([], [], 1).leases[0]
    queued_at_completion: list[int] = []
    for part in frontier.parts:
        original = part.round

        def spy(pushes: Any, finished: Any, want: int, _original: Any = original,
                **kw: Any) -> Any:
            if list(finished):
                queued_at_completion.append(len(frontier))
            return _original(pushes, finished, want, **kw)

        part.round = spy  # type: ignore[method-assign]
    from scrapy_frontier.backends.redis.frontier import Finished

    reply = frontier.round([(h, 1, h.encode(), None) for h in links], [Finished(lease, 0.0)], 0)
    assert reply.pushed == [1, 1, 1] and reply.completed[0] is not None
    # The completing partition (2) pushes its own link in the same script, before it completes.
    assert queued_at_completion == [2]


def test_idle_is_said_only_when_nothing_moved_between_two_reads(
        redis_server: RedisServer) -> None:
    """The partitions are read one after another. When another worker queues, claims and
    completes a URL while they are read, every partition can look empty at its own read:
    the counters differ between the two reads, and the frontier is not said idle."""
    client = redis_server.client()
    layout = _layout(f"settle{next(_names)}", 3)
    frontier = open_frontier(client, layout, policy=DelayPolicy(0.0, 0.0, 0.0))
    other = open_frontier(client, layout, policy=DelayPolicy(0.0, 0.0, 0.0))
    host = _host_in(0, 3, "s")
    assert frontier.settled()  # nothing anywhere, nothing moving
    last = frontier.parts[2]
    read = last.activity
    moved = []

    def activity() -> Any:
        out = read()
        if not moved:  # between the first and the second read: a whole fetch elsewhere
            other.push(host, 1, b"x")
            lease = other.pop()
            assert lease is not None
            other.complete(lease, 0.0)
            moved.append(1)
        return out

    last.activity = activity  # type: ignore[method-assign]
    assert not frontier.settled()
    assert frontier.settled()  # and once nothing moves, it is idle
