"""rag: ask questions of research-paper abstracts; answers cite their papers.

Importing the package switches every library it uses to offline mode first.
"""

from rag import offline

offline.apply()

__version__ = "0.1.0"
