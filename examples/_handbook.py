"""The question, answer and documents the LangChain, LlamaIndex and Haystack example apps share."""

QUESTION = "How long is the warranty on the X200 kettle?"
ANSWER = "The X200 kettle has a two-year warranty."
HANDBOOK = [
    "The X200 kettle has a two-year warranty.",
    "Returns are accepted within 30 days of purchase.",
    "The X200 kettle boils one litre in three minutes.",
    "Our support line is open on weekdays.",
]
