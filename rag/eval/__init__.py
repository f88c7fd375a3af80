"""`rag eval`: how well retrieval and answers do on the eval's question sets.

questions (the sets, their tune and test parts) -> retrieval (ranking metrics) and answers
(answer metrics, judged by judge.py) -> run (one run, its manifest, the CI gate) -> report
(files on disk, diffs). overlap measures how much wording a question shares with its abstract.
The core pipeline never imports this package.
"""
