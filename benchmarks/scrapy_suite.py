"""Scrapy's own test suite with scrapy-frontier's add-on as every crawler's default.

Runs chosen test files (or node ids) of a Scrapy source tree, in one or more modes:

* ``plain`` -- Scrapy's tests as they are;
* ``addon`` -- ``ADDONS = {"scrapy_frontier.Addon": 0}`` in every crawler's settings;
* ``addon-redis`` -- the add-on with ``FRONTIER_BACKEND = "redis"``, ``REDIS_URL`` of a
  private redis-server (127.0.0.1, a free port, no persistence) that this script starts,
  and frontier / seen-set / history key prefixes of their own for every crawler.

and prints the tests whose outcome differs from the ``plain`` run, side by side, with
totals; ``--out`` gets every outcome as JSON.

The injection is a pytest plugin (this module, loaded with ``-p scrapy_suite``): it
wraps ``scrapy.crawler.Crawler.__init__`` and, after Scrapy has built the crawler's
settings, adds the add-on to ``ADDONS`` and sets the frontier's settings at "default"
priority, so anything a test, its spider or the add-on sets wins. Politeness rests are
off (``FRONTIER_MIN_DELAY``, ``FRONTIER_DELAY_FACTOR``, ``FRONTIER_BACKOFF_BASE``,
``FRONTIER_BACKOFF_MAX`` = 0, ``FRONTIER_RETIRE_AFTER`` = 0, and with Redis
``FRONTIER_REDIS_IDLE_GRACE`` = 0, as there is one worker): this checks the scheduler's
contract with Scrapy, not its rests. Crawls that Scrapy's tests start in a subprocess
(``scrapy crawl``, ``CrawlerProcess`` scripts) get no injection.

Every test has a watchdog (``--timeout`` seconds for its setup, call and teardown):
when it fires, the test is recorded as ``timeout``, the threads' stacks go to the
log, and the pytest process ends; the file then runs again without the tests already
done. A process that does not exit ``--timeout`` seconds after its session (a thread
left running) is ended too, and the threads it left are reported. Tests that failed
only because an earlier test stopped the reactor (pytest-twisted's "twisted reactor has
stopped") run again in a new process. Each pytest process runs in a session of its
own, killed as a whole (mock servers included) when it ends. ``--budget`` bounds each
mode's wall time; tests not reached are ``not-run``. ``--set NAME=VALUE`` adds or
overrides an injected setting (e.g. ``--set FRONTIER_REDIS_IDLE_GRACE=5``).

Use the scrapy-frontier you want on ``PYTHONPATH`` (it shadows an installed one); the
Scrapy tests run from the source tree (``--scrapy-src``), with its own conftest::

    pip download --no-deps --no-binary :all: scrapy==2.19.0 -d /tmp/scrapy-sdist
    mkdir -p /tmp/scrapy-src
    tar xzf /tmp/scrapy-sdist/scrapy-2.19.0.tar.gz -C /tmp/scrapy-src --strip-components=1
    PYTHONPATH=. python benchmarks/scrapy_suite.py --scrapy-src /tmp/scrapy-src \\
        --modes plain,addon --out /tmp/suite.json \\
        tests/test_scheduler.py tests/test_crawl.py tests/test_engine.py
    PYTHONPATH=. python benchmarks/scrapy_suite.py --scrapy-src /tmp/scrapy-src \\
        --modes addon-redis --reuse /tmp/suite.json --out /tmp/suite-redis.json \\
        tests/test_scheduler.py tests/test_crawl.py tests/test_engine.py

``-k EXPR`` and ``--pytest-arg ARG`` (repeatable) go to every pytest run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

MODES = ("plain", "addon", "addon-redis")
PLUGIN = "scrapy_suite"
HERE = Path(__file__).resolve().parent

# Between the harness and the plugin in each pytest process.
ENV_MODE = "SCRAPY_SUITE_MODE"
ENV_RECORD = "SCRAPY_SUITE_RECORD"  # JSON lines, appended by the plugin
ENV_SKIP = "SCRAPY_SUITE_SKIP"  # file of node ids to deselect (already done)
ENV_TIMEOUT = "SCRAPY_SUITE_TIMEOUT"
ENV_REDIS_URL = "SCRAPY_SUITE_REDIS_URL"
ENV_SETTINGS = "SCRAPY_SUITE_SETTINGS"  # JSON: extra settings from --set

ADDON = "scrapy_frontier.Addon"

#: Every injected crawler gets these ("default" priority: any other value wins).
BASE_SETTINGS: dict[str, Any] = {
    "FRONTIER_MIN_DELAY": 0,
    "FRONTIER_DELAY_FACTOR": 0,
    "FRONTIER_BACKOFF_BASE": 0,
    "FRONTIER_BACKOFF_MAX": 0,
    "FRONTIER_RETIRE_AFTER": 0,
}
REDIS_SETTINGS: dict[str, Any] = {
    "FRONTIER_BACKEND": "redis",
    # One worker: nobody else can add work once its own frontier is empty.
    "FRONTIER_REDIS_IDLE_GRACE": 0,
}

WATCHDOG_EXIT = 97
EXIT_WATCHDOG_EXIT = 98
REACTOR_STOPPED = "twisted reactor has stopped"
RETRY_LIMIT = 2000  # tests run again after a reactor stop, per target


# ======================================================================================
# The pytest plugin (runs inside each pytest process)
# ======================================================================================

_state: dict[str, Any] = {"crawlers": 0, "current": None, "timer": None, "outcome": {}}
_record_lock = threading.Lock()


def _record(entry: dict[str, Any]) -> None:
    path = os.environ.get(ENV_RECORD)
    if not path:
        return
    line = json.dumps(entry, default=str) + "\n"
    with _record_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def injected_settings(mode: str, n: int) -> dict[str, Any]:
    """The settings a crawler gets in ``mode``; ``n`` makes its Redis keys its own."""
    values = dict(BASE_SETTINGS)
    if mode == "addon-redis":
        values.update(REDIS_SETTINGS)
        values["REDIS_URL"] = os.environ[ENV_REDIS_URL]
        prefix = f"suite:{os.getpid()}:{n}:%(spider)s"
        values["FRONTIER_REDIS_KEY"] = prefix + ":frontier:"
        values["FRONTIER_REDIS_SEEN_KEY"] = prefix + ":seen:"
        values["FRONTIER_REDIS_HISTORY_KEY"] = prefix + ":history:"
    values.update(json.loads(os.environ.get(ENV_SETTINGS) or "{}"))
    return values


def _install_injection(mode: str) -> None:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    if getattr(Crawler.__init__, "_scrapy_suite", False):
        return
    original = Crawler.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        settings = self.settings
        if settings.frozen:  # pragma: no cover - Crawler copies its settings
            return
        _state["crawlers"] += 1
        for name, value in injected_settings(mode, _state["crawlers"]).items():
            settings.set(name, value, "default")  # only where nothing else set it
        addons = settings["ADDONS"]
        if isinstance(addons, BaseSettings):
            if ADDON not in addons:
                addons.set(ADDON, 0, "default")
        else:
            settings.set("ADDONS", {**(addons or {}), ADDON: 0}, "default")

    __init__._scrapy_suite = True  # type: ignore[attr-defined]
    Crawler.__init__ = __init__  # type: ignore[method-assign]


def pytest_sessionstart(session: Any) -> None:
    # After every pytest_configure: the reactor is chosen and installed by then.
    mode = os.environ.get(ENV_MODE, "plain")
    info: dict[str, Any] = {"event": "session", "mode": mode, "pid": os.getpid()}
    try:
        import scrapy

        info["scrapy"] = f"{scrapy.__version__} {scrapy.__file__}"
        if mode != "plain":
            import scrapy_frontier

            info["scrapy_frontier"] = scrapy_frontier.__file__
            _install_injection(mode)
    except Exception as exc:  # reported, and every test then fails on its own
        info["error"] = repr(exc)
    _record(info)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _record({"event": "result", "nodeid": report.nodeid or "<collection>",
                 "outcome": "error", "reason": "collection: " + _reason(report)})


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    path = os.environ.get(ENV_SKIP)
    skip = set(Path(path).read_text(encoding="utf-8").split("\n")) if path else set()
    if skip:
        kept = [item for item in items if item.nodeid not in skip]
        dropped = [item for item in items if item.nodeid in skip]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session: Any) -> None:
    _record({"event": "collected", "nodeids": [item.nodeid for item in session.items]})


def _watchdog_fire(nodeid: str, seconds: float) -> None:
    if os.environ.get(ENV_RECORD):
        _dump_stacks(f"+++ scrapy_suite watchdog: {nodeid} ran over {seconds:g} s")
    _record({"event": "result", "nodeid": nodeid, "outcome": "timeout",
             "reason": f"no end after {seconds:g} s (watchdog)", "duration": seconds})
    os._exit(WATCHDOG_EXIT)


def pytest_unconfigure(config: Any) -> None:
    """Give the process ``--timeout`` seconds to exit: a thread left running (not a
    daemon) would otherwise keep it alive for ever after its last test."""
    seconds = float(os.environ.get(ENV_TIMEOUT) or 0)
    if seconds > 0 and os.environ.get(ENV_RECORD):
        timer = threading.Timer(seconds, _exit_watchdog_fire, (seconds,))
        timer.daemon = True
        timer.start()


def _exit_watchdog_fire(seconds: float) -> None:
    names = sorted(t.name for t in threading.enumerate()
                   if t is not threading.current_thread() and not t.daemon and t.is_alive()
                   and t is not threading.main_thread())
    _dump_stacks(f"+++ scrapy_suite watchdog: the process did not exit {seconds:g} s after "
                 f"its session (threads left: {', '.join(names) or 'none'})")
    _record({"event": "exit-hang", "seconds": seconds, "threads": names})
    os._exit(EXIT_WATCHDOG_EXIT)


def _dump_stacks(title: str) -> None:
    import faulthandler

    # pytest captures stderr during tests: the stacks go beside the record.
    with open(os.environ[ENV_RECORD] + ".stacks", "a", encoding="utf-8") as f:
        f.write(title + "\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    seconds = float(os.environ.get(ENV_TIMEOUT) or 0)
    _state["current"] = nodeid
    _state["outcome"] = {"outcome": "passed", "reason": "", "start": time.monotonic()}
    _record({"event": "start", "nodeid": nodeid})
    if seconds > 0:
        timer = threading.Timer(seconds, _watchdog_fire, (nodeid, seconds))
        timer.daemon = True
        timer.start()
        _state["timer"] = timer


def pytest_runtest_logreport(report: Any) -> None:
    res = _state["outcome"]
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            res["outcome"] = "xfailed" if report.skipped else "xpassed"
        elif report.skipped:
            res["outcome"] = "skipped"
        elif report.failed:
            res["outcome"] = "failed" if report.when == "call" else "error"
        if report.failed or report.skipped:
            res["reason"] = _reason(report)
        if report.failed:
            res["detail"] = _detail(report)
    elif report.failed and res["outcome"] in ("passed", "xfailed", "skipped"):
        res["outcome"] = "error"  # teardown
        res["reason"] = "teardown: " + _reason(report)
        res["detail"] = _detail(report)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    timer = _state.pop("timer", None)
    if timer is not None:
        timer.cancel()
    res = _state["outcome"]
    _record({"event": "result", "nodeid": nodeid, "outcome": res["outcome"],
             "reason": res["reason"], "detail": res.get("detail"),
             "duration": round(time.monotonic() - res["start"], 3)})
    _state["current"] = None


def _reason(report: Any) -> str:
    """One line: the exception pytest shows last (and where), or a skip's reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skipped: (path, line, reason)
        return _clip(str(longrepr[2]).strip())
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(longrepr or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = _clip(lines[0] if crash is not None else lines[-1])
    if crash is not None and getattr(crash, "path", None):
        line += f" ({Path(crash.path).name}:{crash.lineno})"
    return line


def _detail(report: Any, limit: int = 6000) -> str:
    """The failure as pytest prints it, its end kept when it is long."""
    text = str(report.longrepr or "")
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _clip(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ======================================================================================
# The harness
# ======================================================================================


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private redis-server on 127.0.0.1: no persistence, its files in a temp dir."""

    def __init__(self, binary: str = "redis-server") -> None:
        self.binary = shutil.which(binary) or binary
        self.dir = tempfile.mkdtemp(prefix="scrapy-suite-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """End the pytest process's whole session (mock servers it left included)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGTERM:
            time.sleep(0.5)


def _read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):  # a line cut short by a kill
            out.append(json.loads(line))
    return out


def run_target(target: str, mode: str, args: argparse.Namespace, env_base: dict[str, str],
               deadline: float, logf: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Run one file / node id in ``mode`` until every test has an outcome."""
    results: dict[str, dict[str, Any]] = {}
    collected: list[str] = []
    retried: set[str] = set()
    info: dict[str, Any] = {"runs": 0}
    work = Path(tempfile.mkdtemp(prefix="scrapy-suite-"))
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 1:
                info["budget_exhausted"] = True
                break
            info["runs"] += 1
            record = work / f"record-{info['runs']}.jsonl"
            skip = work / "skip.txt"
            skip.write_text("\n".join(results), encoding="utf-8")
            env = dict(env_base)
            env.update({ENV_MODE: mode, ENV_RECORD: str(record), ENV_SKIP: str(skip),
                        ENV_TIMEOUT: str(args.timeout)})
            cmd = [sys.executable, "-m", "pytest", target, "-p", PLUGIN, "-q",
                   "-p", "no:cacheprovider", "-o", "console_output_style=classic"]
            if args.k:
                cmd += ["-k", args.k]
            cmd += args.pytest_arg
            logf.write(f"\n===== {mode} {target} run {info['runs']}: {' '.join(cmd)}\n")
            logf.flush()
            proc = subprocess.Popen(cmd, cwd=args.scrapy_src, env=env, stdout=logf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                rc = None
            finally:  # also on Ctrl-C / SIGTERM: leave no pytest or mock server behind
                _kill_group(proc)
            if rc is None:
                proc.wait()
            stacks_file = Path(str(record) + ".stacks")
            stacks = (stacks_file.read_text(encoding="utf-8", errors="replace")
                      if stacks_file.exists() else "")
            if stacks:
                logf.write("\n" + stacks)
                logf.flush()
            before = len(results)
            current = None
            for entry in _read_records(record):
                event = entry.get("event")
                if event == "session":
                    info.setdefault("session", entry)
                elif event == "collected":
                    for nodeid in entry["nodeids"]:
                        if nodeid not in collected:
                            collected.append(nodeid)
                elif event == "exit-hang":
                    info.setdefault("exit_hangs", []).append(
                        f"run {info['runs']}: no exit {entry['seconds']:g} s after the "
                        f"session; threads left: {', '.join(entry['threads']) or 'none'}")
                elif event == "start":
                    current = entry["nodeid"]
                elif event == "result":
                    results[entry["nodeid"]] = {k: entry.get(k) for k in
                                                ("outcome", "reason", "duration", "detail")
                                                if entry.get(k) is not None}
                    if entry["nodeid"] == current:
                        current = None
                    if entry.get("outcome") == "timeout" and stacks:
                        results[entry["nodeid"]]["detail"] = stacks[-6000:]
            if current is not None:  # started, never ended: killed or crashed
                if rc is None:
                    results[current] = {"outcome": "not-run",
                                        "reason": "killed at the mode's --budget"}
                else:
                    results[current] = {"outcome": "crashed", "reason":
                                        f"pytest process ended (exit {rc}) during the test"}
            progressed = len(results) > before
            # Once a test has stopped the reactor, pytest-twisted fails every later test
            # of the process with "twisted reactor has stopped": run those again in a
            # new process (the test that stopped it keeps its own outcome).
            collateral = [nodeid for nodeid, res in results.items()
                          if nodeid not in retried and REACTOR_STOPPED in res.get("reason", "")]
            if collateral and rc is not None and len(retried) < RETRY_LIMIT:
                for nodeid in collateral:
                    del results[nodeid]
                    retried.add(nodeid)
                info.setdefault("rerun_after_reactor_stop", []).extend(collateral)
                continue
            if rc is not None and current is None and rc != WATCHDOG_EXIT:
                break  # pytest ran to its end
            if not progressed:
                info["stalled"] = f"no progress (exit {rc})"
                break
            if collected and all(nodeid in results for nodeid in collected):
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for nodeid in collected:
        results.setdefault(nodeid, {"outcome": "not-run", "reason": "mode's --budget spent"})
    for nodeid in retried & results.keys():
        results[nodeid]["rerun"] = "after the reactor stopped in an earlier test"
    return results, info


def run_mode(mode: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    env = dict(os.environ)
    paths = [str(HERE)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[ENV_SETTINGS] = json.dumps(dict(args.set))
    env.setdefault("PYTHONFAULTHANDLER", "1")
    started = time.monotonic()
    deadline = started + args.budget
    results: dict[str, dict[str, Any]] = {}
    targets: dict[str, Any] = {}
    redis: RedisServer | None = None
    log_path = log_dir / f"{mode}.log"
    try:
        if mode == "addon-redis":
            redis = RedisServer(args.redis_server).__enter__()
            env[ENV_REDIS_URL] = redis.url
        with open(log_path, "w", encoding="utf-8") as logf:
            for target in args.targets:
                t0 = time.monotonic()
                res, info = run_target(target, mode, args, env, deadline, logf)
                info["seconds"] = round(time.monotonic() - t0, 1)
                info["tests"] = len(res)
                targets[target] = info
                results.update(res)
                counts = Counter(r["outcome"] for r in res.values())
                note = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
                if info.get("budget_exhausted") and not res:
                    note = "not started: the mode's --budget is spent"
                elif info.get("stalled") and not res:
                    note = f"no test ran ({info['stalled']}): see the log"
                for hang in info.get("exit_hangs", []):
                    note += f"; {hang}"
                print(f"  [{mode}] {target}: {info['seconds']} s, {note}",
                      file=sys.stderr, flush=True)
    finally:
        if redis is not None:
            redis.__exit__()
    session: dict[str, Any] = next(
        (t["session"] for t in targets.values() if "session" in t), {})
    return {"seconds": round(time.monotonic() - started, 1), "results": results,
            "targets": targets, "k": args.k, "log": str(log_path),
            "scrapy": session.get("scrapy"), "scrapy_frontier": session.get("scrapy_frontier"),
            "redis_url": redis.url if redis else None}


def _short(outcome: str | None) -> str:
    return outcome or "-"


def _outcome(run: dict[str, Any], nodeid: str) -> dict[str, Any]:
    """A test's result in a mode's run; ``not-run`` if the run should have had it, ``{}``
    if the run did not select it (another target list or -k, e.g. with --reuse)."""
    res = run["results"].get(nodeid)
    if res is not None:
        return dict(res)
    if run.get("k"):
        return {}
    for target in run.get("targets", {}):
        if nodeid == target or nodeid.startswith((target + "::", target.rstrip("/") + "/")):
            return {"outcome": "not-run", "reason": "not reached"}
    return {}


def report(data: dict[str, Any], modes: list[str]) -> list[dict[str, Any]]:
    runs = data["modes"]
    base = "plain" if "plain" in runs else modes[0]
    others = [m for m in runs if m != base]
    nodeids: list[str] = []
    for m in [base, *others]:
        for nodeid in runs[m]["results"]:
            if nodeid not in nodeids:
                nodeids.append(nodeid)
    diffs: list[dict[str, Any]] = []
    unreached: Counter[str] = Counter()
    for nodeid in nodeids:
        row = {m: _outcome(runs[m], nodeid) for m in [base, *others]}
        outcomes = {m: r.get("outcome") for m, r in row.items()}
        ran = {o for o in outcomes.values() if o not in (None, "not-run")}
        if len(ran) > 1:
            diffs.append({"nodeid": nodeid, **{m: outcomes[m] for m in row},
                          "reasons": {m: r.get("reason") for m, r in row.items()
                                      if r.get("outcome") not in (None, "passed")}})
        for m, outcome in outcomes.items():
            if outcome == "not-run":
                unreached[m] += 1
    cols = [base, *others]
    width = max([len("test")] + [len(d["nodeid"]) for d in diffs])
    widths = [max(len(c), 9) for c in cols]
    print()
    header = "  ".join(f"{c:<{w}}" for c, w in zip(cols, widths, strict=True))
    print(f"{'test':<{width}}  {header}")
    print("-" * (width + sum(w + 2 for w in widths)))
    for d in diffs:
        print(f"{d['nodeid']:<{width}}  "
              + "  ".join(f"{_short(d.get(c)):<{w}}" for c, w in zip(cols, widths, strict=True)))
    if not diffs:
        print("(no test's outcome differs)")
    print()
    for d in diffs:
        for m, why in d["reasons"].items():
            if m != base and why and d.get(m) != d.get(base):
                print(f"{d['nodeid']} [{m}]: {why}")
    print()
    for m in cols:
        run = runs[m]
        counts = Counter(r["outcome"] for r in run["results"].values())
        ndiff = sum(1 for d in diffs if None not in (d.get(m), d.get(base))
                    and d.get(m) != d.get(base))
        extra = f", differs from {base}: {ndiff}" if m != base else ""
        if unreached[m]:
            extra += f" ({unreached[m]} not run: --budget spent)"
        print(f"{m:<12} {len(run['results'])} tests in {run['seconds']} s: "
              + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) + extra)
        for target, info in run.get("targets", {}).items():
            for hang in info.get("exit_hangs", []):
                print(f"{'':<12} {target}: {hang}")
    return diffs


def _setting(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set wants NAME=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="+", help="test files / node ids, relative to --scrapy-src")
    p.add_argument("--scrapy-src", required=True, type=Path,
                   help="unpacked Scrapy source distribution (has tests/ and conftest.py)")
    p.add_argument("--modes", default="plain,addon",
                   help=f"comma-separated, of {', '.join(MODES)} (default plain,addon)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a test may take, setup to teardown (default 60)")
    p.add_argument("--budget", type=float, default=900.0,
                   help="seconds one mode may take in all (default 900)")
    p.add_argument("-k", default=None, help="pytest -k expression for every run")
    p.add_argument("--pytest-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for pytest (repeatable)")
    p.add_argument("--set", action="append", type=_setting, default=[], metavar="NAME=VALUE",
                   help="one more injected setting (JSON value, else a string; repeatable)")
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--reuse", type=Path, default=None,
                   help="an earlier --out file: its modes not run now join the table")
    p.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    p.add_argument("--log-dir", type=Path, default=None,
                   help="pytest output per mode (default: a new temp dir)")
    args = p.parse_args(argv)
    # SIGTERM ends the run like Ctrl-C, so the pytest in flight and redis-server are ended.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown mode(s) {bad}; choose from {MODES}")
    args.scrapy_src = args.scrapy_src.resolve()
    if not (args.scrapy_src / "tests").is_dir():
        p.error(f"{args.scrapy_src} has no tests/ folder")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="scrapy-suite-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    data: dict[str, Any] = {"scrapy_src": str(args.scrapy_src), "targets": args.targets,
                            "k": args.k, "pytest_args": args.pytest_arg,
                            "timeout": args.timeout, "budget": args.budget,
                            "extra_settings": dict(args.set), "modes": {}}
    if args.reuse:
        old = json.loads(args.reuse.read_text(encoding="utf-8"))
        for m, run in old.get("modes", {}).items():
            if m not in modes:
                data["modes"][m] = {**run, "reused_from": str(args.reuse)}
    for mode in modes:
        print(f"mode {mode}: logs in {log_dir / (mode + '.log')}", file=sys.stderr, flush=True)
        data["modes"][mode] = run_mode(mode, args, log_dir)
        if data["modes"][mode].get("scrapy_frontier"):
            print(f"  scrapy_frontier from {data['modes'][mode]['scrapy_frontier']}",
                  file=sys.stderr)
    order = [m for m in MODES if m in data["modes"]]
    data["modes"] = {m: data["modes"][m] for m in order}
    data["differences"] = report(data, order)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
