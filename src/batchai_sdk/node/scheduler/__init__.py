"""The cluster's scheduler daemon, run on the head node only (``__main__ scheduler``), and ``ctl``, the
one-request client the backends run beside it. Each module holds one part of the daemon, which owns its
own state and is given only what it works with; ``daemon.py`` composes them and none imports it
(docs/architecture.md, the scheduler's parts)."""
