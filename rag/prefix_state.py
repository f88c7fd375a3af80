"""The model's reading of a prompt's fixed start (its system turn), kept on disk.

llama.cpp reads a prompt before it writes the first token, and in one process it reads again only
what differs from the prompt before. A new process has read nothing: the system turn (~230 tokens
of the answer prompt) would cost ~2.5 s before every first answer. `PrefixStates.restore` gives the
context that reading from a file instead (~7 MB, loaded in ~10 ms), or reads it once and saves it;
llama-cpp-python's prefix reuse then reads only the rest. A file is named by a hash of everything
its state depends on (the model and its weight layout, llama.cpp's version and build, the context
size, the prefix text), so a changed prompt or engine gets a new file; a file that does not load is
read again and replaced.
"""

import ctypes
import hashlib
import os
import struct
import tempfile
from pathlib import Path

import numpy

MAGIC = b"rag-prefix-state-1\n"
KEEP_FILES = 8   # prefixes of other prompts or builds beyond these, oldest first, are deleted
SENTINEL = "\x00rag-prefix-end\x00"


class PrefixStates:
    """Saved KV states of system turns for one loaded llama_cpp.Llama."""

    def __init__(self, llama, folder: Path, identity: str):
        """`identity` names the model file and settings the state depends on (with llama.cpp's version
        and build, added here)."""
        import llama_cpp
        from llama_cpp import llama_chat_format

        self.llama = llama
        self.folder = Path(folder)
        self._api = llama_cpp
        self._identity = "\n".join([identity, llama_cpp.__version__, str(llama.n_ctx()),
                                    llama_cpp.llama_print_system_info().decode("utf-8", "replace")])
        self._formatter = llama_chat_format.Jinja2ChatFormatter(
            template=llama.metadata.get("tokenizer.chat_template", ""), eos_token="", bos_token="")

    def restore(self, messages: list[dict]) -> str:
        """Before a chat completion of `messages`: make the context hold their system turn. Returns
        'held' (it already did), 'loaded' (from its file), 'read' (read now and saved) or 'none'
        (no system turn, or the chat template has no place for one)."""
        tokens = self.prefix_tokens(messages)
        if not tokens:
            return "none"
        if self.llama.n_tokens >= len(tokens) and self.llama.input_ids[:len(tokens)].tolist() == tokens:
            return "held"
        path = self.folder / f"prefix-{self._key(tokens)}.state"
        if self._load(path, tokens):
            return "loaded"
        self.llama.reset()
        self.llama.eval(tokens)
        self._save(path, tokens)
        return "read"

    def chat_prompt(self, messages: list[dict]) -> str:
        """The prompt text of `messages` under the model's chat template, up to where the reply begins."""
        return self._formatter(messages=messages).prompt

    def prefix_tokens(self, messages: list[dict]) -> list[int]:
        """The tokens of the chat prompt up to where the first message after the system turn begins."""
        if len(messages) < 2 or messages[0].get("role") != "system":
            return []
        probe = [messages[0], {"role": messages[1].get("role", "user"), "content": SENTINEL}]
        prompt = self.chat_prompt(probe)
        if SENTINEL not in prompt:
            return []
        return self.llama.tokenize(prompt.split(SENTINEL)[0].encode("utf-8"), add_bos=False, special=True)

    def _key(self, tokens: list[int]) -> str:
        digest = hashlib.sha256(self._identity.encode("utf-8"))
        digest.update(numpy.asarray(tokens, dtype="<i4").tobytes())
        return digest.hexdigest()[:24]

    def _load(self, path: Path, tokens: list[int]) -> bool:
        """Set the context to the saved state, if the file holds one for exactly these tokens."""
        try:
            data = path.read_bytes()
        except OSError:
            return False
        header = len(MAGIC) + 4 + 4 * len(tokens)
        if not data.startswith(MAGIC) or len(data) <= header \
                or struct.unpack_from("<I", data, len(MAGIC))[0] != len(tokens) \
                or numpy.frombuffer(data, dtype="<i4", count=len(tokens), offset=len(MAGIC) + 4).tolist() != tokens:
            return False
        state = (ctypes.c_uint8 * (len(data) - header)).from_buffer_copy(data, header)
        self.llama.reset()
        if self._api.llama_state_set_data(self.llama.ctx, state, len(state)) != len(state):
            return False   # restore() reads the prefix again into a cleared context
        self.llama.input_ids[:len(tokens)] = tokens
        self.llama.n_tokens = len(tokens)
        self.llama._requires_eval = True   # as Llama.load_state leaves it: the next prompt decodes its rest
        return True

    def _save(self, path: Path, tokens: list[int]) -> None:
        """Write the context's state for `tokens` (temp file, then rename); a cache, so a failure is ignored."""
        size = self._api.llama_state_get_size(self.llama.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = self._api.llama_state_get_data(self.llama.ctx, buffer, size)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".prefix-")
        except OSError:
            return
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(MAGIC + struct.pack("<I", len(tokens)) + numpy.asarray(tokens, dtype="<i4").tobytes())
                out.write(memoryview(buffer)[:written])
            os.replace(temporary, path)
            self._forget_old(keep=path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)

    def _forget_old(self, keep: Path) -> None:
        saved = sorted(self.folder.glob("prefix-*.state"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in [p for p in saved if p != keep][KEEP_FILES - 1:]:
            old.unlink(missing_ok=True)
