"""Benchmark: ingest (cold, unchanged) and warm search latency, embedded store vs a Chroma server.

Run: .venv/bin/python benchmarks/bench_index.py [--rounds N]
Prints one table; both stores are measured in the same run, side by side.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the test helpers: servers.py, fakes.py

from servers import chroma_server  # noqa: E402

from rag.bench.measure import measure_search
from rag.embedding import load_embed_model
from rag.ingest import describe_index, ingest
from rag.retrieve import Retriever
from rag.settings import Settings

DATA = Path(__file__).resolve().parent.parent / "data"


def measure(settings: Settings, rounds: int) -> dict:
    cold = ingest(settings, progress=False)
    again = ingest(settings, progress=False)
    with Retriever(settings) as retriever:
        searched = measure_search(retriever.search, rounds)
    info = describe_index(settings)
    return {"cold ingest s": cold.seconds, "unchanged ingest s": again.seconds, "chunks": cold.chunks,
            "size MB": info.size_bytes / 1e6 if info.size_bytes else float("nan"),
            "search p50 ms": searched["search_p50_ms"], "search p95 ms": searched["search_p95_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="times each question of rag.bench is searched")
    args = parser.parse_args()
    started = time.perf_counter()
    load_embed_model(Settings().embed_model, Settings().embed_batch_size)  # load once, so neither store's cold ingest pays for it
    print(f"embedding model load: {time.perf_counter() - started:.1f} s")
    with tempfile.TemporaryDirectory() as tmp, chroma_server(Path(tmp) / "server") as url:
        rows = {
            "embedded": measure(Settings(home=Path(tmp) / "home", corpus=DATA), args.rounds),
            "server": measure(Settings(home=Path(tmp) / "home2", corpus=DATA, chroma_url=url), args.rounds),
        }
    names = list(rows["embedded"])
    print(f"{'':<10}" + "".join(f"{n:>20}" for n in names))
    for store, row in rows.items():
        print(f"{store:<10}" + "".join(f"{row[n]:>20.3f}" for n in names))
    print(f"{'server/emb':<10}" + "".join(f"{rows['server'][n] / rows['embedded'][n]:>20.2f}" for n in names))


if __name__ == "__main__":
    main()
