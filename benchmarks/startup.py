"""Time to answer initialize + tools/list over stdio: hf-train-mcp vs a bare MCPServer with no tools.

Both are started the same way (a fresh `python` process, stdio transport) and driven by the SDK client; the
difference is what our package adds on top of the SDK's own import cost. Run: python benchmarks/startup.py
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

BARE = "from mcp.server import MCPServer\nMCPServer('bare').run()\n"
RUNS = 15


async def once(params: StdioServerParameters) -> float:
    started = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        return time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        servers = {
            "bare MCPServer": StdioServerParameters(command=sys.executable, args=[str(bare)]),
            "hf-train-mcp": StdioServerParameters(command=sys.executable, args=["-m", "hf_train_mcp", "serve"]),
        }
        results: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(RUNS):  # interleaved so that machine noise hits both alike
            for name, params in servers.items():
                results[name].append(await once(params))
    for name, times in results.items():
        print(f"{name:15s} median {statistics.median(times) * 1000:7.1f} ms  min {min(times) * 1000:7.1f} ms")
    # each pair ran back to back, so its difference is the least disturbed by what else the machine is doing
    pairs = [ours - bare for ours, bare in zip(results["hf-train-mcp"], results["bare MCPServer"])]
    delta = statistics.median(pairs)
    print(f"difference      median of {RUNS} paired runs {delta * 1000:7.1f} ms, of the minima "
          f"{(min(results['hf-train-mcp']) - min(results['bare MCPServer'])) * 1000:.1f} ms (target: under 100 ms)")


if __name__ == "__main__":
    anyio.run(main)
