"""Per-host policy: which entry a host gets, and the errors that name a bad entry."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_frontier.core.budgets import Budgets
from scrapy_frontier.core.host_policy import (
    HostPolicies,
    HostPolicy,
    parse_entries,
)
from scrapy_frontier.core.politeness import DelayPolicy
from scrapy_frontier.errors import FrontierConfigError
from scrapy_frontier.settings import FrontierConfig

DEFAULT = HostPolicy(DelayPolicy(10.0, 1.0, 60.0))


def policies(raw: dict[str, Any]) -> HostPolicies:
    return HostPolicies(DEFAULT, parse_entries(raw, DEFAULT))


def test_a_suffix_covers_the_host_and_its_subdomains_only() -> None:
    table = policies({"example.com": {"concurrency": 2}})
    assert table.of("example.com").connections == 2
    assert table.of("www.Example.COM").connections == 2
    assert table.of("badexample.com") is DEFAULT
    assert table.of("example.org") is DEFAULT


def test_the_most_specific_entry_wins_whole() -> None:
    table = policies({
        "example.com": {"concurrency": 2, "max_delay": 10},
        "api.example.com": {"min_delay": 0.5},
        "=www.example.com": {"delay_factor": 2},
    })
    api = table.of("v1.api.example.com")
    # The longest suffix wins, and what it leaves out is the crawl's, not example.com's.
    assert api.delay == DelayPolicy(10.0, 0.5, 60.0) and api.connections == 1
    assert table.of("www.example.com").delay == DelayPolicy(2.0, 1.0, 60.0)
    # An exact key is that host only.
    assert table.of("a.www.example.com").connections == 2
    assert table.of("example.com").delay.max_delay == 10


def test_budget_left_out_is_the_crawls() -> None:
    table = policies({"a.example": {"budget": 0}, "b.example": {"concurrency": 3}})
    assert table.of("a.example").budget == 0
    assert table.of("b.example").budget is None


def test_summary_names_each_entry() -> None:
    table = policies({"=a.example": {"concurrency": 4, "min_delay": 0}, "b.example": {}})
    line = table.summary()
    assert line is not None
    assert "=a.example: factor 10, rest 0-60 s, 4 connections" in line
    assert "b.example: factor 10, rest 1-60 s, 1 connection" in line
    assert policies({}).summary() is None


@pytest.mark.parametrize(("raw", "says"), [
    ({"a.example": {"concurency": 2}}, "FRONTIER_HOST_POLICY['a.example']: unknown field(s) "
                                       "concurency"),
    ({"a.example": {"min_delay": 5, "max_delay": 2}}, "max_delay (2) must be >= min_delay (5)"),
    ({"a.example": {"concurrency": 0}}, "['concurrency'] must be a whole number >= 1, got 0"),
    ({"a.example": {"concurrency": 1.5}}, "['concurrency'] must be a whole number >= 1"),
    ({"a.example": {"concurrency": True}}, "['concurrency'] must be a whole number >= 1"),
    ({"a.example": {"budget": -1}}, "['budget'] must be a whole number of pages >= 0"),
    ({"a.example": {"delay_factor": math.nan}}, "['delay_factor'] must be a number >= 0"),
    ({"a.example": {"min_delay": "soon"}}, "['min_delay'] must be seconds >= 0, got 'soon'"),
    ({"a.example": 2}, "FRONTIER_HOST_POLICY['a.example'] must be a dict of"),
    ({"=": {}}, "a key must be a host suffix such as 'example.com'"),
    ({"a.example": {}, ".a.example.": {}}, "'a.example' is given twice"),
])
def test_a_bad_entry_is_named(raw: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_entries(raw, DEFAULT)
    assert says in str(caught.value)


def test_the_setting_becomes_the_configs_policies() -> None:
    config = FrontierConfig.from_settings(Settings({
        "FRONTIER_MIN_DELAY": 2.0,
        "FRONTIER_HOST_POLICY": '{"=a.example": {"concurrency": 3, "max_delay": 30}}',
    }))
    assert config.host_policies.of("a.example") == HostPolicy(DelayPolicy(10.0, 2.0, 30.0), 3)
    assert config.host_policies.of("b.example").delay == config.policy


def test_a_bad_setting_stops_the_crawl_with_the_entry_named() -> None:
    with pytest.raises(FrontierConfigError, match=r"\['a.example'\]\['concurrency'\]"):
        FrontierConfig.from_settings(Settings({
            "FRONTIER_HOST_POLICY": {"a.example": {"concurrency": -2}}}))
    with pytest.raises(FrontierConfigError, match="FRONTIER_HOST_POLICY must be a dict"):
        FrontierConfig.from_settings(Settings({"FRONTIER_HOST_POLICY": "[1, 2]"}))


def test_scrapy_pacing_settings_become_the_frontiers() -> None:
    """A project's DOWNLOAD_DELAY is every host's minimum rest; each DOWNLOAD_SLOTS entry an
    exact per-host entry (its delay a minimum rest, its concurrency the connections)."""
    from scrapy_frontier.settings import scrapy_pacing

    settings = Settings({"FRONTIER_MIN_DELAY": 0.5, "FRONTIER_MAX_DELAY": 30})
    settings.set("DOWNLOAD_DELAY", 2, "project")
    settings.set("DOWNLOAD_SLOTS", {"a.example": {"concurrency": 4, "delay": 0},
                                    "slow.example": {"delay": 45}}, "project")
    pacing = scrapy_pacing(settings)
    assert pacing.min_delay == 2
    assert pacing.entries == {"=a.example": {"concurrency": 4},
                              "=slow.example": {"min_delay": 45, "max_delay": 45}}
    assert len(pacing.lines) == 3
    config = FrontierConfig.from_settings(settings)
    assert config.policy == DelayPolicy(10.0, 2.0, 30.0)
    assert config.host_policies.of("a.example").connections == 4
    assert config.host_policies.of("sub.a.example").connections == 1  # a slot is one host
    assert config.host_policies.of("slow.example").delay == DelayPolicy(10.0, 45.0, 45.0)
    # Scrapy's default DOWNLOAD_DELAY (0, default priority) asks for nothing.
    assert not scrapy_pacing(Settings()).any


def test_the_addon_takes_scrapys_delays_over_so_none_is_paid_twice() -> None:
    from scrapy_frontier import Addon

    settings = Settings()
    settings.set("DOWNLOAD_DELAY", 1, "project")
    settings.set("DOWNLOAD_SLOTS", {"a.example": {"concurrency": 2, "delay": 3}}, "project")
    settings.set("FRONTIER_HOST_POLICY", {"=a.example": {"concurrency": 3}}, "project")
    Addon().update_settings(settings)
    assert settings.getfloat("DOWNLOAD_DELAY") == 0
    assert settings.getdict("DOWNLOAD_SLOTS") == {"a.example": {"concurrency": 2, "delay": 0}}
    assert settings.getfloat("FRONTIER_MIN_DELAY") == 1
    config = FrontierConfig.from_settings(settings)
    assert config.policy.min_delay == 1
    # The frontier's own entry wins over the slot's, but Scrapy's downloader opens only the
    # slot's concurrency for the host: that caps it, with a warning.
    assert config.host_policies.of("a.example") == HostPolicy(DelayPolicy(10.0, 1.0, 60.0), 2)
    [warning] = config.host_policies.warnings
    assert "'=a.example'" in warning and "DOWNLOAD_SLOTS['a.example']" in warning


def test_a_download_delay_below_the_minimum_rest_lowers_nothing() -> None:
    from scrapy_frontier import Addon

    settings = Settings()
    settings.set("DOWNLOAD_DELAY", 0.25, "project")
    Addon().update_settings(settings)
    assert settings.getfloat("DOWNLOAD_DELAY") == 0
    assert FrontierConfig.from_settings(settings).policy == DelayPolicy(10.0, 1.0, 60.0)


def test_a_crawl_without_entries_gives_the_frontier_no_lookups() -> None:
    config = FrontierConfig.from_settings(Settings())
    assert config.host_policies.delays is None
    assert config.host_policies.connections is None
    assert not config.host_policies.has_budgets
    config = FrontierConfig.from_settings(Settings({
        "FRONTIER_HOST_POLICY": {"a.example": {"concurrency": 2}}}))
    assert config.host_policies.delays is None  # no entry changes a delay rule
    lookup = config.host_policies.connections
    assert lookup is not None and lookup("www.a.example") == 2 and lookup("b.example") == 1


def test_a_policy_budget_sits_below_a_hosts_own_and_above_the_default() -> None:
    config = FrontierConfig.from_settings(Settings({
        "FRONTIER_HOST_BUDGET": 100,
        "FRONTIER_HOST_BUDGETS": {"own.a.example": 5},
        "FRONTIER_HOST_POLICY": {"a.example": {"budget": 2}}}))
    assert config.budget_for("own.a.example") == 5
    assert config.budget_for("www.a.example") == 2
    assert config.budget_for("b.example") == 100
    budgets = Budgets(100)
    budgets.set("own.a.example", 5)
    budgets.by_policy = config.host_policies.budget_of
    assert [budgets.of(h) for h in ("own.a.example", "www.a.example", "b.example")] == [
        5, 2, 100]
    assert not budgets.count("www.a.example")
    assert budgets.count("www.a.example"), "the policy's budget of 2 is spent"


def test_a_policy_budget_alone_turns_counting_on() -> None:
    budgets = Budgets(0)
    assert not budgets.active
    budgets.by_policy = lambda host: 1 if host == "a" else None
    assert budgets.active and budgets.count("a") and not budgets.count("b")


def test_connections_are_capped_at_what_scrapys_downloader_opens() -> None:
    config = FrontierConfig.from_settings(Settings({
        "CONCURRENT_REQUESTS_PER_DOMAIN": 3,
        "FRONTIER_HOST_POLICY": {"a.example": {"concurrency": 5},
                                 "b.example": {"concurrency": 2}}}))
    assert config.host_policies.of("a.example").connections == 3
    assert config.host_policies.of("b.example").connections == 2
    [warning] = config.host_policies.warnings
    assert "'a.example'" in warning and "CONCURRENT_REQUESTS_PER_DOMAIN" in warning


def test_the_addon_opens_scrapys_downloader_to_the_most_connections() -> None:
    from scrapy_frontier import Addon

    settings = Settings()
    settings.set("FRONTIER_HOST_POLICY", {"a.example": {"concurrency": 4}}, "project")
    Addon().update_settings(settings)
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 4
    assert FrontierConfig.from_settings(settings).host_policies.of("a.example").connections == 4
    plain = Settings()
    Addon().update_settings(plain)
    assert plain.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 1
    # The project's own value wins, and caps the entries (with a warning).
    own = Settings()
    own.set("FRONTIER_HOST_POLICY", {"a.example": {"concurrency": 4}}, "project")
    own.set("CONCURRENT_REQUESTS_PER_DOMAIN", 2, "project")
    Addon().update_settings(own)
    config = FrontierConfig.from_settings(own)
    assert config.host_policies.of("a.example").connections == 2
    assert config.host_policies.warnings


# -- steered entries (scrapy frontier policy) ------------------------------------------------


def test_a_steered_entry_changes_the_fields_it_gives_and_clearing_puts_the_setting_back() -> None:
    table = policies({"example.com": {"concurrency": 2, "delay_factor": 5}})
    setting = table.of("www.example.com")
    assert table.steer({"example.com": {"min_delay": 3}}) == []
    steered = table.of("www.example.com")
    # What the steered entry leaves out comes from the setting's entry of the same key.
    assert steered == HostPolicy(DelayPolicy(5.0, 3.0, 60.0), 2)
    assert table.note("www.example.com") == "policy (steered): factor 5, rest 3-60 s, " \
                                            "2 connections"
    assert table.delays is not None and table.delay_of("example.com").min_delay == 3
    table.steer({})
    assert table.of("www.example.com") is setting
    assert table.note("example.com") == "policy: factor 5, rest 1-60 s, 2 connections"


def test_a_new_steered_key_is_whole_and_the_most_specific_wins() -> None:
    table = policies({"example.com": {"concurrency": 2}})
    table.steer({"=api.example.com": {"delay_factor": 1, "budget": 7}})
    api = table.of("api.example.com")
    assert api == HostPolicy(DelayPolicy(1.0, 1.0, 60.0), 1, 7)
    assert table.of("www.example.com").connections == 2
    assert table.has_budgets and table.budget_of("api.example.com") == 7
    assert table.of("other.example") is DEFAULT and table.note("other.example") is None


def test_a_bad_steered_entry_is_named_and_left_out_and_the_others_hold() -> None:
    table = policies({})
    said = table.steer({"a.example": {"min_delay": 5, "max_delay": 2},
                        "b.example": "not json",
                        "c.example": {"delay_factor": 0}})
    assert len(said) == 2
    assert "scrapy frontier policy['a.example']: max_delay (2) must be >= min_delay" in said[0]
    assert "scrapy frontier policy['b.example'] must be a dict" in said[1]
    assert set(table.steered) == {"c.example"}
    assert table.of("a.example") is DEFAULT


def test_whatever_a_store_holds_is_refused_by_key_and_never_raised() -> None:
    table = policies({})
    said = table.steer({"a.example": {"budget": int("9" * 400)},
                        "b.example": {"min_delay": [1]},
                        "c.example": {"budget": 2},
                        "C.example.": {"delay_factor": 1}})
    assert len(said) == 3
    assert "['budget'] must be a whole number of pages" in said[0]
    assert "['min_delay'] must be seconds >= 0" in said[1]
    assert "'c.example' is given twice" in said[2]
    assert table.budget_of("c.example") == 2 and set(table.steered) == {"c.example"}


def test_where_connections_are_fixed_a_steered_concurrency_is_refused() -> None:
    table = policies({"example.com": {"concurrency": 3}})
    table.connections_fixed = "on Redis (each host's connections are fixed when it is queued)"
    with pytest.raises(ValueError, match="concurrency cannot change on a running crawl on Redis"):
        table.steered_entry("=a.example.com", {"concurrency": 2})
    said = table.steer({"=a.example.com": {"concurrency": 2}, "=b.example.com": {"budget": 1}})
    assert len(said) == 1 and set(table.steered) == {"=b.example.com"}
    # A new, more specific key keeps the connections the setting gives the host, and says so.
    assert table.connections_of("b.example.com") == 3
    assert table.note("b.example.com") == "policy (steered): factor 10, rest 1-60 s, " \
                                          "3 connections, budget 1"


def test_a_steered_concurrency_is_capped_at_what_scrapys_downloader_opens() -> None:
    config = FrontierConfig.from_settings(Settings({"CONCURRENT_REQUESTS_PER_DOMAIN": 2}))
    table = config.host_policies
    said = table.steer({"a.example": {"concurrency": 5}})
    assert table.connections_of("a.example") == 2
    assert said == ["scrapy frontier policy['a.example'] asks for 5 connections; "
                    "CONCURRENT_REQUESTS_PER_DOMAIN lets Scrapy's downloader open 2, so the "
                    "host gets 2 (raise CONCURRENT_REQUESTS_PER_DOMAIN to give it more)"]


def test_the_configs_policies_know_where_connections_cannot_be_steered() -> None:
    assert FrontierConfig.from_settings(Settings({})).host_policies.connections_fixed is None
    redis = FrontierConfig.from_settings(Settings({"FRONTIER_BACKEND": "redis"}))
    assert "on Redis" in (redis.host_policies.connections_fixed or "")
    by_ip = FrontierConfig.from_settings(Settings({"FRONTIER_IP_POLITENESS": True}))
    assert "FRONTIER_IP_POLITENESS" in (by_ip.host_policies.connections_fixed or "")
