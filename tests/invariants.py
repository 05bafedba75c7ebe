"""The frontiers' structural invariants, asserted by the tests: O(size), never in a crawl.

They read the frontiers' private state, so they live beside the tests that need them rather
than in the classes a crawl runs.
"""

from __future__ import annotations

import math
from typing import Any

from scrapy_frontier.backends.redis.frontier import read_pace, text

Frontier = Any  # scrapy_frontier.core.frontier.Frontier
RedisFrontier = Any  # scrapy_frontier.backends.redis.frontier.RedisFrontier


def check_frontier(frontier: Frontier) -> None:
    """Assert every structural invariant of a core Frontier."""
    slot_hosts = [hs for hs in frontier._hosts.values() if hs.active]
    for hs in slot_hosts:
        assert frontier.store.back_len(hs.key) == hs.queued, f"store drift for {hs.key}"
    assert frontier._active == len(slot_hosts), "active count drift"
    assert frontier._active <= frontier.back_queues_max, "more back queues than allowed"
    assert frontier._back_len == sum(hs.queued for hs in slot_hosts), "back_len drift"
    assert bool(frontier._front_len) == bool(frontier.store.front_levels()), "front_len drift"
    if frontier._front_len:
        assert frontier._active >= frontier.back_queues, \
            "front queues wait while back queues are free"
    for hs in slot_hosts:
        assert hs.queued or hs.busy, f"idle empty back queue for {hs.key}"
    for hs in frontier._hosts.values():
        assert 0 <= hs.busy <= hs.conns, f"{hs.key}: {hs.busy} leases on {hs.conns} connections"
        if not hs.active:
            assert not hs.busy, f"{hs.key} in flight without a back queue"
            assert not hs.gather and not hs.shrink, f"{hs.key} gathers without a back queue"
            assert hs.spare is None, f"{hs.key} keeps connections without a back queue"
        elif hs.key in frontier._retired:
            assert hs.busy and not hs.queued, f"retired {hs.key} still queued"
        if hs.conns > 1:
            assert frontier.connections is not None and frontier.groups is None
    # Heap entries: one per idle connection. A host with one connection has at most one.
    entries: dict[str, float] = {}
    times: dict[str, list[float]] = {}
    for t_e, _, key in frontier._ready:
        times.setdefault(key, []).append(t_e)
    for *_, key, t_e in frontier._due:
        times.setdefault(key, []).append(t_e)
    for key, ts in times.items():
        hs = frontier._hosts[key]
        assert hs.active and hs.queued, f"heap entry for {key} without a URL queued"
        assert len(ts) + hs.busy <= hs.conns, f"{key}: more entries and leases than connections"
        if hs.spare is None:
            assert len(ts) == 1, f"two heap entries for {key}"
            entries[key] = ts[0]
    for hs in slot_hosts:
        if hs.spare is None:
            assert hs.conns == 1, f"{hs.key}: several connections without spare ones"
            continue
        # Several connections: each is leased, in the heap, or spare (only while the host
        # has no URL queued).
        ts = times.get(hs.key, [])
        # (One connection on this path only after set_connections lowered it.)
        assert hs.conns > 1 or frontier.connections is not None, \
            f"{hs.key}: spare connections on a host with one"
        assert len(ts) + len(hs.spare) + hs.busy == hs.conns, f"{hs.key}: connections lost"
        assert hs.shrink <= hs.busy, f"{hs.key}: more connections to drop than busy ones"
        if hs.gather:
            # Gathering: every idle connection waits, spare, for the busy ones.
            assert hs.busy and not ts, f"{hs.key}: gathering with {hs.busy} busy, {ts}"
            continue
        assert not (hs.queued and hs.spare), f"{hs.key}: spare connections while URLs wait"
        if hs.queued and hs.busy < hs.conns:
            assert ts, f"{hs.key}: URLs and a free connection, but no heap entry"
    groups = frontier.groups
    unresolved: set[str] = set() if groups is None else groups._unresolved
    group_of: dict[str, str] = {} if groups is None else groups._group_of
    waiting = set(unresolved)
    for g in ([] if groups is None else groups._groups.values()):
        assert len(set(g.parked)) == len(g.parked), f"host parked twice in {g.key}"
        assert not g.parked or g.busy is not None, f"parked hosts in idle group {g.key}"
        for key in g.parked:
            assert group_of[key] == g.key
            assert key not in waiting, f"{key} waits twice"
            waiting.add(key)
        if g.busy is not None:
            busy_host = frontier._hosts[g.busy]
            assert busy_host.busy, f"group {g.key} busy without a lease"
            assert group_of[g.busy] == g.key
    for key in unresolved:
        assert key not in group_of, f"{key} unresolved but grouped"
    for hs in slot_hosts:
        if hs.spare is not None:
            continue
        if hs.queued and not hs.busy and hs.key not in waiting:
            assert entries.get(hs.key) == hs.next_contact, f"heap entry wrong for {hs.key}"
        else:
            assert hs.key not in entries, f"heap entry for busy, empty or parked {hs.key}"
    for key in waiting:
        hs = frontier._hosts[key]
        assert hs.active and hs.queued and not hs.busy, f"{key} waits for nothing"
    assert len(entries) + len(waiting) == sum(
        1 for hs in slot_hosts if hs.spare is None and hs.queued and not hs.busy
    )
    if groups is not None:
        groups_busy = [group_of[lease.host] for lease in frontier._leases.values()]
        assert len(groups_busy) == len(set(groups_busy)), "two leases in one group"
        for gkey in groups_busy:
            assert groups._groups[gkey].busy is not None
    busy: dict[str, int] = {}
    for ticket, lease in frontier._leases.items():
        assert lease.ticket == ticket
        busy[lease.host] = busy.get(lease.host, 0) + 1
        assert busy[lease.host] <= frontier._hosts[lease.host].conns, \
            f"more leases on {lease.host} than connections"
    assert busy == {hs.key: hs.busy for hs in frontier._hosts.values() if hs.busy}


def check_redis_frontier(frontier: RedisFrontier) -> None:
    """Assert every structural invariant by reading all keys; O(size), for tests.

    Only meaningful while no other worker changes the frontier.
    """
    c = frontier.client
    k = frontier.key

    def h(name: str) -> dict[str, bytes]:
        return {text(a): b for a, b in c.hgetall(k(name)).items()}

    def z(name: str) -> dict[str, float]:
        return {text(a): b for a, b in c.zrange(k(name), 0, -1, withscores=True)}

    now = frontier.server_time()
    count = {a: int(b) for a, b in h("count").items()}
    active = {a: int(b) for a, b in h("active").items()}
    leases = h("leases")
    deadlines = z("deadlines")
    ready = z("ready")
    rest = z("rest")
    fetch = h("fetch")
    retired = {text(x) for x in c.smembers(k("retired"))}
    front = 0
    for lv in range(1, frontier.levels + 1):
        entries = c.lrange(k(f"f:{lv}"), 0, -1)
        front += len(entries)
        for e in entries:
            assert b"\0" in e, f"front entry without host in f:{lv}"
    assert count.get("front", 0) == front, f"front count {count.get('front')} != {front}"
    back_keys: dict[str, int] = {}
    pattern = frontier._glob() + "b:*"
    for key in c.scan_iter(match=pattern, count=1000):
        rest_of = text(key)[len(frontier.prefix) + 2:]
        level, _, host = rest_of.partition(":")
        n = c.llen(key)
        assert n > 0, f"empty back list {key!r} kept"
        assert 1 <= int(level) <= frontier.levels, f"back list {key!r} with bad level"
        back_keys[host] = back_keys.get(host, 0) + n
    for host, n in back_keys.items():
        assert host in active, f"back queue for {host} without an active entry"
        assert active[host] == n, f"{host}: active says {active[host]}, lists hold {n}"
    for host, q in active.items():
        assert q == back_keys.get(host, 0), f"{host}: active says {q}, lists hold none"
        assert q >= 0
        if host in retired:
            assert q == 0, f"retired {host} still queued"
    assert count.get("back", 0) == sum(active.values()), "back count drift"
    assert len(active) <= frontier.back_queues_max, "more back queues than allowed"
    if front:
        assert len(active) >= frontier.back_queues, "front queues wait while back queues are free"
    assert set(leases) == set(deadlines), "leases and deadlines disagree"
    # A host of k > 1 connections is k members "host NUL c" (see RedisFrontier's layout).
    conns = {a: int(b) for a, b in h("conns").items()}
    spare = z("spare")
    several = {host for host in active if conns.get(host, 1) > 1}

    def host_of(member: str) -> str:
        return member.partition("\0")[0]

    leased_hosts = {host_of(m) for m in leases}
    for member, rec in leases.items():
        host = host_of(member)
        assert host in active, f"lease on {member!r} without a back queue"
        assert member not in ready, f"leased {member!r} also ready"
        _, _, handed, _, _ = rec.split(b"|", 4)
        if frontier.liveness:  # the claim's window, renewed up to the lease timeout
            assert float(handed) < deadlines[member] <= float(handed) \
                + frontier.lease_timeout + 1e-3
        else:
            assert abs(deadlines[member] - float(handed) - frontier.lease_timeout) < 1e-3
    for host, q in active.items():
        assert q or host in leased_hosts, f"idle empty back queue for {host}"
    want_ready = {host for host, q in active.items()
                  if q and host not in leases and host not in several}
    for host in several:
        members = {f"{host}\0{c}" for c in range(1, conns[host] + 1)}
        assert host not in leases and host not in ready, f"{host}: bare member of {conns[host]}"
        mine = [m for m in [*leases, *ready, *spare] if host_of(m) == host]
        assert sorted(mine) == sorted(members), \
            f"{host}: connections {sorted(mine)} != {sorted(members)} (each in one place)"
        if active[host]:
            # URLs that came while leases were out leave the spare connections spare until
            # a lease ends (see lease_ended in lua/prelude.lua).
            want_ready |= members - set(leases) - set(spare)
            assert not members & set(spare) or members & set(leases), \
                f"{host}: spare connections with URLs queued and no lease out"
    assert {host_of(m) for m in spare} <= several, "spare connections of a host of one"
    assert set(ready) == want_ready, f"ready {sorted(ready)} != {sorted(want_ready)}"
    blocked = z("blocked")
    for member, t_e in ready.items():
        host = host_of(member)
        if blocked.get(host, -math.inf) > now and t_e >= blocked[host] - 1e-5:
            continue  # held by a block (scrapy frontier block)
        if host in several:
            # Each connection rests by its own fetch; the host keeps the latest rest.
            assert t_e <= max(rest.get(host, now), now) + 1e-3, \
                f"{member!r}: ready {t_e} after the host's rest {rest.get(host)}"
        elif rest.get(host, -math.inf) > now:  # (a rest that ended is no rest; purged later)
            assert abs(rest[host] - t_e) < 1e-5, f"{host}: ready {t_e} != rest {rest[host]}"
        else:
            assert t_e <= now + 1e-3, f"{host}: ready in the future without a rest"
    assert set(fetch) <= set(active), "fetch durations for inactive hosts"
    for host, raw in fetch.items():
        last, pace = read_pace(raw)
        assert last >= 0 and pace >= 0, f"{host}: fetch entry {raw!r}"
    head = {a: int(b) for a, b in h("head").items()}
    assert set(head) == {host for host, q in active.items() if q}, "head levels drift"
    for host, lv in head.items():
        top = max(lvl for lvl in range(1, frontier.levels + 1)
                  if c.llen(k(f"b:{lvl}:{host}")))
        assert lv == top, f"{host}: head level {lv}, lists say {top}"
