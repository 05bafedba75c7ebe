"""The page history's simhash with numpy, and the same function in plain Python.

``scrapy_frontier.core.simhash.simhash`` counts the per-bit votes with numpy;
``simhash_reference`` is the same function in plain Python (the tests check that both give
the same value). The recrawl middleware computes one simhash per HTML page, on the reactor
thread, so its time is time the crawl does nothing else. This times both on pages of
10 KB to 1 MB (real HTML from Debian's postgresql-doc-15 when it is installed, else text of
the same size drawn from its vocabulary), with a cold word cache (a site's first page) and a
warm one (its later pages), and the cost of importing numpy in a fresh interpreter.

Usage::

    python benchmarks/bench_simhash.py            # prints a table, writes results/simhash.json
"""

from __future__ import annotations

import glob
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "simhash.json"
DOCS = "/usr/share/doc/postgresql-doc-15/html/*.html"
SIZES = (10_000, 100_000, 1_000_000)


def _text(size: int) -> tuple[str, str]:
    """About ``size`` characters of page text, and where it came from."""
    pages = sorted(glob.glob(DOCS))
    if pages:
        text = ""
        for path in pages:
            text += Path(path).read_text(errors="replace")
            if len(text) >= size:
                return text[:size], "postgresql-doc-15 HTML"
    rng = random.Random(size)
    vocabulary = [f"w{rng.randrange(20_000)}" for _ in range(5_000)]
    words: list[str] = []
    while sum(map(len, words)) + len(words) < size:
        words.append(rng.choice(vocabulary))
    return " ".join(words)[:size], "generated words"


def _seconds(func: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return min(times)


def _import_numpy_seconds(repeat: int = 5) -> float:
    code = "import time; t = time.perf_counter(); import numpy; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(repeat)]
    return statistics.median(runs)


def main() -> int:
    from scrapy_frontier.core import simhash as module

    rows = []
    for size in SIZES:
        text, source = _text(size)
        assert module.simhash(text) == module.simhash_reference(text)

        def cold(text: str = text) -> object:
            module._word_cache.clear()
            return module.simhash(text)

        warm = _seconds(lambda text=text: module.simhash(text), 7)  # type: ignore[misc]
        rows.append({
            "bytes": len(text.encode()), "source": source,
            "numpy_cold_ms": 1000 * _seconds(cold, 7),
            "numpy_warm_ms": 1000 * warm,
            "python_ms": 1000 * _seconds(lambda text=text: module.simhash_reference(text),
                                         3 if size < 1_000_000 else 1),
        })
    import_ms = 1000 * _import_numpy_seconds()
    print(f"simhash of one page (best of several runs); importing numpy: {import_ms:.0f} ms")
    print(f"{'page':>10}  {'numpy, first page':>18}  {'numpy, later':>13}  "
          f"{'plain Python':>13}  {'ratio':>6}")
    for row in rows:
        print(f"{row['bytes']:>8,} B  {row['numpy_cold_ms']:>15.1f} ms  "
              f"{row['numpy_warm_ms']:>10.1f} ms  {row['python_ms']:>10.1f} ms  "
              f"{row['python_ms'] / row['numpy_warm_ms']:>5.0f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"import_numpy_ms": import_ms, "pages": rows}, indent=2))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
