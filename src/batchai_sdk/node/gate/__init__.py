"""The health gate: checks that keep a bad node (a GPU missing or throttled, ECC errors, a slow link) out
of a job. ``checks`` judges the tools' outputs, ``probe`` runs on each node, ``run`` goes across the
cluster from the head node; the scheduler calls it when nodes join, ``Cluster.check_nodes`` by hand."""
