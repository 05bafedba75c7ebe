"""Redis over TLS (``rediss://``), as ACL users holding only what the frontier needs.

A redis-server with TLS only (no plain port) on 127.0.0.1, its certificate signed by an
authority made in the test; the client trusts that authority through ``ssl_ca_certs`` in
REDIS_URL. A real crawl of the test web runs as a worker with the documented ACL, then
``scrapy frontier`` reads and steers it as an operator with the documented ACL; Redis's ACL
log shows no refusal. A user missing one command is refused at startup, naming it.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from frontier_testweb import ServerProcess, audit, read_log
from frontier_testweb.crawl import FRONTIER_ADDON, run_crawl
from scrapy_frontier.backends.redis.acl import (
    PROBE_CALLS,
    WORKER_COMMANDS,
    acl_rules,
    check_permissions,
)
from scrapy_frontier.backends.redis.connection import (
    frontier_error,
    redis_from_settings,
    wait_for_redis,
)
from scrapy_frontier.backends.redis.lua import lua_source
from scrapy_frontier.commands.frontier import main as frontier_main
from scrapy_frontier.errors import RedisFrontierSettingsError
from tests.redis_server import RedisServer
from tests.redis_tls import make_tls_files
from tests.scheduler.scrapy_project import make_project, scrapy_crawl

ROOT = Path(__file__).resolve().parents[3]
#: The default user's password (the server runs with requirepass).
ADMIN_PASSWORD = "admin-secret"
#: The crawl harness's spider: its keys are ``testweb:*`` under the default key settings.
SPIDER = "testweb"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tls=make_tls_files(tmp_path_factory.mktemp("tls")))
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server.client() as first:
        first.config_set("requirepass", ADMIN_PASSWORD)
    yield server
    server.stop()


def _admin(server: RedisServer) -> redis.Redis:
    return server.client(password=ADMIN_PASSWORD)


def _user(server: RedisServer, name: str, rules: str) -> str:
    """Make the ACL user ``name`` with ``rules`` (its password: NAME-pw); its REDIS_URL."""
    with _admin(server) as admin:
        admin.execute_command("ACL", "SETUSER", name, "reset",
                              *rules.replace(">PASSWORD", f">{name}-pw").split())
    return server.url.replace("rediss://", f"rediss://{name}:{name}-pw@")


def _denials(server: RedisServer, user: str) -> list[dict[str, Any]]:
    with _admin(server) as admin:
        return [entry for entry in admin.acl_log(128) if entry["username"] == user]


def _frontier(args: list[str], url: str, **opts: Any) -> Any:
    """``scrapy frontier ARGS --json --spider testweb`` in this process (no Scrapy start-up)."""
    namespace = argparse.Namespace(**{
        "json": True, "spider": SPIDER, "limit": 20, "sort": "queued", "for_seconds": None,
        "new_host": False, "recrawl_host": None, "recrawl_all": False, "requeue": False,
        "drop": False, "clear": False, "yes": False, **opts})
    out = io.StringIO()
    frontier_main(args, namespace, Settings({"FRONTIER_BACKEND": "redis", "REDIS_URL": url}),
                  out)
    return json.loads(out.getvalue())


@pytest.mark.crawl
def test_a_crawl_over_tls_as_least_privilege_users_fetches_every_page(
        tls_server: RedisServer, tmp_path: Path) -> None:
    worker = _user(tls_server, "crawler", acl_rules(SPIDER))
    log = tmp_path / "server.jsonl"
    web_args = ["--shape", "wide", "--hosts", "4", "--pages", "4", "--latency", "0.005", "0.01",
                "--seed", "4"]
    with ServerProcess(web_args, log_path=str(log)) as web:
        result = run_crawl(web.start_urls, {
            "ADDONS": FRONTIER_ADDON, "FRONTIER_BACKEND": "redis", "REDIS_URL": worker,
            "FRONTIER_MIN_DELAY": 0.0, "FRONTIER_REDIS_IDLE_GRACE": 1.0},
            allowed_domains=web.allowed_domains, workdir=tmp_path / "crawl", timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    report = audit(read_log(log), expected=web.expected, min_delay=0.0)
    assert report.coverage == 1.0 and report.duplicates == 0, (report.summary(),
                                                                result.output[-3000:])
    stats = result.stats
    assert stats["finish_reason"] == "finished"
    assert stats["frontier/backend"] == "redis" and stats["frontier/queued"] == 0
    assert stats["downloader/response_count"] == len(web.expected)
    assert _denials(tls_server, "crawler") == []
    with _admin(tls_server) as admin:  # the crawl's keys are where the ACL lets it write
        assert admin.keys(f"{SPIDER}:frontier:meta") and admin.keys(f"{SPIDER}:seen:meta")

    # The operator reads and steers the crawl with the documented ACL.
    operator = _user(tls_server, "operator", acl_rules(SPIDER, operator=True))
    status = _frontier(["status"], operator)
    assert status["backend"] == "redis" and status["queued"] == 0, status
    host = web.allowed_domains[0]
    _frontier(["hosts"], operator)
    _frontier(["block", host], operator, new_host=True)  # the crawl ended: it is forgotten
    _frontier(["unblock", host], operator, new_host=True)
    _frontier(["url", web.start_urls[0]], operator)
    _frontier(["delay", host, "0.5"], operator, new_host=True)
    _frontier(["budget", host, "10"], operator, new_host=True)
    _frontier(["retire", host], operator, new_host=True)
    _frontier(["unretire", host], operator, new_host=True)
    _frontier(["policy", host, "budget=3"], operator)
    _frontier(["policy", host], operator, clear=True)
    _frontier(["recrawl"], operator, recrawl_host=host)
    _frontier(["due"], operator)
    _frontier(["quarantine"], operator)
    assert _denials(tls_server, "operator") == []


def test_a_password_only_url_is_the_default_user(tls_server: RedisServer) -> None:
    """Also alone (``-m "not crawl"``): the crawl above may not have made the frontier."""
    from scrapy_frontier.backends.redis.frontier import FORMAT, VERSION

    with _admin(tls_server) as admin:
        if not admin.exists(f"{SPIDER}:frontier:meta"):
            admin.hset(f"{SPIDER}:frontier:meta", mapping={
                "format": FORMAT, "version": VERSION, "levels": 8, "spider": SPIDER})
    url = tls_server.url.replace("rediss://", f"rediss://:{ADMIN_PASSWORD}@")
    assert _frontier(["status"], url)["backend"] == "redis"


def test_a_user_denied_one_command_is_refused_at_startup(tls_server: RedisServer,
                                                         tmp_path: Path) -> None:
    """ZREMRANGEBYSCORE runs only inside the scripts, mid-crawl: the check at open names it
    before anything is written."""
    url = _user(tls_server, "short", acl_rules("one") + " -zremrangebyscore")
    started = time.monotonic()
    crawl = scrapy_crawl(make_project(tmp_path), "one", "FRONTIER_BACKEND=redis",
                         f"REDIS_URL={url}")
    assert crawl.returncode == 1, crawl.output[-3000:]
    assert time.monotonic() - started < 30
    assert len(crawl.errors) == 1, crawl.output[-3000:]
    error = crawl.errors[0]
    assert "scrapy-frontier cannot start" in error and "ZREMRANGEBYSCORE" in error, error
    assert 'docs/backends.rst, "Redis users and ACLs"' in error
    assert "Traceback" not in crawl.output
    with _admin(tls_server) as admin:
        assert admin.keys("one:*") == [] and admin.keys("{one:*") == []


def test_an_unknown_certificate_authority_is_a_settings_error(tls_server: RedisServer) -> None:
    url = tls_server.url.split("?")[0].replace("rediss://", f"rediss://:{ADMIN_PASSWORD}@")
    client = redis_from_settings(Settings({"REDIS_URL": url}))
    started = time.monotonic()
    with pytest.raises(RedisFrontierSettingsError, match="ssl_ca_certs"):
        wait_for_redis(client, timeout=10)
    assert time.monotonic() - started < 5, "waited for a server that is there"
    client.close()


def test_a_command_denied_inside_a_script_is_a_settings_error() -> None:
    said = redis.exceptions.ResponseError(
        "The user executing the script can't run this command or subcommand script: 4f5e, "
        "on @user_script:12.")
    error = frontier_error(redis.Redis(port=1), "x:frontier:", "claiming", said)
    assert isinstance(error, RedisFrontierSettingsError)
    assert "Redis users and ACLs" in str(error)


def test_the_worker_acl_covers_every_command_of_the_scripts() -> None:
    scripts = (ROOT / "scrapy_frontier/backends/redis/lua").glob("*.lua")
    called = {name.lower() for path in scripts for name in re.findall(
        r"redis\.p?call\('([A-Za-z]+)'", lua_source(path.stem))}
    called |= {"hlen", "zcard", "scard"}  # named by prelude.lua's filled(key, len_cmd)
    assert called and called <= set(WORKER_COMMANDS), called - set(WORKER_COMMANDS)


def test_the_documented_acl_lines_are_the_frontiers() -> None:
    """docs/backends.rst gives the lines as shell commands, continued with backslashes."""
    page = " ".join((ROOT / "docs/backends.rst").read_text().replace("\\\n", " ").split())
    assert f"ACL SETUSER crawler {acl_rules('myspider')}" in page
    assert f"ACL SETUSER operator {acl_rules('myspider', operator=True)}" in page
    extra = acl_rules("myspider", operator=True, cluster=True).split(
        acl_rules("myspider", operator=True))[1]
    assert extra.strip() and extra.strip() in page


def test_every_probe_call_is_whole(redis_client: redis.Redis) -> None:
    """A call shorter than its command's arity would crash Redis 7's ACL check."""
    for name, call in PROBE_CALLS.items():
        info = redis_client.execute_command("COMMAND", "INFO", name)
        arity = int(info[name]["arity"] if isinstance(info, dict) else info[0][1])
        assert len(call) == arity if arity > 0 else len(call) >= -arity, (name, call, arity)


def test_each_worker_command_denied_is_named(redis_server: RedisServer) -> None:
    """As a user with key patterns (where Redis 7 extracts keys to check them)."""
    rules = acl_rules("probe").replace(">PASSWORD", ">pw").split()
    keys = ["probe:frontier:meta", "probe:seen:meta", "{probe:frontier:p0}:meta"]
    with redis_server.client() as admin, redis_server.client(username="probe",
                                                            password="pw") as user:
        admin.execute_command("ACL", "SETUSER", "probe", "reset", *rules)
        check_permissions(user, keys)
        for name in WORKER_COMMANDS:
            admin.execute_command("ACL", "SETUSER", "probe", f"-{name}")
            with pytest.raises(RedisFrontierSettingsError) as info:
                check_permissions(user, keys)
            named = name.upper().replace("|", " ")
            assert f"the command {named}," in str(info.value), (name, str(info.value))
            admin.execute_command("ACL", "SETUSER", "probe", f"+{name}")
        with pytest.raises(RedisFrontierSettingsError, match="the key other:seen:meta,"):
            check_permissions(user, [*keys, "other:seen:meta"])
        with pytest.raises(RedisFrontierSettingsError) as info:
            check_permissions(user, ["other:frontier:meta", "other:seen:meta"])
        message = str(info.value)  # the frontier's key denied: no command is blamed
        assert "use the keys other:frontier:meta, other:seen:meta, which" in message, message
        assert admin.ping() and admin.keys("probe*") == []
        admin.execute_command("ACL", "DELUSER", "probe")
