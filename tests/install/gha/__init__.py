"""A local stand-in for GitHub Actions: runs the project's own workflow on this host
(``tests/install/test_workflow.py``).

- :mod:`.expressions`: ``${{ }}`` tokenized, parsed and evaluated as GitHub does, templates,
  conditions, and the file commands a step leaves (``$GITHUB_OUTPUT``, ``$GITHUB_ENV``);
- :mod:`.actions`: the stand-ins for the actions the workflow uses (checkout, setup-python,
  upload/download-artifact);
- :mod:`.runner`: validation, job order, matrix expansion, the results and
  :func:`run_workflow`, which runs the jobs (its docstring says how, and where it is not GitHub).
"""

from __future__ import annotations

from .actions import ACTIONS
from .expressions import (
    ExpressionError,
    StepFailed,
    WorkflowError,
    evaluate,
    evaluate_condition,
    evaluate_template,
    parse_file_commands,
)
from .runner import (
    Event,
    JobResult,
    StepResult,
    WorkflowFailed,
    WorkflowRun,
    describe_failure,
    expand_matrix,
    host_environment,
    run_workflow,
    validate,
)

__all__ = [
    "ACTIONS",
    "Event",
    "ExpressionError",
    "JobResult",
    "StepFailed",
    "StepResult",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowRun",
    "describe_failure",
    "evaluate",
    "evaluate_condition",
    "evaluate_template",
    "expand_matrix",
    "host_environment",
    "parse_file_commands",
    "run_workflow",
    "validate",
]
