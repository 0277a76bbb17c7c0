"""hf-train-mcp: fine-tune models with TRL on Hugging Face Jobs or locally, driven by an MCP client."""

__version__ = "0.1.0"
