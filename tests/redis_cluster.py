"""Start a private Redis Cluster of three masters on loopback, for tests and benchmarks.

Three ``redis-server --cluster-enabled yes`` processes on free loopback ports, joined with
``redis-cli --cluster create`` (no replicas), then waited for until every node says
``cluster_state:ok``.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time

import redis
from redis.cluster import RedisCluster

from tests.redis_server import RedisServer

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def _cluster_port() -> int:
    """A free loopback port P with P + 10000 free too (the cluster bus), P <= 55535."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20_000, 55_000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free loopback port pair for a cluster node")


class RedisClusterServers:
    """``masters`` cluster-enabled redis-servers joined into one cluster."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            RedisServer(extra=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                               "--cluster-node-timeout", "5000"))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        """Any one node: the cluster client discovers the others."""
        return self.nodes[0].url

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def start(self, timeout: float = 30.0) -> RedisClusterServers:
        try:
            for node in self.nodes:
                node.start(port=_cluster_port())
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            done = subprocess.run(
                [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "0",
                 "--cluster-yes"], capture_output=True, text=True, timeout=timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}"
                                   f"{done.stderr}")
            self._wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ok(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            states = []
            for node in self.nodes:
                with redis.Redis(host="127.0.0.1", port=node.port) as c:
                    states.append(c.cluster("info").get("cluster_state"))
            if all(s == "ok" for s in states):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not reach cluster_state:ok in {timeout} s: {states}")

    def flush(self) -> None:
        for node in self.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as c:
                c.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
