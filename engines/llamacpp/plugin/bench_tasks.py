"""Prompts of the binding arm's bench tasks (``task=`` option), as token ids of the arm's model.

``synthetic`` (the default): pN token ids spread over the vocabulary (:func:`synthetic_prompt`),
the same for every arm; what the pipeline's gates have always measured.

``copy``: a copy-heavy task where speculative decoding from the prompt pays: a natural-language
passage of about pN tokens, then an instruction to repeat it word for word. Greedy; concurrent
streams start the passage at different sentences.

``free``: free generation, where drafting from the prompt should find little to copy: a short
instruction to write about one of several topics (pN is ignored: the prompt is what it is).

The passage is prose written for this harness (no third-party text): sentences about weather,
rivers and maps, plain enough that a 135M model copies them and varied enough not to repeat.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.core.errors import BenchError

TASKS = ("synthetic", "copy", "free")

_SENTENCES = (
    "The river begins as a thin line of snowmelt high in the northern hills.",
    "In early spring the water runs clear and cold over grey stones and fallen pine needles.",
    "Farmers in the valley below watch the level rise each week and plan their planting around it.",
    "By late April the stream has gathered a dozen smaller brooks and turns the colour of weak tea.",
    "An old stone bridge crosses it near the mill, where the miller once ground barley for three villages.",
    "The mill wheel no longer turns, but children still throw sticks from the bridge and race to the other side.",
    "Further south the valley widens and the river slows into long curves between meadows of clover.",
    "Herons stand in the shallows at dawn, perfectly still, waiting for small fish to drift past.",
    "A ferry once carried carts across the widest bend before the county built the iron bridge in 1891.",
    "The ferryman's cottage is now a small museum with maps, photographs and a brass bell on the door.",
    "Summer storms can raise the water by a metre in a single night, flooding the lower fields.",
    "After such a storm the meadows shine with standing water and the air smells of wet earth and mint.",
    "The town at the river mouth grew rich on salt, wool and timber floated down from the forests.",
    "Its harbour wall was rebuilt twice after winter gales broke it, once in 1703 and again in 1954.",
    "Today the quay is lined with cafes, and fishing boats share the moorings with small sailing yachts.",
    "Every September the town holds a festival in which lanterns are set afloat on the evening tide.",
    "Mapmakers have charted the river for four centuries, and each map shows its course a little differently.",
    "The oldest chart in the museum places the mill on the wrong bank and forgets two of the bridges.",
    "Surveyors now measure the channel with sonar from a small boat and publish new maps every five years.",
    "Those maps show the river slowly moving east, a few centimetres a year, as it cuts into the softer clay.",
    "Hydrologists say that in a thousand years the town may stand a kilometre from the water it was built on.",
    "For now the river keeps its appointment with the sea twice a day, when the tide turns at the harbour mouth.",
)

_TOPICS = (
    "a lighthouse keeper who finds a message in a bottle",
    "the first day of school in a village on a mountain",
    "a robot learning to bake bread",
    "two friends crossing a desert on camels",
    "a city garden that grows on the roof of a train station",
    "a cat that is afraid of the dark",
    "an astronaut repairing a radio far from Earth",
    "a market where people trade memories instead of money",
)


def passage(n_tokens: int, tokenize: Callable[[str], list[int]], salt: int = 0) -> str:
    """Sentences from ``salt`` on (wrapping around) until the text is about ``n_tokens`` tokens."""
    out: list[str] = []
    i = salt % len(_SENTENCES)
    while len(tokenize(" ".join(out))) < n_tokens:
        out.append(_SENTENCES[i % len(_SENTENCES)])
        i += 1
        if i - salt > 64 * len(_SENTENCES):  # a tokenizer that yields nothing
            msg = "bench passage: the model's tokenizer produced no tokens"
            raise BenchError(msg)
    return " ".join(out)


def copy_prompt(n_tokens: int, tokenize: Callable[[str], list[int]], salt: int = 0) -> str:
    """The copy task: a passage of about ``n_tokens`` tokens, then "repeat it"."""
    text = passage(n_tokens, tokenize, salt)
    return (f"Read the passage below.\n\nPassage:\n{text}\n\n"
            f"Now repeat the passage above word for word, without changing anything.\n\nPassage:\n")


def free_prompt(salt: int = 0) -> str:
    """The free-generation task: a story about one of a few topics."""
    return f"Write a short story about {_TOPICS[salt % len(_TOPICS)]}.\n\nStory:\n"
