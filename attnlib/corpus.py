"""Real English sentences and texts the chapters share, so that examples stay consistent,
and the helpers that read them.

Each sentence is ordinary prose; none is generated.  Chapters may add their own, but the
running examples live here.  Longer public-domain texts ship in ``attnlib/data``
(:func:`load_text`); :func:`words_of` splits a text into the words a small model learns on.
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["reference_sentences", "RUNNING", "BEARS", "PAIR", "PADDED_BATCH", "SINK_PROBES", "load_text", "words_of",
           "COREFERENCE_PAIRS", "COREFERENCE_HELD_OUT", "COREFERENCE_INANIMATE"]

_DATA = Path(__file__).parent / "data"
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*|--|[^\sa-z]")

# The running example of chapters 1-5.
RUNNING = "The cat sat on the mat because it was warm."

# "bears" as object, verb, subject and adjective (curriculum, chapters 2 and 9).
BEARS = {
    "object": "We watched the bears from a safe distance.",
    "verb": "She bears the weight of the whole team.",
    "subject": "The bears fished for salmon in the river.",
    "adjective": "The Bears fans cheered when the final whistle blew.",  # team name as modifier
}

# A classic garden-path pair (chapter 9, bertviz with sentence_b_start).
PAIR = ("time flies like an arrow", "fruit flies like a banana")

# Sentences of unequal length for padding masks (chapter 5).
PADDED_BATCH = [
    "Attention is all you need.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello there!",
]

# Varied sentences for measuring separator and [CLS] "sinks" across heads (chapters 8, 9).
SINK_PROBES = [
    "The committee approved the new budget on Tuesday.",
    "Rain is expected across the north later this week.",
    "She handed him the keys and walked out of the room.",
    "Most birds build their nests in early spring.",
    "The museum closes at six, so we should hurry.",
    "He forgot his umbrella, and of course it rained.",
    "Scientists measured the temperature of the lake every hour.",
    "Our train was delayed by almost forty minutes.",
]


def load_text(name: str = "gettysburg") -> str:
    """A public-domain text shipped in ``attnlib/data`` (``"gettysburg"``: Lincoln's
    Gettysburg Address, 1863; see ``attnlib/data/README.md``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: no such text; the message lists the available ones.

    >>> load_text().split()[:4]
    ['Four', 'score', 'and', 'seven']
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'gettysburg', got {type(name).__name__}")
    path = _DATA / f"{name}.txt"
    if "/" in name or "\\" in name or not path.is_file():
        known = sorted(p.stem for p in _DATA.glob("*.txt"))
        raise ValueError(f"no text named {name!r} in attnlib/data; available: {known}")
    return path.read_text(encoding="utf-8")


def words_of(text: str) -> list[str]:
    """Lower-cased words and punctuation marks of ``text``, in order.  A word may hold
    hyphens (``battle-field``); a double hyphen (``--``) is one mark.

    Raises:
        TypeError: ``text`` is not a str.

    >>> words_of("We are met on a great battle-field -- of that war.")
    ['we', 'are', 'met', 'on', 'a', 'great', 'battle-field', '--', 'of', 'that', 'war', '.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _WORD.findall(text.lower())


#: Minimal pairs for the pronoun *it* (chapter 9, the test of layer 4, head 3), written for that
#: test before it was run: ``(text_a, text_b, referent_a, referent_b)``.  The two sentences differ
#: in one word, the adjective at the end (one word piece in both), and that word changes what
#: *it* refers to: ``referent_a`` in ``text_a``, ``referent_b`` in ``text_b``, the two nouns of
#: the sentence, each a single word piece occurring once, with *it* once.  The first follows the
#: Winograd schema of Levesque et al. (2012), "The trophy doesn't fit into the brown suitcase
#: because it's too large"; the others are written in its form: a property that fits only one of
#: the two nouns.  The referent is the reading an English speaker gives; none is ambiguous in
#: the way "The cat sat on the mat because it was warm." is.  In every pair ``referent_a`` is the
#: subject.  The shift a pair gives (:func:`attnlib.evidence.referent_shifts`) is the same
#: whichever sentence comes first, so that order is not a confound; the changed word is: a word
#: often used with one of the nouns (*delicious* with *worm*) could draw weight to it without
#: any reading of the pronoun (:func:`attnlib.evidence.control_shifts` is the control).
COREFERENCE_PAIRS = (
    ("The trophy did not fit in the suitcase because it was too big.",
     "The trophy did not fit in the suitcase because it was too small.", "trophy", "suitcase"),
    ("The dog could not catch the ball because it was too slow.",
     "The dog could not catch the ball because it was too fast.", "dog", "ball"),
    ("The fish ate the worm because it was hungry.",
     "The fish ate the worm because it was delicious.", "fish", "worm"),
    ("The bird could not crack the seed because it was too weak.",
     "The bird could not crack the seed because it was too hard.", "bird", "seed"),
    ("The horse could not jump the fence because it was too tired.",
     "The horse could not jump the fence because it was too high.", "horse", "fence"),
    ("The boat could not cross the river because it was too small.",
     "The boat could not cross the river because it was too wide.", "boat", "river"),
    ("The truck could not cross the bridge because it was too heavy.",
     "The truck could not cross the bridge because it was too weak.", "truck", "bridge"),
    ("The dog drank the water because it was thirsty.",
     "The dog drank the water because it was clean.", "dog", "water"),
    ("The table would not fit through the door because it was too wide.",
     "The table would not fit through the door because it was too narrow.", "table", "door"),
    ("The ball broke the window because it was heavy.",
     "The ball broke the window because it was thin.", "ball", "window"),
    ("The cat ate the fish because it was hungry.",
     "The cat ate the fish because it was fresh.", "cat", "fish"),
    ("The mouse ran from the snake because it was scared.",
     "The mouse ran from the snake because it was dangerous.", "mouse", "snake"),
    ("The frog caught the fly because it was quick.",
     "The frog caught the fly because it was slow.", "frog", "fly"),
    ("The cow ate the grass because it was hungry.",
     "The cow ate the grass because it was sweet.", "cow", "grass"),
    ("The knife could not cut the bread because it was too blunt.",
     "The knife could not cut the bread because it was too hard.", "knife", "bread"),
    ("The plane could not land on the runway because it was too heavy.",
     "The plane could not land on the runway because it was too short.", "plane", "runway"),
)

#: A second set of 16 minimal pairs in the form of :data:`COREFERENCE_PAIRS`, none of whose
#: sentences is in it.  A reviewer of chapter 9 wrote 17 after the first set's result was known
#: (11 of 16 shifts positive, p = 0.21) and before running them; then, before the run chapter 9
#: reports, one was dropped (*lorry* is two word pieces); four whose subject was a person were
#: rewritten (a person is *he* or *she*, not *it*): three with another subject (*man* to
#: *crane*, *girl* to *ladder*, *baby* to *puppy*) and one replaced by a new pair (*The boy threw
#: away the apple* by *The bag could not hold the book*); and two adjectives that fit either noun
#: (a key can be *rusty*, a dog *old*) were replaced by *jammed* and *fresh*, the bone pair's verb
#: changing from *buried* to *chewed*.  The reviewer's run of the first wording had given 14 of
#: 16 shifts positive; the set as it stands gives what chapter 9 reports.
COREFERENCE_HELD_OUT = (
    ('The cat chased the bird because it was hungry.',
     'The cat chased the bird because it was slow.', 'cat', 'bird'),
    ('The crane could not lift the box because it was too weak.',
     'The crane could not lift the box because it was too heavy.', 'crane', 'box'),
    ('The ladder could not reach the shelf because it was too short.',
     'The ladder could not reach the shelf because it was too high.', 'ladder', 'shelf'),
    ('The wolf ate the sheep because it was starving.',
     'The wolf ate the sheep because it was slow.', 'wolf', 'sheep'),
    ('The bag could not hold the book because it was too small.',
     'The bag could not hold the book because it was too big.', 'bag', 'book'),
    ('The lion attacked the deer because it was hungry.',
     'The lion attacked the deer because it was weak.', 'lion', 'deer'),
    ('The key would not open the lock because it was bent.',
     'The key would not open the lock because it was jammed.', 'key', 'lock'),
    ('The puppy dropped the spoon because it was sleepy.',
     'The puppy dropped the spoon because it was slippery.', 'puppy', 'spoon'),
    ('The ship could not enter the harbour because it was too large.',
     'The ship could not enter the harbour because it was too shallow.', 'ship', 'harbour'),
    ('The hawk caught the rabbit because it was fast.',
     'The hawk caught the rabbit because it was slow.', 'hawk', 'rabbit'),
    ('The tiger could not climb the wall because it was too heavy.',
     'The tiger could not climb the wall because it was too steep.', 'tiger', 'wall'),
    ('The dog chewed the bone because it was bored.',
     'The dog chewed the bone because it was fresh.', 'dog', 'bone'),
    ('The chair would not fit under the desk because it was too tall.',
     'The chair would not fit under the desk because it was too low.', 'chair', 'desk'),
    ('The snake swallowed the egg because it was hungry.',
     'The snake swallowed the egg because it was small.', 'snake', 'egg'),
    ('The bear could not open the jar because it was too clumsy.',
     'The bear could not open the jar because it was too tight.', 'bear', 'jar'),
    ('The goat ate the paper because it was curious.',
     'The goat ate the paper because it was soft.', 'goat', 'paper'),
)


#: A third set of 16 minimal pairs in the form of :data:`COREFERENCE_PAIRS`, in which both nouns
#: are things, not animals or people (the first two sets have an animal as one noun in most
#: pairs).  Written by the course authors on 2026-12-07 and frozen, in the commit that added it,
#: before the model was run on any of its sentences; the only check made before freezing was the
#: tokenizer's (each noun one word piece, the two texts one word piece apart), which replaced one
#: draft pair (*The pencil would not fit in the sharpener*: *sharpener* is two word pieces) by
#: the first drafted alternate (the rug and the floor).
#:
#: The test fixed with it (chapter 9 runs it): layer 4, head 3, query *it*, the shift of
#: :func:`attnlib.evidence.referent_shifts` for each pair, and a one-sided sign test
#: (:func:`attnlib.evidence.sign_test`, ``alternative="greater"``) over the 16 pairs at the level
#: 0.05.  The hypothesis is one-directional: the weight of *it* moves towards the noun it refers
#: to.  Read beside it, described but not tested: the same shift for all 72 heads (one run per
#: sentence, :func:`attnlib.evidence.head_shifts`), each head ranked by its median shift on this
#: set and on the 32 earlier pairs (:data:`COREFERENCE_PAIRS` and :data:`COREFERENCE_HELD_OUT`),
#: and the rank correlation of the 72 medians between the two.
COREFERENCE_INANIMATE = (
    ("The piano would not fit through the gate because it was too big.",
     "The piano would not fit through the gate because it was too narrow.", "piano", "gate"),
    ("The rope could not hold the anchor because it was too thin.",
     "The rope could not hold the anchor because it was too heavy.", "rope", "anchor"),
    ("The shelf could not hold the television because it was too weak.",
     "The shelf could not hold the television because it was too heavy.", "shelf", "television"),
    ("The nail would not go into the board because it was too blunt.",
     "The nail would not go into the board because it was too hard.", "nail", "board"),
    ("The car could not climb the hill because it was too old.",
     "The car could not climb the hill because it was too steep.", "car", "hill"),
    ("The blanket did not cover the bed because it was too short.",
     "The blanket did not cover the bed because it was too long.", "blanket", "bed"),
    ("The envelope could not hold the letter because it was too small.",
     "The envelope could not hold the letter because it was too thick.", "envelope", "letter"),
    ("The sofa would not go up the staircase because it was too bulky.",
     "The sofa would not go up the staircase because it was too narrow.", "sofa", "staircase"),
    ("The tent did not keep out the rain because it was torn.",
     "The tent did not keep out the rain because it was heavy.", "tent", "rain"),
    ("The ice could not hold the truck because it was too thin.",
     "The ice could not hold the truck because it was too heavy.", "ice", "truck"),
    ("The picture would not fit in the frame because it was too large.",
     "The picture would not fit in the frame because it was too small.", "picture", "frame"),
    ("The rug would not lie flat on the floor because it was too stiff.",
     "The rug would not lie flat on the floor because it was too uneven.", "rug", "floor"),
    ("The sail tore in the wind because it was too old.",
     "The sail tore in the wind because it was too strong.", "sail", "wind"),
    ("The candle could not light the room because it was too dim.",
     "The candle could not light the room because it was too large.", "candle", "room"),
    ("The engine could not pull the train because it was too weak.",
     "The engine could not pull the train because it was too long.", "engine", "train"),
    ("The dam could not hold back the flood because it was too low.",
     "The dam could not hold back the flood because it was too strong.", "dam", "flood"),
)


def reference_sentences() -> list:
    """The reference sentences for baselines: :data:`SINK_PROBES` and every
    sentence of the Gettysburg Address with more than three words (18 sentences): what the encoder's baselines
    are measured on, and the reference inputs of its mean ablation (:func:`attnlib.encoder.run`).

    >>> len(reference_sentences())
    18
    """
    speech = [s.strip() + "." for s in re.split(r"\.", load_text("gettysburg")) if len(s.split()) > 3]
    return list(SINK_PROBES) + speech
