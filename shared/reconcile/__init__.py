"""Re-enqueueing work whose job was lost (the beat's reconcile run)."""
