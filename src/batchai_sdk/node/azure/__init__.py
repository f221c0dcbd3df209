"""Azure-only node code: Scheduled Events (eviction notices) read on every VM, and the scale set's capacity
changed by the scheduler through the VM's managed identity."""
