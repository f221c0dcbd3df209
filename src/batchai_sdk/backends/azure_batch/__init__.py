"""Azure Batch as the engine of an Azure workspace (``Workspace.azure(..., engine="batch")``): a cluster
is a Batch pool, a job a Batch job with one multi-instance task. Importing this package needs no Azure SDK;
using it raises MissingExtraError naming the extra (``pip install 'batchai_sdk[azure]'``).
"""

from .backend import AzureBatchBackend

__all__ = ["AzureBatchBackend"]
