"""Re-evaluation campaigns: matching topics re-summarized or re-evaluated at a rate."""
