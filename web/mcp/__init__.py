"""The built-in tools and the context stack over MCP, for agent runtimes that mount MCP servers."""
