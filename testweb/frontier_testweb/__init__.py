"""A multi-host test web on loopback, and an auditor for the crawls run against it.

Each simulated host listens on its own 127.0.x.y address (x >= 1), so Scrapy sees distinct
hosts and keys politeness per host exactly as on the real web, without leaving this machine.
Importing this package does not install a Twisted reactor.
"""

from frontier_testweb.audit import AuditReport, audit
from frontier_testweb.changes import ChangeModel, ChangeOptions, GroundTruth, edit_page
from frontier_testweb.docs import doc_tree_hosts
from frontier_testweb.log import LogEntry, read_log
from frontier_testweb.process import ServerProcess
from frontier_testweb.server import TestWebServer
from frontier_testweb.spec import HostSpec, WebSpec, skewed_web, wide_web

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
    "edit_page",
    "read_log",
    "skewed_web",
    "wide_web",
]
