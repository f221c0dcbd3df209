"""The cluster's scheduler daemon, run on the head node only (``__main__ scheduler``), and ``ctl``, the
one-request client the backends run beside it. Each module holds one part of the daemon."""
