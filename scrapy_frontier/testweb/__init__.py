"""A multi-host test web on loopback, and an auditor for the crawls run against it.

Each simulated host listens on its own 127.0.x.y address (x >= 1), so Scrapy sees distinct
hosts and keys politeness per host exactly as on the real web, without leaving this machine.
Importing this package does not install a Twisted reactor.
"""

from scrapy_frontier.testweb.audit import AuditReport, audit
from scrapy_frontier.testweb.changes import ChangeModel, ChangeOptions, GroundTruth
from scrapy_frontier.testweb.docs import doc_tree_hosts
from scrapy_frontier.testweb.log import LogEntry, read_log
from scrapy_frontier.testweb.process import ServerProcess
from scrapy_frontier.testweb.server import TestWebServer
from scrapy_frontier.testweb.spec import HostSpec, WebSpec, skewed_web, wide_web

__all__ = [
    "AuditReport",
    "ChangeModel",
    "ChangeOptions",
    "GroundTruth",
    "HostSpec",
    "LogEntry",
    "ServerProcess",
    "TestWebServer",
    "WebSpec",
    "audit",
    "doc_tree_hosts",
    "read_log",
    "skewed_web",
    "wide_web",
]
