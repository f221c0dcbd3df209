"""The SSH backend: machines you bring, reached over SSH (paramiko), a share they all mount.

``backend`` (the Backend), ``node_setup`` (per-node set-up run once), ``keys`` (the cluster's ed25519
key), ``cluster_secrets`` (the setup task's secrets, kept with the key), ``share`` (the SFTP view of
the share).
"""

from .backend import SSHBackend

__all__ = ["SSHBackend"]
