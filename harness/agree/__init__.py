"""Numerical agreement between two arms (``harness agree``): KL divergence, top-1 agreement and
perplexity of the next-token distributions over a pinned text corpus.

``corpus`` (the pinned text), ``run`` (the two workers, windows streamed and compared),
``stats`` (per-position scalars, summary, bootstrap over windows), ``thresholds`` (per
comparison kind, from the engine descriptor), ``report`` (markdown, plot).
"""
