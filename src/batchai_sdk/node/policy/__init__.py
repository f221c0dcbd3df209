"""Pure decisions, imported by the scheduler on the head node and by the client alike: the queue's order,
autoscale, retries, the hang watchdog's rules and each toolkit's launch (ranks, variables)."""
