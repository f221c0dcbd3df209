"""``python -m batchai_sdk.cli``: the same as the ``batchai`` console script."""

from . import console

console()
