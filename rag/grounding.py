"""Deterministic support checks: does a source back an answer sentence?

A sentence is supported by a source when every number it states appears in that
source (as a value: '10,000' is in '10K', '30' in 'thirty'), not in another number's place
(`misplaced_numbers`), and its key terms are in
the source or it is close in meaning to one of the source's chunks (cosine similarity
of the local embeddings). A sentence that only restates the question (fewer than
MIN_NEW_TERMS key terms or numbers beyond the question's) answers nothing and is
never supported. No LLM is involved, so
the verdict is the same on every run; answer.py and the eval share it.
"""

import re
from dataclasses import dataclass
from decimal import Decimal

NUMBER = re.compile(r"(\d+(?:[.,]\d+)*)(?:([kKMB])(?![A-Za-z0-9])|\s+(?i:(thousand|million|billion))\b)?")
_NAME_BEFORE = re.compile(r"[A-Za-z][A-Za-z0-9._-]*$")   # a word with a letter, running up to a number's digits
_REFERENCE_YEAR = re.compile(r"\((?:[A-Z][^()]{0,80}?,\s*)?((?:19|20)\d\d)[a-z]?\)")   # (Cuturi, 2013), (2019)
_UNITS = "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()   # 'one' is left out: it is a pronoun more often than a count
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORD_VALUES = {"one": 1} | {word: n for n, word in enumerate(_UNITS, start=2)} \
    | {word: 10 * n for n, word in enumerate(_TENS, start=2)}   # 'one' only after a ten: 'twenty-one'
NUMBER_WORD = re.compile(rf"\b(?i:({'|'.join(_TENS)})(?:-(one|{'|'.join(_UNITS[:8])}))?|({'|'.join(_UNITS)}))\b")
_SCALES = {"k": 1_000, "thousand": 1_000, "m": 1_000_000, "million": 1_000_000, "b": 1_000_000_000,
           "billion": 1_000_000_000}
WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{2,}")
STOPWORDS = frozenset("""
the and for with that this these those from into onto over under than then there their they them
which while where when what who whom whose why how are was were been being has have had does did
doing not but can could should would may might must will shall its our your his her also such via
using use used based paper papers work works study studies show shows shown propose proposes
proposed present presents approach method methods model models new more most less both each other
about across after before between through during within without among all any some many much very
""".split())
MIN_TERM_OVERLAP = 0.6        # enough key terms present on their own
MIN_SIMILARITY = 0.55         # or close in meaning ...
MIN_TERM_OVERLAP_IF_SIMILAR = 0.5   # ... with half of its key terms present
MIN_NEW_TERMS = 2             # key terms or numbers an answer adds to its question
NUMBER_CONTEXT_WORDS = 4      # words read on each side of a number to tell what it is a number of
MIN_SWAP_TERMS = 2            # key terms a sentence's number shares with another number's place in the source


@dataclass(frozen=True)
class Support:
    """The verdict on one sentence against one source, with its evidence."""

    supported: bool
    similarity: float
    term_overlap: float
    missing_numbers: tuple[str, ...]


def numbers(text: str) -> set[str]:
    """The numbers written in digits, as values: '1,024' -> '1024', '10K' and '10 thousand' -> '10000',
    '1.5M' -> '1500000'; '4.2' stays."""
    return {_value(match) for match in NUMBER.finditer(text)}


def quantities(text: str) -> set[str]:
    """What the text gives as a value: numbers(text) less the digits inside names (IM2GPS3K, YFCC4K, Qwen2.5,
    Llama-3, CHIP-8) and the years of references ('(Cuturi, 2013)'), and numbers written as words from twenty
    up ('thirty years'; 'one' or 'two' are seldom a value: 'one of', 'a two-stage method')."""
    years = {m.start(1) for m in _REFERENCE_YEAR.finditer(text)}
    return {_value(match) for match in value_matches(text) if match.start() not in years} \
        | {_word_value(match) for match in NUMBER_WORD.finditer(text) if match[1]}


def _in_name(text: str, start: int) -> bool:
    """Are the digits starting at `start` part of a word with a letter before them (IM2GPS3K, Llama-3-8B,
    top-1), not a value of their own (7B, 72-95%)?"""
    return bool(_NAME_BEFORE.search(text, max(0, start - 40), start))


def value_matches(text: str) -> list[re.Match]:
    """The numbers (NUMBER matches) a text gives as values, not digits inside names (Qwen2.5-7B, GPT-4)."""
    return [m for m in NUMBER.finditer(text) if not _in_name(text, m.start())]


def stated_numbers(text: str) -> set[str]:
    """numbers(text), and those written in words ('thirty years' -> '30'): what a source states. A claim's
    numbers are its digits (numbers), so a count the model spells out is not held against it."""
    return numbers(text) | {_word_value(match) for match in NUMBER_WORD.finditer(text)}


def number_ends(text: str) -> list[int]:
    """Where each number the text states (in digits, not inside a name, or in words) ends, in order."""
    return sorted(m.end() for m in [*value_matches(text), *NUMBER_WORD.finditer(text)])


def _value(match: re.Match) -> str:
    digits, scale = match[1], (match[2] or match[3] or "").lower()
    plain = re.fullmatch(r"\d{1,3}(,\d{3})+", digits)
    if not scale or not (plain or re.fullmatch(r"\d+(\.\d+)?", digits)):
        return digits.replace(",", "") if plain else digits
    value = Decimal(digits.replace(",", "")) * _SCALES[scale]
    return str(value.quantize(1)) if value == value.to_integral_value() else str(value.normalize())


def _word_value(match: re.Match) -> str:
    tens, unit, alone = (m.lower() if m else None for m in match.groups())
    if alone:
        return str(_WORD_VALUES[alone])
    return str(_WORD_VALUES[tens] + (_WORD_VALUES[unit] if unit else 0))


class GroundingChecker:
    """Checks sentences against sources with the index's embedding model."""

    def __init__(self, embed_model):
        import Stemmer  # PyStemmer, the keyword index's stemmer too

        self.embed_model = embed_model
        self._stem_words = Stemmer.Stemmer("english").stemWords

    def terms(self, text: str) -> set[str]:
        """Stemmed key terms: words of 3+ letters that are not stopwords."""
        return set(self._stem_words([w.lower() for w in WORD.findall(text) if w.lower() not in STOPWORDS]))

    def source_terms(self, source_text: str) -> set[str]:
        """The key terms a source holds, hyphenated words also in parts ('win-rate' has 'rate')."""
        return self.terms(source_text) | self.terms(source_text.replace("-", " "))

    def embed(self, sentence: str) -> list[float]:
        return self.embed_model.get_text_embedding(sentence)

    def adds_to(self, sentence: str, question: str, ignore: set[str] = frozenset()) -> bool:
        """Does the sentence state something beyond the words of the question (and the `ignore` terms,
        such as the papers' labels)?"""
        new_terms = self.terms(sentence) - self.terms(question) - ignore
        return len(new_terms) + len(numbers(sentence) - numbers(question)) >= MIN_NEW_TERMS

    def misplaced_numbers(self, sentence: str, source_text: str) -> set[str]:
        """The values the sentence gives (not digits inside names) in another number's place: wherever the
        source states the value, no key term near it is one of those near it in the sentence, and
        MIN_SWAP_TERMS of those are near another number of the source ('17.6% higher task performance' of
        a source that says '18.5% higher task performance' and 'user satisfaction by 17.6%'). Words that
        merely differ ('examples from 300,000' of 'samples selected from a pool of 300K') are no swap."""
        given = self._number_contexts(sentence, value_matches(sentence))
        if not given:
            return set()   # most claims give no number: the source's need not be read
        stated = self._number_contexts(source_text, [*NUMBER.finditer(source_text), *NUMBER_WORD.finditer(source_text)])
        return {value for value, near in given.items() if value in stated and all(
            not here & there for here in near for there in stated[value]) and any(
            len(here & there) >= MIN_SWAP_TERMS for here in near
            for other, places in stated.items() if other != value for there in places)}

    def _number_contexts(self, text: str, matches: list[re.Match]) -> dict[str, list[set[str]]]:
        """Each value the matches give -> the key terms within NUMBER_CONTEXT_WORDS words of each place it is given."""
        words = list(WORD.finditer(text))
        contexts: dict[str, list[set[str]]] = {}
        for match in matches:
            before = [w[0] for w in words if w.end() <= match.start()][-NUMBER_CONTEXT_WORDS:]
            after = [w[0] for w in words if w.start() >= match.end()][:NUMBER_CONTEXT_WORDS]
            value = _value(match) if match.re is NUMBER else _word_value(match)
            contexts.setdefault(value, []).append(self.terms(" ".join(before + after).replace("-", " ")))
        return contexts

    def check(self, sentence: str, source_text: str, chunk_embeddings, sentence_embedding=None,
              source_terms: set[str] | None = None) -> Support:
        """Is `sentence` backed by a source with this text and these chunk embeddings? (`source_terms`: the
        source's `source_terms`, when the caller holds them already.)"""
        missing = tuple(sorted((numbers(sentence) - stated_numbers(source_text))
                               | self.misplaced_numbers(sentence, source_text)))
        terms = self.terms(sentence)
        if source_terms is None:
            source_terms = self.source_terms(source_text)
        overlap = len(terms & source_terms) / len(terms) if terms else 0.0
        vector = sentence_embedding if sentence_embedding is not None else self.embed(sentence)
        similarity = closeness(vector, chunk_embeddings)
        backed = overlap >= MIN_TERM_OVERLAP or (similarity >= MIN_SIMILARITY and
                                                 overlap >= MIN_TERM_OVERLAP_IF_SIMILAR)
        return Support(backed and not missing, similarity, overlap, missing)


def cosine(a, b) -> float:
    """Cosine similarity of two vectors."""
    dot = sum(x * y for x, y in zip(a, b))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0


def closeness(vector, embeddings) -> float:
    """The cosine of the vector to the closest of these embeddings (a source's passages); 0.0 for none."""
    return max((cosine(vector, embedding) for embedding in embeddings), default=0.0)
