"""`rag bench`: ingest, search and answer figures (measure), beside a naive llama-index pipeline on
the same models (naive), on the bundled corpus or a synthetic one of any size (synthetic).
The core pipeline never imports this package.
"""
