"""Every error scrapy-frontier raises on purpose, in one hierarchy.

Each message names what is wrong (the setting, the file, the Redis keys) and
what to do about it; none advises an action that destroys data.
"""

from __future__ import annotations

import os


class FrontierError(Exception):
    """Base of every error scrapy-frontier raises on purpose."""


class FrontierConfigError(FrontierError, ValueError):
    """A setting has a value the frontier cannot use, or a backend cannot support."""


def require_extra(module: str, extra: str, feature: str) -> None:
    """Import ``module``, or raise a FrontierConfigError saying that ``feature`` needs the
    package extra ``extra`` (``pip install 'scrapy-frontier[extra]'``)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise FrontierConfigError(
            f"{feature} needs the {module!r} package, which cannot be imported ({exc}). "
            f"Install the {extra} extra: pip install 'scrapy-frontier[{extra}]'"
        ) from None


class FrontierCommandError(FrontierError):
    """``scrapy frontier`` cannot do what it was asked; nothing was changed."""


class CommandInterrupted(FrontierCommandError):
    """Ctrl-C stopped ``scrapy frontier`` where it was safe to: the message says what was
    done. The command exits with :attr:`exit_code`, a shell's code for SIGINT."""

    exit_code = 130


class SeedFileBroken(FrontierCommandError):
    """``scrapy frontier seed``'s input cannot be read past some point (gzip on a pipe that
    breaks off): the entries before it were read, and are loaded."""


class StoreError(FrontierError, RuntimeError):
    """The frontier's state cannot be used; the message names it and says what to do."""


class UndecodableRow(StoreError):
    """One saved request cannot be rebuilt (corrupt bytes, or meta that pickles but does
    not unpickle) while the others can: a store sets it aside instead of stopping."""


class UntrustedRow(UndecodableRow):
    """A saved request fails the trust check (a seal that matches no key, no seal where
    rows must be sealed, or a class an unsealed row may not hold): it is set aside unread,
    and ``scrapy frontier quarantine --requeue`` refuses it."""


def requeue_advice(exc: BaseException) -> str:
    """What ``scrapy frontier quarantine --requeue`` does with a row set aside for ``exc``."""
    if isinstance(exc, UntrustedRow):
        return ("It is never unpickled, and scrapy frontier quarantine --requeue refuses it "
                "unless its seal verifies under the keys given then: a client without the "
                "crawl's keys wrote it, or its key was dropped (docs/security.rst)")
    return ("Once the spider can rebuild it, scrapy frontier quarantine --requeue puts it "
            "back")


class MissingCallback(FrontierError, ValueError):
    """A saved request names a callback or errback the spider does not have (any more)."""


class Unserializable(FrontierError):
    """The codec cannot turn this request into bytes."""


class _FileError(StoreError):
    kind = "state file"

    def __init__(self, path: str | os.PathLike[str], problem: str, advice: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.kind} {self.path}: {problem}. {advice}")


class SeenStoreError(_FileError):
    """The seen-set file cannot be used; the message names it and says what to do."""

    kind = "seen-set file"


class HistoryStoreError(_FileError):
    """The page-history file cannot be used; the message names it and says what to do."""

    kind = "page-history file"


class FeedWriteError(StoreError):
    """A feed export's file cannot be written: the pages whose items it holds are not
    recorded as done, so that the next run fetches them again."""


class RedisFrontierError(StoreError):
    """The Redis frontier cannot be used; the message says why and what to do."""


class RedisFrontierUnavailable(RedisFrontierError):
    """Redis did not answer (down, restarting, network): nothing was changed client-side."""


class RedisFrontierDataError(RedisFrontierError):
    """The keys under the frontier's prefix hold data the frontier did not write."""


class RedisFrontierGone(RedisFrontierError):
    """The frontier's keys vanished while it ran (Redis restarted empty, or they were
    deleted): what they held cannot be known, so the crawl must not go on as if finished."""


class RedisFrontierFull(RedisFrontierError):
    """Redis refused a write because it reached ``maxmemory``: nothing stored was dropped."""


class RedisFrontierSettingsError(RedisFrontierError):
    """REDIS_URL / REDIS_PARAMS do not lead to a Redis the frontier can use (not a Redis,
    no such database, a read-only replica, missing permissions); retrying cannot help."""


class RedisFrontierAuthError(RedisFrontierSettingsError):
    """Redis refused the connection: it needs a password, or the one given is wrong."""


class HostlessURL(FrontierError, ValueError):
    """A network URL without a host: it cannot be fetched politely (or at all)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url!r} has no host to be polite to ({reason})")
        self.reason = reason
