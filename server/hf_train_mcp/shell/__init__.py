"""The shells: the MCP server, the CLI, the demo, and the mains of the detached supervisors."""
