"""What an answer sentence may say about a paper beyond being supported by it.

Three rules that grounding.py's support check does not cover, each deterministic:
- names are facts: an author name written as "Surname et al.", "Surname and Surname" or in full
  ("Ariel Procaccia") must belong to a source the sentence cites (`written_names` finds them), and so must a
  method name (`method_names`: GFPO, FairICP) that the question or another source uses;
- a sentence must answer the question, not only be true of a source: the paper it cites must
  be named by the question (an author or its category), or be close to the question — one of
  its sentences (`MIN_SOURCE_RELEVANCE`) or, by the paper model, its whole abstract
  (`MIN_PAPER_RELEVANCE`: a question in everyday words is far from every single sentence) — and
  be ranked not far below the best paper found (`SCORE_MARGIN`, or the tighter
  `SINGLE_PAPER_MARGIN` when the question does not ask for several papers: `asks_for_several`);
  when the model itself doubts that its sources answer (its log-odds for `"answerable": true`,
  read before it writes, below `MIN_SURE_ODDS`), one close sentence is not enough and the whole
  abstract must be close; when it is only half sure (below `FIRM_ODDS`), the close sentence must be
  closer (`MIN_DOUBT_SOURCE_RELEVANCE`): near-misses are answered with true sentences about a
  neighbouring paper that shares a few words with the question, and the model's doubt and the
  abstract's distance single them out together, neither alone; when the model is sure
  (`MIN_FIRST_PAPER_ODDS` or above), the paper retrieval ranks first is on the question however far
  its words are; and when it much doubts (below `MIN_SEVERAL_ODDS`) that they answer a question about
  several papers, no paper is on it but one whose author the question names: a near-miss such as
  "graph networks for weather forecasting" got a list of papers each on one half of it;
  a question that does not ask for several papers is answered about one paper, the one its
  first shown sentence cites (`ONE_PAPER_FOR_ONE_QUESTION`);
  and a question that asks for a number is not answered by a sentence without one (`asks_for_number`),
  nor 'how many X' by a number of something else (`counted_words`: '16 minutes' is not hours), nor
  'what perplexity' by a number that no word of the sentence says is a perplexity (`asked_metric`), nor
  one that asks which datasets, benchmarks or baselines by a sentence that names none the question
  does not (`asks_for_name`, `names_given`: 'evaluated on real-world datasets' names nothing), or,
  when quoted, that does not say the kind it names (`named_terms`: 'We introduce MCNF' names no dataset);
  a question that asks for a number and more (`question_parts`) takes a claim with no number for its
  other part, and says which value the abstract does not state when none gives it (`asked_value`);
- when the model restates the question instead of answering it, or writes only about papers
  off the question, a source's own sentence that is closest to the question stands in for
  it, quoted and attributed (`quoted_claim`) — when no claim is left, the best paper's, if the
  paper model also puts its whole abstract close to the question (`MIN_QUOTE_PAPER_SCORE`, waived
  when the question names one of its authors): that paper is our choice, not the model's; for a
  question that asks for a number, its closest sentence that states one (a claim on the topic
  without the number gives way to it too), and when the question asks for a number the source
  does not hold, or the model gives one its source does not hold, the answer says that the
  source does not state it (`not_stated_claim`) instead of guessing; a quote is the sentence
  closest by meaning and by the question's words that few of the abstract's sentences share
  (`quote_order`: a method name that every sentence holds weighs little, the one word of the
  question that a single sentence holds weighs more);
- a sentence that points to code or data ("Our code is available at https://…") answers only a
  question that asks for them (`points_to_link`, `asks_for_link`).
A shown claim that speaks of its paper without naming it ("The paper shows", "We propose") is
named, and a paper's first shown claim that does not name it starts with its label
(`name_the_paper`); a claim that starts in the middle of one of its source's sentences (a lowercase
first word: the model copied a tail) gives way to that whole sentence, quoted (`whole_sentence`), and one
the reply's length limit cut while it copied a source sentence is finished with that sentence's rest
(`finished_claim`); a number a claim copies without the bound its source gives it ('<7%', 'up to 85%') gets
that bound back (`with_bounds`);
a claim speaks of the authors, not as them ("our baselines" -> "their baselines": `in_third_person`);
a question that asks who wrote a paper (`asks_for_authors`) is told its authors from the paper's record
(`authors_claim`).
The floors were chosen on the tune parts of eval/ (eval/README.md).
"""

import math
import re
from collections import Counter

from rag.corpus import fold, name_tokens
from rag.grounding import number_ends, value_matches
from rag.mentions import MentionIndex

MIN_SOURCE_RELEVANCE = 0.35  # cosine of question and the cited abstract's sentence closest to it (also quoted)
MIN_PAPER_RELEVANCE = 0.30   # or the paper model's score of the whole abstract (Hit.paper_score), if that model is on
MIN_SURE_ODDS = 2.5          # the model's log-odds that its sources answer; below, MIN_SOURCE_RELEVANCE alone is not enough
FIRM_ODDS = 3.5              # below these odds (and at MIN_SURE_ODDS or above), the close sentence must be closer:
MIN_DOUBT_SOURCE_RELEVANCE = 0.45   # this close
MIN_FIRST_PAPER_ODDS = 3.0   # at these odds or above, the paper found first is on the question whatever its closeness
MIN_SEVERAL_ODDS = 1.25      # below, a question about several papers is off every paper but those of an author it names
RARE_WORD_SHARE = 0.10      # or the paper holds every word of the question that at most this share of papers use
MIN_QUOTE_PAPER_SCORE = 0.25 # a quote when no claim is left: the paper model's score of its abstract, at least
SCORE_MARGIN = 0.16          # the cited paper's retrieval score at most this much below the best paper's
SINGLE_PAPER_MARGIN = 0.10   # the same, for a question that does not ask for several papers
ONE_PAPER_FOR_ONE_QUESTION = True   # such a question's answer keeps to the paper of its first shown sentence
QUOTE_WORD_WEIGHT = 0.3     # a quote's rank: cosine to the question + this x its share of the question's words
MAX_QUOTE_CHARS = 320        # a longer abstract sentence is cut at a word boundary, with "…"
CUT_CLAIM_WORDS = 5          # a claim the length limit cut ends with this many words of the sentence it copies

_CAPITAL_WORD = r"[A-Z][\w'’-]+"
_ET_AL = re.compile(rf"\b({_CAPITAL_WORD}(?:\s{_CAPITAL_WORD})?)\s+et\s+al\b")
_METRIC = r"(?:f1|bleu|rouge(?:-\w+)?|auc|auroc|mrr|perplexity|precision|recall|\w+@\d+)"   # named metrics: Hits@10
METRICS_ALIKE = ("perplexity ppl", "f1 f-score f-measure", "auc auroc")   # names of one metric (area under a curve)
_QUANTITY = (r"(?:number|count|percentage|percent|fraction|share|rate|ratio|size|amount|value|score|accuracy|"
             rf"speed-?up|improvement|gain|gap|reduction|increase|depth|width|{_METRIC})s?\b")
_NOT_PAPERS = r"(?!(?:papers?|stud(?:y|ies)|works?|articles?)\b)"   # 'which papers report accuracy' asks for papers
_NUMBER_QUESTION = re.compile(
    r"\bhow (?:many|much)\b|\bhow (?:long|often|large|small|big|fast|far|high|low)\s+"
    r"(?:is|are|was|were|do|does|did|can|could|should|would|will|has|have|had|an?)\b"   # 'how large a batch'
    rf"|\b(?:what|which)(?:['’](?:s|re))?\s+(?:{_NOT_PAPERS}[\w-]+\s+){{0,2}}?{_QUANTITY}"   # "what's the accuracy" too
    rf"|\bwhat(?:['’]?s|\s+(?:is|was|are|were))\s+(?:the|its|their)\s+(?:[\w-]+\s+){{0,2}}?{_QUANTITY}"
    r"|多少|几", re.IGNORECASE)   # 'what is the highest win rate', 'what was its average score'
_TOPIC_OF_A_PAPER = re.compile(   # ... before 'how many': a paper on it, or what a paper shows about it
    r"\b(?:papers?|works?|stud(?:y|ies)|research|anything|something|"
    r"(?:show|find|found|say|said|tell|told|reveal|conclude|claim|argue|learn)(?:s|d|ed|n|ing)?(?:\s+us)?)\s+"
    r"(?:on|about|into|regarding)\s+$", re.IGNORECASE)
_PART_START = re.compile(r"(?:,\s*|\s+)(?:and|but)\s+(?=(?:what|how|which|where|who|when|why|does|do|did|is|are|was"
                         r"|were|can)\b)|(?<=[?;])\s+(?=\S)", re.IGNORECASE)
_AUTHORS_QUESTION = re.compile(   # who at a question's start, or after 'and' / 'tell me'; not 'users who …'
    r"(?:^\W*|[,;:]\s*|\band\s+|\btell\s+me\s+|\bknow\s+)who\b|^\W*whose\b|\bwritten\s+by\s+whom\b"
    r"|\bwho\s+(?:are|were)\s+the\s+authors\b|^\W*(?:which|what\s+are\s+the|list\s+the|name\s+the)\s+authors\b",
    re.IGNORECASE)
MAX_AUTHORS_NAMED = 8   # an authors sentence names this many, then says how many more
_QUESTION_START = re.compile(r"(?:what|how|which|where|who|when|why|does|do|did|is|are|was|were|can|could|has|have)\b",
                             re.IGNORECASE)
_VALUE_FILLER = {"is", "are", "was", "were", "s", "re", "the", "a", "an", "its", "their"}   # 'what's its rate' -> 'the rate'
_NAME_QUESTION = re.compile(   # 'which (real-world) datasets', 'what benchmark'; not 'which papers use datasets'
    r"\b(?:which|what)(?:['’](?:s|re))?\s+(?:(?!(?:papers?|studies|study|works?|articles?|methods?)\b)[\w-]+\s+){0,2}?"
    r"(?:datasets?|benchmarks?|corpora|corpus|baselines?|environments?|games|languages|architectures?|metrics|tasks"
    r"|gpus?|hardware|llms|(?<=\s)(?<!which )(?<!what )models)\b",   # 'which reward models', 'which LLMs',
    re.IGNORECASE)   # not 'what models'
_NAME = re.compile(r"(?<![\w-])(?:[A-Za-z][\w-]*\d[\w-]*|\d[\w-]*[A-Za-z][\w-]*|[\w-]*[A-Z][\w-]*)(?![\w-])")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+)$")
_GENERIC_NAMES = frozenset("llm llms vlm vlms mllm mllms rl ai nlp ml gpu gpus cpu cpus sota".split())
_TOKEN = re.compile(r"[\w'-]+")
_FUNCTION_WORD = re.compile(   # a whole word: not the 'of' of 'state-of-the-art'
    r"(?<![\w-])(?:of|in|on|at|for|to|by|with|from|per|the|an?|that|which|who|is|are|was|were|"
    r"do|does|did|has|have|had|can|could|will|would)(?![\w-])", re.IGNORECASE)
COUNTED_ALIKE = ("examples samples instances",)   # words for the same counted things in abstracts
NAMED_ALIKE = ("dataset benchmark corpora corpus suite collection data",   # kinds of named things an abstract
               "environment game task benchmark suite", "metric measure score", "language",   # says by name
               "gpu hardware accelerator")
_RATIO_WORDS = {"times", "fold"}   # 'how many times (faster)' asks for a ratio, not a count of times
_COUNTED = re.compile(r"\bhow many\s+([\w'-]+(?:\s+[\w'-]+){0,2})", re.IGNORECASE)
_PAPERS = r"(?:papers|studies|articles|publications)"
_APPROACHES = r"(?:works|approaches|methods|techniques|ways|lines of (?:work|research)|(?<!\bthe\s)(?:authors|groups|teams))"
# 'which authors', 'what groups'; not 'the authors' of one paper ('what do the authors of GFPO find?')
_REQUEST = r"(?:give|show|find|list|recommend|suggest|name|get|cite)"
_ANY = r"(?:which|what|any|some|existing|prior|recent|related)"   # before a mass noun: "any research", "what work"
_SINGULAR_VERB = r"[a-z]*[^\Ws]s"   # a word ending in one 's': 'proposes', 'uses', 'is', 'has', 'does'
_VERB_AFTER_ONE = "".join(rf"(?<!\b{noun}\s)" for noun in (   # 'which paper studies X', 'which method works best'
    "paper", "study", "work", "article", "one", "method", "approach", "technique", "model", "benchmark",
    "framework", "system", "algorithm", "that"))
_ONE_OF_THEM = re.compile(   # 'which of these papers proposes GFPO?', 'which one of the papers is about …': one paper
    rf"\b(?:which|what)\s+(?:one\s+)?of\s+(?:the|these|those)\s+(?:[\w'-]+\s+){{0,2}}?{_PAPERS}\s+"
    rf"{_SINGULAR_VERB}\b|\bwhich\s+one\s+of\b", re.IGNORECASE)
_SEVERAL = re.compile(   # the plural must be what is asked about: "which papers", "any studies", "what methods"
    rf"\b(?:which|what)\b[^?.!]{{0,80}}?\b{_VERB_AFTER_ONE}{_PAPERS}\b"
    rf"|\b(?:any|some|several|multiple|various|different|all|these|those|the|other|there)\s+(?:[\w'-]+\s+){{0,3}}?"
    rf"{_VERB_AFTER_ONE}{_PAPERS}\b"
    rf"|\b{_REQUEST}\s+(?:me\s+|us\s+)?(?:[\w'-]+\s+){{0,3}}?{_PAPERS}\b|^\W*{_PAPERS}\b"   # "give me papers on X"
    rf"|\b(?:which|what|any|some|several|multiple|various|different)\s+(?:[\w'-]+\s+){{0,3}}?{_VERB_AFTER_ONE}"
    rf"{_APPROACHES}\b"
    rf"|\b(?:{_ANY}|the)\s+(?:[\w'-]+\s+)?(?:research|literature)\b(?!\s+(?:paper|study|article|work)\b)"
    rf"|\b(?!which\s+work\s+{_SINGULAR_VERB}\b){_ANY}\s+(?:(?:prior|recent|related|existing|previous|other)\s+)?"
    rf"work\b"   # not 'which work proposes X?', one paper
    r"|\bresearch (?:on|into|about)\b|\bwhich ones\b"
    # as users ask for what there is: "grokking papers?", "anything about grokking?", "what's out there on
    # merging?", "what has been done on SAEs?", "who works on causal discovery?", "an overview of work on SAEs"
    rf"|\b{_PAPERS}\W*$|\bthere\s+(?:any\s+)?work\s+(?:on|about|into|regarding)\b"
    r"|\banything\s+(?:[\w'-]+\s+)?(?:on|about|regarding|concerning|related to)\b"
    r"|\bwhat(?:'s|’s|\s+is)\s+(?:out\s+)?there\s+(?:on|about|for|regarding)\b"
    r"|\bwhat\s+(?:has|have)\s+been\s+(?:done|written|published|proposed|tried)\b"
    r"|\bwho\s+(?:(?:has|have|is|are)\s+)?(?:works?|worked|working|stud(?:y|ies|ied|ying)|looks? at|looked at)\b"
    r"|\b(?:overview|survey|round-?up)\s+of\b|\breading list\b|\bmore than one (?:paper|study|work|article)\b"
    r"|哪些|哪几|几篇|多篇|这些"
    # or asks how papers differ: "compare X and Y", "the difference between X and Y", "how do X and Y differ",
    # "how is X different from Y", "what distinguishes X from Y" (not 'X vs Y', often two methods of one paper)
    r"|^\W*(?:compare|contrast)\b|\bdifferences?\s+between\b|\bdistinguish(?:es)?\b[^?.!]{1,80}?\bfrom\b"
    r"|\bhow\s+(?:do|did)\b[^?.!]{1,120}?\bdiffer\b|\b(?:differs?|different)\s+from\b"
    r"|\bhow\s+(?:are|were)\b[^?.!]{1,120}?\bdifferent\b(?=\s*(?:[?.!,:]|$|in\b))",
    re.IGNORECASE)
_UNNAMED_SUBJECT = re.compile(r"(?:the|this) (?P<kind>paper|work|study|article)\b|(?:in this (?:paper|work),? )?we\b"
                              r"|the authors\b", re.IGNORECASE)
_LEAD_WORD = re.compile(r"[\w%+-]+")
_DESCRIPTION_NOUNS = frozenset(   # what a question calls a paper it describes: 'the chatbot fairness paper'
    "paper papers work study article critique survey position one method approach framework benchmark dataset "
    "algorithm recipe technique model".split())
_FIRST_PERSON = re.compile(r"\b(?:we|our|ours)\b", re.IGNORECASE)
_THIRD_PERSON = {"we": "they", "our": "their", "ours": "theirs"}
_QUOTED = re.compile(r'("[^"]*"|“[^”]*”)')
_METHOD = re.compile(r"\b[A-Za-z]*[A-Z][a-z0-9]*[A-Z][A-Za-z0-9]*\b")
_LINK = re.compile(r"\bgithub\b|\b(?:available|released)\s+(?:at|on|from)\b|"
                   r"\b(?:code|codes|data|dataset|datasets|models?|implementation)\b"
                   r"(?:[\s,]+\w+){0,4}\s+(?:is|are)\s+(?:\w+\s+)?(?:available|released|open[- ]sourced|"
                   r"open[- ]source\b(?!\s+(?!(?:at|on|in|under|via|for|here)\b)\w))\b",   # not '… open-source Qwen'
                   re.IGNORECASE)
_LINK_QUESTION = re.compile(   # where the code, weights or project page is; not 'code models' or 'link prediction'
    r"\b(?:github|repo|repository|url|website|web ?page|project page|homepage|download)\b"
    r"|\b(?:a|the|any)\s+link\b|\blinks?\s*(?:\?|$)"
    r"|\bwhere(?:['’]s|\s+(?:is|are|can|could|do|does))\b[^?]{0,30}\b(?:code|codes|weights|checkpoints?|implementation)\b"
    r"|\b(?:is|are)\s+(?:there\s+|the\s+|its\s+|their\s+)?(?:any\s+|an?\s+)?(?:public\s+|open[- ]source\s+)?"
    r"(?:code|codes|implementation)\s+(?:available|released|public|open|out|for|of)\b"
    r"|\b(?:is|are)\s+(?:the\s+|its\s+|their\s+)?(?:model\s+)?(?:weights|checkpoints?)\s+(?:available|released|public|out)\b"
    r"|\b(?:release[ds]?|releasing|open[- ]?sourced?)\s+(?:the\s+|their\s+|its\s+|any\s+)?"
    r"(?:code|codes|weights|checkpoints?|implementation)\b"
    r"|\bshared?\s+(?:the\s+|their\s+|its\s+|any\s+)?(?:code|codes|implementation)\b",   # not 'share weights'
    re.IGNORECASE)
_PAIR = re.compile(rf"\b({_CAPITAL_WORD})\s+(?:and|&)\s+({_CAPITAL_WORD})\b")


_CONTRAST = re.compile(r",?\s+(?:while|whereas)\s+|;\s+", re.IGNORECASE)


def contrasted_parts(claim: str, labels: set[str], question: str = "") -> list[str]:
    """A claim that sets given papers side by side ("Fel et al. find X, while Miao et al. find Y"), split into
    its parts, one paper's each, so that each is checked against its own paper: split at ', while',
    ', whereas' and ';' when every part names a different paper, by one of `labels` or by opening with a
    description of it from the `question` ("The layer pruning paper … , while the paper that merges experts
    …": described_paper). [claim] otherwise ('X cuts cost while keeping accuracy' names one paper)."""
    parts = [part.strip(" ,;") for part in _CONTRAST.split(claim)]
    named = [{label for label in labels if label in part} or {described_paper(part, question)} - {None}
             for part in parts]
    if len(parts) < 2 or any(len(n) != 1 for n in named) or len(set().union(*named)) < len(parts):
        return [claim]
    return [part[0].upper() + part[1:].rstrip(".") + "." for part in parts]


def written_labels(text: str) -> set[str]:
    """Surnames a sentence writes as a paper's label, 'X et al.': each must be a cited paper's first author."""
    return {name_tokens(m[1])[-1] for m in _ET_AL.finditer(text)}


def written_names(text: str, known: set[str], mentions=None) -> set[str]:
    """Surnames a sentence attributes work to: 'X et al.' always, 'X and Y' when X or Y is a known author
    name, and a stored author written in full ('Ariel Procaccia') when given the store's MentionIndex."""
    found = written_labels(text)
    if mentions is not None:
        found |= {name_tokens(author)[-1] for authors in mentions.find(text).authors.values() for author in authors}
    for first, second in _PAIR.findall(text):
        pair = {fold(first), fold(second)}
        if pair & known:
            found |= pair
    return found


def method_names(text: str) -> set[str]:
    """Words that name a method: two or more capitals and four or more characters without a plural
    's' (GFPO, FairICP, PointMapPolicy; not LLMs, RL or SAEs), folded to lower case. None in a text with
    no lowercase letter ("WHICH PAPERS USE QWEN MODELS"), whose capitals tell nothing."""
    if not any(c.islower() for c in text):
        return set()
    return {w.lower() for w in _METHOD.findall(text) if len(w.removesuffix("s")) >= 4}


def asks_for_number(question: str) -> bool:
    """Does the question ask for a quantity (how many, what rate, which percentage …)? Not when it asks for
    a paper about one ("Is there a paper on how many samples are needed …?")."""
    return any(not _TOPIC_OF_A_PAPER.search(question, 0, m.start()) for m in _NUMBER_QUESTION.finditer(question))


def question_parts(question: str) -> list[str]:
    """The questions a question asks, split where ', and what …' or a new sentence starts one ("What does
    TikZilla do, and how many GPUs trained it?" -> "What does TikZilla do", "how many GPUs trained it?")."""
    parts = [part.strip() for part in _PART_START.split(question) if part.strip()]
    return parts if _QUESTION_START.match(parts[0] if parts else "") else [question]   # not inside a clause


def asked_value(question: str) -> str:
    """What the question's number part asks for, to say that an abstract does not state it: 'the learning
    rate' (for 'what learning rate …'), 'the number of GPUs' (for 'how many GPUs …'), else 'the number
    asked for'."""
    part = next((p for p in question_parts(question) if asks_for_number(p)), question)
    found = _NUMBER_QUESTION.search(part)
    if found is not None and found[0].lower().startswith(("what", "which")):
        words = re.split(r"\s+|['’]", found[0])[1:]   # after 'what' / 'which'
        return "the " + " ".join(w for w in words if w and w.lower() not in _VALUE_FILLER)
    counted = re.match(r"how many ((?:[a-z-]+ ){0,2}?[a-z-]+s)\b", part[found.start():] if found else "", re.IGNORECASE)
    return f"the number of {counted[1]}" if counted else "the number asked for"


def asked_metric(question: str) -> re.Pattern | None:
    """The metric a 'what/which <metric>' question asks the value of, as a pattern that finds its name (or
    another name of it, METRICS_ALIKE) in a sentence: 'What perplexity does …' -> perplexity or PPL, 'What
    Hits@10 …' -> Hits@10, not Hits@1. None when a value it asks for is not a named metric: a rate, a score,
    an accuracy ('improving Qwen2.5-Math-7B from 58.8% to 90.0%' is one), 'how many'. A number of another
    metric does not answer it."""
    if not asks_for_number(question):
        return None
    names = set()
    for found in _NUMBER_QUESTION.finditer(question):
        metric = re.search(rf"{_METRIC}s?\b\Z", found[0], re.IGNORECASE)
        if metric is None or not found[0].lower().startswith(("what", "which")):
            return None
        name = metric[0].lower().split("-")[0].removesuffix("s")   # rouge(-l), score(s)
        names |= next((set(alike.split()) for alike in METRICS_ALIKE if name in alike.split()), {name})
    written = (re.escape(n.removesuffix("y")) + "(?:y|ies)" if n.endswith("y") else re.escape(n) for n in sorted(names))
    return re.compile(rf"(?<![a-z])(?:{'|'.join(written)})(?!\d)", re.IGNORECASE) if names else None


def asks_for_authors(question: str) -> bool:
    """Does the question ask who wrote or is behind a paper ("who's behind ElasticMM?", "what is MILD and
    who wrote it?", "whose paper …")? Not 'users who …', a clause about the paper's subject."""
    return bool(_AUTHORS_QUESTION.search(question))


def authors_claim(label: str, authors: list[str]) -> str:
    """The sentence that names a paper's authors, from its metadata: 'Liu et al.: the authors are Zedong Liu,
    Shenggan Cheng, Guangming Tan and Dingwen Tao.' (the first MAX_AUTHORS_NAMED, then how many more)."""
    shown = authors[:MAX_AUTHORS_NAMED]
    more = len(authors) - len(shown)
    names = ", ".join(shown[:-1]) + (f", {shown[-1]} and {more} more" if more else f" and {shown[-1]}") \
        if len(shown) > 1 else shown[0]
    return labelled(label, f"the {'authors are' if len(authors) > 1 else 'author is'} {names}.")


def asks_for_name(question: str) -> bool:
    """Does the question ask for named things: which datasets, benchmarks, baselines, environments …?"""
    return bool(_NAME_QUESTION.search(question))


def named_terms(question: str, terms) -> set[str]:
    """The key terms (`terms`: text -> stemmed terms) of the kind of thing a 'which datasets' question asks
    to name and of the words for the same kind (NAMED_ALIKE); empty for any other question, and for kinds an
    abstract names without saying the kind ('which LLMs': "GPT-4o and Llama 3")."""
    found = _NAME_QUESTION.search(question)
    asked = terms(found[0].split()[-1]) if found else set()
    return set().union(*(group for alike in NAMED_ALIKE if asked & (group := terms(alike))))


def names_given(text: str, known: str) -> set[str]:
    """Names a sentence gives that `known` (the question, the paper's label) does not hold: words with a
    capital letter not only at a sentence's start, or with letters and digits (IM2GPS3K, CALVIN, 8B)."""
    known_words = {w.lower() for w in _TOKEN.findall(known)}
    found = set()
    for match in _NAME.finditer(text):
        word = match[0]
        starts_sentence = word[:1].isupper() and word[1:].islower() and _SENTENCE_START.search(text[:match.start()])
        if not starts_sentence and word.lower() not in known_words and word.lower() not in _GENERIC_NAMES:
            found.add(word)
    return found


def counted_words(question: str) -> str:
    """The words that say what a 'how many' question counts, up to the first function word
    ('how many hours of audio' -> 'hours'); '' for any other question, for 'how many times', and for
    one that asks for several quantities (each claim answers one of them)."""
    if len(_NUMBER_QUESTION.findall(question)) > 1:
        return ""
    found = _COUNTED.search(question)
    counted = _FUNCTION_WORD.split(found[1], maxsplit=1)[0].strip() if found else ""
    return "" if counted.split(" ")[0].lower() in _RATIO_WORDS else counted   # '10×', 'a factor of 10', 'tenfold'


def counted_terms(question: str, terms) -> set[str]:
    """The key terms (`terms`: text -> stemmed terms) of what a 'how many' question counts, with the
    words that count the same things (COUNTED_ALIKE: 'how many examples' is answered by '10K samples')."""
    counted = terms(counted_words(question))
    for alike in COUNTED_ALIKE:
        if counted & (group := terms(alike)):
            counted |= group
    return counted


def words_after_numbers(text: str, span: int = 3) -> list[str]:
    """The first `span` words after each number in the text, where what it counts is named
    ('5,731 modern slavery statements'; '16 minutes of audio' -> minutes, of, audio)."""
    return [w for end in number_ends(text) for w in _TOKEN.findall(text[end:])[:span]]


def asks_for_several(question: str) -> bool:
    """Does the question ask about several papers ('which papers', 'what approaches', 哪些), or how papers
    differ ('compare X and Y')? Not when it asks which one of them ('which of these papers proposes GFPO?')."""
    return bool(_SEVERAL.search(question)) and not _ONE_OF_THEM.search(question)


def about_several(question: str, mentions: MentionIndex | None) -> bool:
    """Does the question ask about several papers: in its words (asks_for_several), or by naming an
    author of two or more papers ('what has Manling Li been working on?', 'show me everything from Sharon Li')?"""
    return asks_for_several(question) or (mentions is not None and len(mentions.find(question).authors) >= 2)


def score_margin(question: str) -> float:
    """How far below the best paper's retrieval score a paper may be and still answer the question."""
    return SCORE_MARGIN if asks_for_several(question) else SINGLE_PAPER_MARGIN


def near_the_best(hits: list, question: str) -> list:
    """The hits a claim may be about as far as rank goes: those the question names (an author or a
    category) and those scored at most `score_margin` below the best hit; the best hit is always one."""
    best, margin = max((h.score for h in hits), default=0.0), score_margin(question)
    return [h for h in hits if h.named or h.score >= best - margin]


def points_to_link(text: str) -> bool:
    """Does the sentence say where code, data or a project page is ('Code is available at https://…')?"""
    return bool(_LINK.search(text))


def asks_for_link(question: str) -> bool:
    """Does the question ask where code, weights or a project page are ('Where can I find the code of GFPO?',
    'is there a link?')? Not 'code models', 'link prediction' or 'the code it writes'."""
    return bool(_LINK_QUESTION.search(question))


def quote_order(similarities: list[float], sentence_terms: list[set[str]], question_terms: set[str]) -> list[int]:
    """The abstract's sentences (their indices), best quote first: cosine to the question plus
    QUOTE_WORD_WEIGHT x the share of the question's words the sentence holds, each word weighed by how
    few of the abstract's sentences hold it (a method name in every sentence weighs little; a word in
    none weighs most, so a question in other words still has the cosine to go by)."""
    held = Counter(t for terms in sentence_terms for t in terms)
    count = len(sentence_terms)
    weight = {t: math.log(1 + count / held.get(t, 0.5)) for t in question_terms}
    total = sum(weight.values()) or 1.0
    score = [similarity + QUOTE_WORD_WEIGHT * sum(weight[t] for t in terms & question_terms) / total
             for similarity, terms in zip(similarities, sentence_terms)]
    return sorted(range(count), key=lambda i: -score[i])


_BOUND = re.compile(r"(?:(?i:\b(?:up to|more than|less than|fewer than|at least|at most|nearly|almost|approximately|"
                    r"roughly|about|around))\s+|[<>≤≥~≈]\s*)$")   # before a number: it is a bound, not the value


def with_bounds(claim: str, source: str) -> str:
    """The claim with each number it gives bare that its source gives only with a bound ('<7%', 'up to 85%')
    given with that bound: a claim that copies "from <7% to ≈ 90%" as "from 7% to ≈ 90%" states more than
    the source does. A number is its digits and its sign ('7%' is not '7 points'); one the source gives bare
    anywhere, or with two bounds, or that the claim gives with a bound of its own, is left as it is."""
    bounds: dict[tuple[str, str], set[str]] = {}
    for match in value_matches(source):
        bound = _BOUND.search(source, max(0, match.start() - 20), match.start())
        bounds.setdefault(_number_key(source, match), set()).add(bound[0] if bound else "")
    for match in reversed(value_matches(claim)):
        given = bounds.get(_number_key(claim, match), {""})
        if "" not in given and len(given) == 1 and not _BOUND.search(claim, max(0, match.start() - 20), match.start()):
            claim = claim[:match.start()] + given.pop() + claim[match.start():]
    return claim


def _number_key(text: str, match: re.Match) -> tuple[str, str]:
    """A number's digits and the sign right after it, if any: ('7', '%')."""
    after = text[match.end():match.end() + 1]
    return match[1], after if after and after in "%×x" else ""


def quoted_claim(label: str, sentence: str) -> str:
    """The form that stands in for a restated question: 'Label: "the abstract's sentence"'."""
    if len(sentence) > MAX_QUOTE_CHARS:
        sentence = sentence[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0] + " …"
    return labelled(label, f'"{sentence}"')


def labelled(label: str, text: str) -> str:
    """A sentence that names its paper by starting with the label: 'Label: text' (split_label reads it)."""
    return f"{label}: {text}"


def name_the_paper(claim: str, label: str, first: bool = False) -> str:
    """A claim that speaks of its paper without naming it, named: 'The paper shows …' -> 'The paper by
    Label shows …'; 'We propose …' -> 'Label propose …' (for a label of several authors, so the verb
    still agrees). The `first` claim shown about a paper that still does not name it starts with the
    label, as a quote does ('GFPO curbs …' -> 'Shrivastava et al.: GFPO curbs …'), so each paper an
    answer lists is named where it is told; so does a claim that writes the label and then a sentence
    of its own ('Mao et al. A human preference …' -> 'Mao et al.: A human preference …'). A claim that
    names the paper is returned as it is."""
    if claim.startswith(f"{label} ") and claim[len(label) + 1:][:1].isupper():
        return labelled(label, claim[len(label) + 1:])
    if any(re.search(rf"\b{re.escape(name)}\b", claim, re.IGNORECASE)
           for name in label.removesuffix(" et al.").split(" and ")):
        return claim   # named as a word: 'Ying' is not in 'time-varying'
    subject = _UNNAMED_SUBJECT.match(claim)
    if subject is not None and subject["kind"]:
        return f"The {subject['kind'].lower()} by {label}{claim[subject.end():]}"
    several_authors = label.endswith(" et al.") or " and " in label
    if subject is not None and several_authors:
        return f"{label}{claim[subject.end():]}"
    return labelled(label, claim) if first else claim


def described_paper(claim: str, question: str) -> str | None:
    """The question's description of a paper that a claim opens with: the claim's first words, copied from
    the question, starting with 'the' or 'this' and holding a word for a paper ('The position paper on causal
    representation learning argues …' of 'How do the critique of causal abstraction and the position paper on
    causal representation learning differ?'); else None."""
    claim_words = [w.lower() for w in _LEAD_WORD.findall(claim)]
    question_words = [w.lower() for w in _LEAD_WORD.findall(question)]
    if not claim_words or claim_words[0] not in ("the", "this"):
        return None
    longest = 0
    for start in range(len(question_words)):
        length = 0
        while length < len(claim_words) and start + length < len(question_words) \
                and claim_words[length] == question_words[start + length]:
            length += 1
        longest = max(longest, length)
    lead = claim_words[:longest]
    return " ".join(lead) if len(lead) >= 2 and _DESCRIPTION_NOUNS & set(lead) else None


def whole_sentence(claim: str, sentences: list[str], label: str = "") -> str | None:
    """The source sentence that a claim is the tail of: a claim whose first word is a lowercase word (after
    its paper's label and a gap mark the model copied: 'Rozen et al. … significantly improves …'), and
    whose first four words stand in one of `sentences` ('second, articulated object …' of 'Second,
    articulated object …'), or, as the model may change the word it starts with, five words from its
    second or third word on ('the leaf node is not a valid …' of '… if any leaf node is not a valid …');
    else None."""
    gap = re.match(rf"{re.escape(label)}:?\s*(?:…|\.\.\.)\s*", claim) if label else None
    words = claim[gap.end():].split() if gap else claim.split()
    if not words or not re.fullmatch(r"[a-z]+[,;:]?", words[0]):
        return None
    openings = [" ".join(words[:4])] + [" ".join(words[i:i + 5]) for i in (1, 2) if len(words) >= i + 5]
    for opening in openings:
        found = next((s for s in sentences if opening.lower() in " ".join(s.split()).lower()), None)
        if found is not None:
            return found
    return None


def finished_claim(claim: str, sentences: list[str]) -> str | None:
    """A claim the reply's length limit cut ('… evaluation does not necessarily need to rely…'), finished
    with the rest of the source sentence it was copying: the one that holds its last CUT_CLAIM_WORDS words
    ('… need to rely on large-scale generative models but can instead leverage …'). None for a claim that
    was not cut, or whose last words are in none of `sentences`."""
    if not claim.endswith("…"):
        return None
    body = claim.removesuffix("…").rstrip()
    words = body.split()
    if len(words) < CUT_CLAIM_WORDS:
        return None
    copied = re.compile(r"\s+".join(re.escape(word) for word in words[-CUT_CLAIM_WORDS:]), re.IGNORECASE)
    for sentence in sentences:
        if found := copied.search(sentence):
            return body + sentence[found.end():]
    return None


def split_label(sentence: str, labels: list[str]) -> tuple[str, str]:
    """('Label: ', the rest) for a sentence that starts with one of these papers' labels and a colon
    (name_the_paper, quoted_claim); ('', the sentence) for any other. The label is the citation, written
    out: a translation keeps it as it is, and the eval's grounding judge does not look for it in the abstract."""
    for label in labels:
        prefix = labelled(label, "")
        if sentence.startswith(prefix):
            return prefix, sentence[len(prefix):]
    return "", sentence


def label_out(sentence: str, labels: list[str]) -> tuple[str, str]:
    """('Label: ', the sentence without the label) for a sentence that names one of these papers by its
    label ("Guan et al. propose rStar-Math …" -> 'Guan et al.: ', "The authors propose rStar-Math …"; "The
    paper by Shi and Cao proves …" -> 'Shi and Cao: ', "The paper proves …"), so that a translation of the
    rest cannot write the name in other letters (the local model wrote "吴等", Wu et al., for Guan et al.);
    split_label's pair for one that starts with 'Label: '; ('', the sentence) for any other."""
    prefix, rest = split_label(sentence, labels)
    if prefix:
        return prefix, rest
    for label in labels:
        name = re.escape(label)
        if not re.search(rf"(?<!\w){name}(?!\w)", sentence):
            continue
        rest = re.sub(rf"\b([Tt]he \w+) (?:by|of) {name}(?!\w)", r"\1", sentence)   # 'The abstract of X …'
        rest = re.sub(rf"^{name}(?!\w)", "The authors", rest)
        return labelled(label, ""), re.sub(rf"(?<!\w){name}(?!\w)", "the authors", rest)
    return "", sentence


def in_third_person(claim: str) -> str:
    """A claim copied from an abstract speaks as its authors ('… outperforms our baselines'); the answer
    speaks of them: 'we', 'our', 'ours' become 'they', 'their', 'theirs', except inside quotation marks,
    where the abstract's own words stand. ('us' stays: 'moves us forward' is said of everyone.)"""
    pieces = _QUOTED.split(claim)   # the quoted parts are the odd pieces
    return "".join(piece if i % 2 else _FIRST_PERSON.sub(_third_person, piece) for i, piece in enumerate(pieces))


def _third_person(word: re.Match) -> str:
    said = _THIRD_PERSON[word[0].lower()]
    return said.capitalize() if word[0][0].isupper() else said


def not_stated_claim(label: str, what: str = "this") -> str:
    """The fixed sentence for a fact the model gave a number for that its source does not state; `what`
    names it when the answer also says other things ('the number of GPUs')."""
    return f"The abstract of {label} does not state {what}."
