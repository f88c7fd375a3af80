"""Benchmark: ingest (cold, unchanged) and warm search latency, embedded store vs a Chroma server.

Run: .venv/bin/python tests/bench_index.py [--queries N]
Prints one table; both stores are measured in the same run, side by side.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from servers import chroma_server

from rag.embedding import load_embed_model
from rag.index import describe_index, ingest
from rag.retrieve import Retriever
from rag.settings import Settings

QUESTIONS = [
    "what methods reduce reasoning length?", "Which papers study grokking?", "merging fine-tuned models",
    "long-form speech generation", "LLM as a judge", "fairness and equalized odds", "k-means local optimality",
    "planning in model-free reinforcement learning", "causal representation learning", "graph neural networks",
    "image geolocalization", "sparse autoencoders for interpretability", "multi-agent coordination",
    "knowledge graph completion", "robot manipulation with point clouds", "layer pruning of LLMs",
    "activation steering", "visual reasoning in vision-language models", "combinatorial auctions",
    "online learning regret bounds", "self-play reinforcement learning", "neural responses to images",
]
DATA = Path(__file__).resolve().parent.parent / "data"


def measure(settings: Settings, n_queries: int) -> dict:
    cold = ingest(settings, progress=False)
    again = ingest(settings, progress=False)
    with Retriever(settings) as retriever:
        retriever.search("warm-up")
        latencies = []
        for i in range(n_queries):
            started = time.perf_counter()
            retriever.search(QUESTIONS[i % len(QUESTIONS)])
            latencies.append(1000 * (time.perf_counter() - started))
    info = describe_index(settings)
    return {"cold ingest s": cold.seconds, "unchanged ingest s": again.seconds, "chunks": cold.chunks,
            "size MB": info.size_bytes / 1e6 if info.size_bytes else float("nan"),
            "search p50 ms": statistics.median(latencies),
            "search p90 ms": statistics.quantiles(latencies, n=10)[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=44)
    args = parser.parse_args()
    started = time.perf_counter()
    load_embed_model(Settings().embed_model, Settings().embed_batch_size)  # load once, so neither store's cold ingest pays for it
    print(f"embedding model load: {time.perf_counter() - started:.1f} s")
    with tempfile.TemporaryDirectory() as tmp, chroma_server(Path(tmp) / "server") as url:
        rows = {
            "embedded": measure(Settings(home=Path(tmp) / "home", corpus=DATA), args.queries),
            "server": measure(Settings(home=Path(tmp) / "home2", corpus=DATA, chroma_url=url), args.queries),
        }
    names = list(rows["embedded"])
    print(f"{'':<10}" + "".join(f"{n:>20}" for n in names))
    for store, row in rows.items():
        print(f"{store:<10}" + "".join(f"{row[n]:>20.3f}" for n in names))
    print(f"{'server/emb':<10}" + "".join(f"{rows['server'][n] / rows['embedded'][n]:>20.2f}" for n in names))


if __name__ == "__main__":
    main()
