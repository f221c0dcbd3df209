"""A job's processes on the nodes: the launcher (head node, one per attempt), the rank shim and job
preparation (every node), container argv, finding and ending a job's processes, and their stacks."""
