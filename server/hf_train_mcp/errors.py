"""The one exception the core raises for problems the caller can fix.

The MCP shell turns it into a ToolError and the CLI into a one-line message; the core never imports mcp.
"""


class TrainError(Exception):
    """Something the caller sent (or the environment lacks) that they can fix; the text says how."""
