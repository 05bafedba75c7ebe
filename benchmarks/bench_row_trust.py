"""The cost of a stored request's trust check, beside the codec before it (same run).

Every row a shared store holds is sealed (FRONTIER_SIGNING_KEYS: a 16-byte keyed BLAKE2b
tag) or read by the restricted unpickler; a private JOBDIR is read as before. This times
``encode`` + ``decode`` of two typical rows -- a plain ``Request`` with a callback and a
small meta (the compact form), and a ``FormRequest`` (the full form) -- under:

* ``before``: the codec of the release before the check, loaded from git (``--base``);
* ``private``: a JOBDIR only its user can write (no check);
* ``shared``: Redis, or a JOBDIR others may write, without keys (restricted unpickler);
* ``sealed``: any store with FRONTIER_SIGNING_KEYS (seal on write, verify on read).

    python benchmarks/bench_row_trust.py              # writes benchmarks/results/row_trust.json
    python benchmarks/bench_row_trust.py --quick      # fewer rounds, writes nothing

Each figure is the median of ``--rounds`` rounds of ``--rows`` rows, in microseconds per
row; the variants alternate within a round, so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy import FormRequest, Request, Spider

from scrapy_frontier.codec import RowTrust, request_codec

ROOT = Path(__file__).resolve().parents[1]
KEY = "a-benchmark-signing-key-0123456789"


class BenchSpider(Spider):
    name = "bench"

    def parse_item(self, response: Any) -> None:
        pass


def old_codec(base: str) -> Any:
    """``request_codec`` of scrapy_frontier/codec.py at git revision ``base``."""
    source = subprocess.run(["git", "show", f"{base}:scrapy_frontier/codec.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "codec_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("codec_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["codec_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.request_codec


def rows(spider: BenchSpider) -> dict[str, Any]:
    return {
        "compact": Request("https://www.example.com/catalogue/page-7.html?sort=price",
                           callback=spider.parse_item, priority=3,
                           meta={"depth": 2, "download_slot": "www.example.com"}),
        "full": FormRequest("https://www.example.com/search", formdata={"q": "books"},
                            callback=spider.parse_item, meta={"depth": 1}),
    }


def time_round(codec: Any, request: Any, n: int) -> float:
    encode, decode = codec.encode, codec.decode
    start = time.perf_counter()
    for _ in range(n):
        decode(encode(request))
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="00a51d5", help="git revision of the codec before")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 2000, 3
    spider = BenchSpider()
    codecs = {
        "before": old_codec(args.base)(spider),
        "private": request_codec(spider, trust=RowTrust(private=True)),
        "shared": request_codec(spider, trust=RowTrust(private=False)),
        "sealed": request_codec(spider, trust=RowTrust.of([KEY], private=False)),
    }
    results: dict[str, dict[str, float]] = {}
    for shape, request in rows(spider).items():
        times: dict[str, list[float]] = {name: [] for name in codecs}
        for _ in range(args.rounds):
            for name, codec in codecs.items():
                times[name].append(time_round(codec, request, args.rows))
        med = {name: statistics.median(t) for name, t in times.items()}
        results[shape] = {**{f"{k}_us": round(v, 3) for k, v in med.items()},
                          **{f"{k}_ratio": round(v / med["before"], 3)
                             for k, v in med.items() if k != "before"},
                          "bytes_before": len(codecs["before"].encode(request)),
                          "bytes_sealed": len(codecs["sealed"].encode(request))}
        print(f"{shape:8s} " + "  ".join(f"{k} {v:6.2f} us" for k, v in med.items()) +
              "   ratios " + "  ".join(f"{k} {v / med['before']:.3f}"
                                       for k, v in med.items() if k != "before"))
    if args.quick:
        return
    out = ROOT / "benchmarks" / "results" / "row_trust.json"
    out.write_text(json.dumps({
        "what": "encode + decode of one stored request, microseconds (median of rounds)",
        "rows": args.rows, "rounds": args.rounds, "base": args.base,
        "python": platform.python_version(), "machine": platform.machine(),
        "results": results}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
