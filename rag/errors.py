"""The errors a user can cause, each with a message that says what to do next.

The CLI turns a RagError into one line on stderr and an exit code; anything else
is a bug and keeps its traceback under RAG_DEBUG=1.
"""


class RagError(Exception):
    """Base of every error the user can fix; `exit_code` is what the CLI returns."""

    exit_code = 1


class UsageError(RagError):
    """The request itself is wrong: an empty question, an unknown filter value."""

    exit_code = 2


class CorpusError(RagError):
    """A corpus file breaks the format; names the file and the line."""

    def __init__(self, path, line: int, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        super().__init__(f"{self.path}:{line}: {problem}")


class EvalError(RagError):
    """A questions file breaks the format, or names papers the index does not hold (exit 1, as a
    corpus file that breaks its format)."""


class StoreError(RagError):
    """The vector store cannot be opened, reached or read."""


class BackendError(RagError):
    """The LLM backend is down, timed out or refused the request; `sources` holds what was retrieved
    before it failed (set by the answerer), so the caller can still show them."""

    def __init__(self, message: str, sources: list | None = None):
        super().__init__(message)
        self.sources = list(sources or [])


class PromptError(RagError):
    """A prompt template is missing or does not declare the variables the code fills."""


class ModelError(RagError):
    """A bundled model is missing or cannot be loaded."""


class EngineError(RagError):
    """The local LLM engine cannot run here (a native crash, a missing CPU feature, a corrupt build)."""
