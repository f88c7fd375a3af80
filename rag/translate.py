"""Questions in other languages are searched and answered in English, and answered back in their language.

The embedding model and BM25 know English; the LLM knows many languages. So a question
written mostly in Chinese, Japanese, Korean, Cyrillic, Greek or Arabic script, or in a
Latin-script language other than English (French, German, Spanish, …: told by langdetect,
asked only of a question without any of the English function words of ENGLISH_WORDS, and
believed only when the question holds more of that language's stopwords than English ones), is
translated into English with the configured LLM before retrieval, the answer is generated
and checked in English against the English abstracts, and its checked sentences are
translated back (citations stay on their sentences); a translated sentence that does not give the
numbers of its English one, each with the bound symbol it has there ('<7%'), is shown in English
(`keeps_values`). Translations are cached on disk by question, model and prompt, so a repeated
question costs nothing.
"""

import functools
import re

from rag.disk_cache import DiskCache, content_key
from rag.errors import RagError
from rag.grounding import numbers
from rag.prompt_safety import defuse
from rag.prompts import load_prompt, parse_json_reply, prompt_hashes

SCRIPTS = (("Japanese", r"[\u3040-\u30ff]"), ("Korean", r"[\uac00-\ud7af]"),
           ("Chinese", r"[\u3400-\u4dbf\u4e00-\u9fff]"), ("Russian", r"[\u0400-\u04ff]"),
           ("Greek", r"[\u0370-\u03ff]"), ("Arabic", r"[\u0600-\u06ff]"))
_LETTERS = re.compile(r"[^\W\d_]+")
MIN_SCRIPT_SHARE = 0.3     # of the question's letters
LATIN_LANGUAGES = {"fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
                   "nl": "Dutch", "ca": "Catalan", "pl": "Polish", "cs": "Czech", "sv": "Swedish", "da": "Danish",
                   "no": "Norwegian", "fi": "Finnish", "ro": "Romanian", "hu": "Hungarian", "tr": "Turkish",
                   "vi": "Vietnamese", "id": "Indonesian"}   # langdetect's codes of languages in Latin script
STOPWORD_LISTS = {"fr": "french", "de": "german", "es": "spanish", "it": "italian", "pt": "portuguese",
                  "nl": "dutch", "ca": "catalan", "sv": "swedish", "da": "danish", "no": "norwegian", "fi": "finnish",
                  "ro": "romanian", "hu": "hungarian", "tr": "turkish", "id": "indonesian"}   # NLTK's list names
ENGLISH_WORDS = frozenset("""
the and or for with from into about than by are were been does did what which how who whom whose why when where
there that this these those any can could should would will have had its their they them not but without
""".split())   # English function words that are not also common words of French, German, Spanish, Dutch, …
MIN_LATIN_WORDS = 3          # a shorter question (a term, a name) is taken as English
MIN_LANGUAGE_ODDS = 0.9      # langdetect's probability of the language it names, at least
QUESTION_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["english"],
                   "properties": {"english": {"type": "string"}}}
MAX_TOKENS = 256
_BOUND_SYMBOL = re.compile(r"([<>≤≥±])\s*(\d[\d.,]*)")   # '<7%'; '≈' and '~' are words in other languages ('约')
_ENUMERATOR = re.compile(r"\(\d\)")   # '(1) length and (2) token efficiency': a list's numbers, not values


def question_language(text: str) -> str | None:
    """The language to answer in when the question is not in English, else None."""
    letters = sum(ch.isalpha() for ch in text)
    for language, pattern in SCRIPTS:
        found = len(re.findall(pattern, text))
        if language == "Japanese" and found:
            return language   # kana appear only in Japanese, even among Han characters
        if letters and found / letters >= MIN_SCRIPT_SHARE:
            return language
    return latin_language(text)


def latin_language(text: str) -> str | None:
    """The Latin-script language other than English that the text is written in, or None. English
    questions nearly always hold function words ("what", "which", "the"), so only a text of a few
    words with none of them is given to langdetect, whose guess on a question full of names
    and terms can be wrong ("What did Lilian Weng and Adam Tauman Kalai measure?": Indonesian)."""
    words = [w.lower() for w in _LETTERS.findall(text)]
    if len(words) < MIN_LATIN_WORDS or any(w in ENGLISH_WORDS for w in words):
        return None
    from langdetect import DetectorFactory, detect_langs
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0   # langdetect samples: seeded, the same text always gets the same answer
    try:
        best = detect_langs(text)[0]
    except LangDetectException:
        return None   # no letters it knows
    if best.prob < MIN_LANGUAGE_ODDS or not more_foreign_than_english_words(words, best.lang):
        return None
    return LATIN_LANGUAGES.get(best.lang)


def more_foreign_than_english_words(words: list[str], code: str) -> bool:
    """Whether the words hold more stopwords of the language langdetect named than English ones (words
    on both lists do not count), so that a query typed as keywords is not taken for another language
    ("give me papers on multimodal medical diagnosis": Italian to langdetect, but "me" and "on" are
    English, not Italian). A language without a list (NLTK's, shipped with llama-index) passes."""
    if code not in STOPWORD_LISTS:
        return True
    foreign, english = stopwords(STOPWORD_LISTS[code]), stopwords("english")
    return sum(w in foreign - english for w in words) > sum(w in english - foreign for w in words)


@functools.cache
def stopwords(language: str) -> frozenset[str]:
    """NLTK's stopword list of a language, from the copy llama-index ships (nothing is downloaded)."""
    from llama_index.core.utils import globals_helper
    from nltk.corpus import stopwords as lists

    globals_helper.stopwords   # puts llama-index's bundled NLTK data on NLTK's path
    return frozenset(lists.words(language))


class Translator:
    """Translates with the configured LLM, opened (by `open_model`, default rag.llm.open_model) only when a
    translation is not cached, unless a model is given or shared with use_model."""

    def __init__(self, settings, model=None, open_model=None):
        self.settings = settings
        self._model = model
        self._open_model = open_model
        self.cache = DiskCache(settings.derived_cache_dir / "translations.jsonl")
        hashes = prompt_hashes()
        self._identity = [settings.backend, settings.model or "", hashes["translate_question"],
                          hashes["translate_answer"]]

    def use_model(self, model) -> None:
        """Translate with this already open model rather than opening one."""
        if self._model is None:
            self._model = model

    @property
    def model(self):
        if self._model is None:
            if self._open_model is None:
                from rag.llm import open_model

                self._open_model = open_model
            self._model = self._open_model(self.settings)
        return self._model

    def to_english(self, question: str) -> str:
        """The question in English; the question itself when the LLM gives nothing usable."""
        key = content_key(self._identity + ["question", question])
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        prompt = load_prompt("translate_question").render(question=defuse(question))
        english = str(self._ask(prompt, QUESTION_SCHEMA).get("english") or "").strip()
        if not english or question_language(english):
            return question
        self.cache.put(key, english)
        return english

    def from_english(self, sentences: list[str], language: str) -> list[str]:
        """The sentences in `language`, one for one; the English ones when the count does not match."""
        if not sentences:
            return []
        key = content_key(self._identity + ["answer", language] + sentences)
        cached = self.cache.get(key)
        if cached is not None:
            return _checked(sentences, cached)
        schema = {"type": "object", "additionalProperties": False, "required": ["sentences"],
                  "properties": {"sentences": {"type": "array", "items": {"type": "string"},
                                               "minItems": len(sentences), "maxItems": len(sentences)}}}
        numbered = "\n".join(f"{n}. {defuse(s)}" for n, s in enumerate(sentences, start=1))
        prompt = load_prompt("translate_answer").render(count=len(sentences), language=language,
                                                        sentences=numbered)
        translated = [str(s).strip() for s in self._ask(prompt, schema, MAX_TOKENS * 2).get("sentences") or []]
        if len(translated) != len(sentences) or not all(translated):
            return sentences
        self.cache.put(key, translated)
        return _checked(sentences, translated)

    def _ask(self, prompt: str, schema: dict, max_tokens: int = MAX_TOKENS) -> dict:
        """The reply's JSON object; {} when it holds none (the caller then keeps the text as it was)."""
        reply = "".join(self.model.stream([{"role": "user", "content": prompt}], schema, max_tokens))
        return parse_json_reply(reply) or {}


def keeps_values(english: str, translated: str) -> bool:
    """Does the translation give the numbers in digits that the English sentence gives (not a list's '(1)',
    '(2)'), each with the bound symbol it has there? '<7%' must not become 'from 7%', nor '17B' '170亿'."""
    if numbers(_ENUMERATOR.sub(" ", english)) != numbers(_ENUMERATOR.sub(" ", translated)):
        return False
    return all(re.search(rf"{re.escape(symbol)}\s*{re.escape(digits)}", translated)
               for symbol, digits in _BOUND_SYMBOL.findall(english))


def _checked(sentences: list[str], translated: list[str]) -> list[str]:
    """Each translated sentence, or its English one where the translation changes a value (keeps_values)."""
    return [t if keeps_values(s, t) else s for s, t in zip(sentences, translated)]


def translator_for(settings, open_model=None) -> Translator | None:
    """The translator the settings ask for (RAG_TRANSLATE=auto), None when translation is off."""
    return Translator(settings, open_model=open_model) if settings.translate == "auto" else None


def safe_to_english(translator: Translator, question: str, notify=lambda message: None) -> str:
    """to_english, falling back to the question itself when the backend fails."""
    try:
        return translator.to_english(question)
    except RagError as err:
        notify(f"rag: warning: could not translate the question ({err}); searching it as written")
        return question
