"""The stored listing: what tools/list, prompts/list, resources/templates/list and `initialize`'s instructions
show a client, generated from the request and result models into tools_list.json beside this module.

A fresh server answers tools/list from it, so that the models (and the methods, backends and results they are
made of) wait for the first tools/call; tests/test_transports.py holds that it equals what the models produce
(HFTM_UPDATE_SNAPSHOT=1 on that test writes it again). Once the models are imported anyway (a process that
already used them, a test that registered a method of its own), the server lists from them instead.
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.types import Tool as MCPTool

STORED = Path(__file__).with_name("tools_list.json")
# what the listing is made of: imported already, the models list themselves at no extra cost
MODELS = "hf_train_mcp.contract.requests"


@dataclass(frozen=True)
class Listing:
    instructions: str
    tools: list[MCPTool]


def stored_listing() -> Listing | None:
    """The stored listing, unless the models are built already (then they answer: what a process changed in
    its registries shows)."""
    if MODELS in sys.modules or not STORED.is_file():
        return None
    data = json.loads(STORED.read_text(encoding="utf-8"))
    return Listing(instructions=data["instructions"], tools=[MCPTool.model_validate(t) for t in data["tools"]])


async def generated_listing(server: Any, instructions: str) -> str:
    """The text of tools_list.json as `server` (a CompactMCPServer) lists from its models."""
    def dumped(items: list[Any]) -> list[dict[str, Any]]:
        return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]

    listing = {
        "instructions": instructions,
        "tools": dumped(await server.built_tools()),
        "prompts": dumped(await server.list_prompts()),
        "resource_templates": dumped(await server.list_resource_templates()),
    }
    return json.dumps(listing, indent=1, ensure_ascii=False) + "\n"
