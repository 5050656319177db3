"""Real English sentences the chapters share, so that examples stay consistent.

Each sentence is ordinary prose; none is generated.  Chapters may add their own, but the
running examples live here.
"""
from __future__ import annotations

__all__ = ["RUNNING", "BEARS", "PAIR", "PADDED_BATCH", "SINK_PROBES"]

# The running example of chapters 1-5.
RUNNING = "The cat sat on the mat because it was warm."

# "bears" as object, verb, subject and adjective (curriculum, chapters 2 and 8).
BEARS = {
    "object": "We watched the bears from a safe distance.",
    "verb": "She bears the weight of the whole team.",
    "subject": "The bears fished for salmon in the river.",
    "adjective": "The Bears fans cheered when the final whistle blew.",  # team name as modifier
}

# A classic garden-path pair (chapter 8, bertviz with sentence_b_start).
PAIR = ("time flies like an arrow", "fruit flies like a banana")

# Sentences of unequal length for padding masks (chapter 5).
PADDED_BATCH = [
    "Attention is all you need.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello there!",
]

# Varied sentences for measuring separator and [CLS] "sinks" across heads (chapters 7, 8).
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
