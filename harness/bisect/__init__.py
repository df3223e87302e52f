"""``harness bisect``: which upstream commit broke a gate, between a good and a bad revision.

The search is ``git bisect run``'s: git keeps the bookkeeping (which commits are left, which were
skipped, which is the first bad one) in a bare clone of the engine's repository under the bisect's
state dir, and runs one probe per step (``python -m harness.bisect.step STATE``), which answers as
``git bisect run`` expects: 0 good, 1 bad, 125 skip (a commit that does not build or whose patch
series does not apply), 128 abort (the harness itself failed: no Valgrind, a model missing).

- :mod:`harness.bisect.gates`: what decides a commit: a speed gate (``decode>=0.97``,
  ``prefill>=0.95``) decided by CPU simulation against the good build, agreement (``kld<=0.01``,
  ``top1>=0.99``) against the good build's outputs, or an e2e spec (``e2e:PATH``);
- :mod:`harness.bisect.probe`: one commit built: fetched from the repository, the patch series
  applied, one CPU level (the one the gate's instrument runs) with the shared ccache;
- :mod:`harness.bisect.search`: the state dir, the stamps (a commit probed once is never probed again:
  a search stopped half-way is resumed by running the same command) and the result.
"""
