"""Code that runs ON the nodes, with the nodes' own Python (standard library only): uploaded to the share
and started there. Nothing here imports the rest of batchai_sdk."""
