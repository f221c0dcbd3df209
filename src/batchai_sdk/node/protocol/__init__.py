"""The wire: the contract between the client and the node code, spelled once (standard library only; the
client imports it as ``batchai_sdk.node.protocol``, the nodes as ``batchai_node.protocol``).

A record or path change is one diff here, seen by both halves. Each record reads the keys older versions
wrote for one version (``wrapper_host``/``wrapper_pid`` and ``scheduler`` became ``reporter``).

- ``names``: a request's vocabulary (names, ops, priorities, gate levels); what ``ctl`` loads, ``re`` only
- ``paths``: every share path under a root (``SharePaths``) and the file names of the records
- ``fields``: a request's fields checked (``RequestError`` naming the field)
- ``requests``: the socket's requests and their checks, the reply codes and the reply
- ``cluster``: the cluster's configuration (``ClusterConfig``) and its check
- ``launch``: a job's launch configuration (``LaunchConfig``) and a launcher's result
- ``records``: the records both sides read and write (``StatusDoc`` and its ``Reporter``, ``NodesDoc``)

This package's ``__init__`` imports nothing: ``ctl`` loads ``names``, ``fields``, ``requests``, ``cluster``.
"""
