"""What every feature shares: the errors a client can cause and the limits on what it
may store (checked in the domain, so HTTP, the tools and MCP share each cap)."""
