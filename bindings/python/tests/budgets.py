"""Budgets for the model tests of the `tensorref` device: a fraction of a model's unmanaged peak,
raised, op by op, where one op needs more at once than that fraction."""
import re

import torch


def needed(error: Exception) -> int:
    """The bytes an op needs at once, from the manager's message (a budget too small for one op
    is torch's OutOfMemoryError)."""
    found = re.search(r"needs (\d+) bytes at once", str(error))
    if found is None:
        raise error
    return int(found.group(1))


def raised_as_needed(run, budget: int, may_raise: bool):
    """`run(budget)` under a budget raised, op by op, to what the first op that cannot fit needs
    at once (only where `may_raise`). Returns its result and the budget it ran under."""
    for _ in range(8):
        try:
            return run(budget), budget
        except torch.OutOfMemoryError as e:
            assert may_raise, e
            budget = needed(e)
    raise AssertionError(f"still too small at {budget} bytes")
