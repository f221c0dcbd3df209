"""The Azure backend: a resource group, a storage account with a file share, a network, and clusters as
VM scale sets. Importing this package needs no Azure SDK; using it raises MissingExtraError naming the
extra (``pip install 'batchai_sdk[azure]'``) when one is missing.
"""

from ...exceptions import AzureQuotaError
from .backend import AzureBackend, AzureInstance, detect_public_address
from .node_setup import NodeEnvironment
from .preflight import QuotaShortError, SkuNotAvailableError
from .share import AzureFileShare
from .sweep import TaggedResource, sweep

__all__ = [
    "AzureBackend",
    "AzureFileShare",
    "AzureInstance",
    "AzureQuotaError",
    "NodeEnvironment",
    "QuotaShortError",
    "SkuNotAvailableError",
    "TaggedResource",
    "detect_public_address",
    "sweep",
]
