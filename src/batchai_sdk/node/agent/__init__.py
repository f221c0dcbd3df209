"""The warm node agent of the SSH backend: one Python process per node, started once by the cluster's
scheduler over its kept SSH connection, that ends a job's processes, runs job preparation and starts the
rank shim there without an SSH session and an interpreter start-up per hand-off (serve.py on the node;
client.py and keeper.py on the head node)."""
