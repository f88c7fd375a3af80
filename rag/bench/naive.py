"""The baseline `rag bench` compares against: llama-index's stock RAG over the same corpus and models.

One llama-index VectorStoreIndex over whole abstracts (its default node parser, which
keeps an abstract whole), `as_query_engine(similarity_top_k=5)` with llama-index's
default chat prompts, answered by the same LLM backend rag uses and embedded by the same
embedding model. No keyword search, no citations, no grounding check, no abstention
gate: what a first llama-index prototype does. Only `rag bench` imports this module.
"""

import re
import time
from dataclasses import dataclass, field
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, LLMMetadata, MessageRole
from llama_index.core.llms import CustomLLM
from pydantic import PrivateAttr

from rag.answer import count_tokens
from rag.corpus import Paper
from rag.embedding import load_embed_model
from rag.settings import Settings

NAIVE_TOP_K = 5
# The stock prompt never asks the model to refuse; these are the ways it says it cannot answer.
_REFUSAL = re.compile(r"\b(?:(?:does|do) not|doesn't|don't|cannot|can't|unable to) (?:provide|mention|contain|"
                      r"include|specify|say|answer|determine|find)|\bno (?:information|mention)\b|"
                      r"\bnot (?:mentioned|provided|specified|stated)\b", re.IGNORECASE)


@dataclass
class NaiveAnswer:
    """What the baseline returned for one question, with the same timing names as rag's Answer."""

    question: str
    answer: str
    source_ids: list[str]
    timings: dict = field(default_factory=dict)

    @property
    def abstained(self) -> bool:
        return not self.answer.strip() or bool(_REFUSAL.search(self.answer))


class NaivePipeline:
    """VectorStoreIndex over whole abstracts plus a streaming query engine, built in memory."""

    def __init__(self, settings: Settings, papers: list[Paper], model):
        self.embed_model = load_embed_model(settings.embed_model, settings.embed_batch_size)
        self.llm = ChatModelLLM(model, settings.n_ctx, settings.max_tokens)
        documents = [Document(text=p.text, id_=p.paper_id, metadata={"paper_id": p.paper_id},
                              excluded_embed_metadata_keys=["paper_id"], excluded_llm_metadata_keys=["paper_id"])
                     for p in papers]
        started = time.perf_counter()
        self.index = VectorStoreIndex.from_documents(documents, embed_model=self.embed_model)
        self.build_s = time.perf_counter() - started
        self.retriever = self.index.as_retriever(similarity_top_k=NAIVE_TOP_K)
        self.query_engine = self.index.as_query_engine(similarity_top_k=NAIVE_TOP_K, llm=self.llm, streaming=True)

    def search(self, question: str) -> list[str]:
        """The ids of the top papers for `question`."""
        return [hit.node.metadata["paper_id"] for hit in self.retriever.retrieve(question)]

    def ask(self, question: str) -> NaiveAnswer:
        """Stream the query engine's answer, timing its first token and the whole."""
        started = time.perf_counter()
        self.llm.prompt_tokens = 0
        response = self.query_engine.query(question)
        first_token_s, parts = None, []
        for delta in response.response_gen:
            if first_token_s is None and delta:
                first_token_s = time.perf_counter() - started
            parts.append(delta)
        timings = {"first_token_s": first_token_s, "total_s": time.perf_counter() - started,
                   "prompt_tokens": self.llm.prompt_tokens}
        return NaiveAnswer(question, "".join(parts).strip(),
                           [n.node.metadata["paper_id"] for n in response.source_nodes], timings)


class ChatModelLLM(CustomLLM):
    """A llama-index LLM that streams from one of rag's backends (llm.py), so both pipelines share it."""

    context_window: int = 4096
    num_output: int = 384
    prompt_tokens: int = 0
    _model: Any = PrivateAttr()

    def __init__(self, model, context_window: int, num_output: int):
        super().__init__(context_window=context_window, num_output=num_output)
        self._model = model

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output,
                           is_chat_model=True, model_name=self._model.model)

    def _deltas(self, messages: list[dict]):
        self.prompt_tokens = sum(count_tokens(m["content"]) for m in messages)
        return self._model.stream(messages, None, self.num_output)

    def stream_chat(self, messages, **kwargs):
        wanted = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        text = ""
        for delta in self._deltas(wanted):
            text += delta
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)

    def chat(self, messages, **kwargs):
        last = None
        for last in self.stream_chat(messages, **kwargs):
            pass
        return last or ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=""))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        text = ""
        for delta in self._deltas([{"role": "user", "content": prompt}]):
            text += delta
            yield CompletionResponse(text=text, delta=delta)

    def complete(self, prompt: str, formatted: bool = False, **kwargs):
        last = None
        for last in self.stream_complete(prompt, formatted, **kwargs):
            pass
        return last or CompletionResponse(text="")
