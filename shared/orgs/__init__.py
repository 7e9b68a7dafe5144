"""What an org may use of the shared system: its request rate limit, and operators' overrides."""
