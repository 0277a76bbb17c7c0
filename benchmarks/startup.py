"""Time to answer initialize + tools/list over stdio: hf-train-mcp vs a bare MCPServer with no tools.

Both are started the same way (a fresh `python` process, stdio transport) and driven by the SDK client; the
difference is what our package adds on top of the SDK's own import cost. The server is this checkout's package
(the one this interpreter imports), with its bytecode cached as an installed package has it: one warm-up pair
first, not counted. Run: python benchmarks/startup.py [RUNS]
"""

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

import hf_train_mcp

BARE = "from mcp.server import MCPServer\nMCPServer('bare').run()\n"
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
TARGET_MS = 50


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def once(params: StdioServerParameters) -> tuple[float, float]:
    """Wall seconds to the tool list, and the CPU seconds of the server's whole life (reaped when the client
    closes): the CPU figure is what a busy machine disturbs least."""
    cpu, started = children_cpu_s(), time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        took = time.perf_counter() - started
    return took, children_cpu_s() - cpu


def spread(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    return f"min {ms[0]:6.0f}  median {statistics.median(ms):6.0f}  max {ms[-1]:6.0f} ms"


def report(label: str, results: dict[str, list[float]]) -> None:
    print(label)
    for name, times in results.items():
        print(f"  {name:15s} {spread(times)}")
    # each pair ran back to back, so its difference is the least disturbed by what else the machine is doing
    pairs = [ours - bare for ours, bare in zip(results["hf-train-mcp"], results["bare MCPServer"])]
    minima = min(results["hf-train-mcp"]) - min(results["bare MCPServer"])
    print(f"  {'difference':15s} {spread(pairs)} (pair by pair); of the minima {minima * 1000:.0f} ms "
          f"(target: at most {TARGET_MS} ms)")


async def main() -> None:
    # the stdio client passes on only a few variables (HOME, PATH, ...): name the package this checkout holds
    env = {"PYTHONPATH": str(Path(hf_train_mcp.__file__).parents[1])}
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        servers = {
            "bare MCPServer": StdioServerParameters(command=sys.executable, args=[str(bare)], env=env),
            "hf-train-mcp": StdioServerParameters(command=sys.executable, args=["-m", "hf_train_mcp", "serve"],
                                                  env=env),
        }
        wall: dict[str, list[float]] = {name: [] for name in servers}
        cpu: dict[str, list[float]] = {name: [] for name in servers}
        for run in range(RUNS + 1):  # interleaved so that machine noise hits both alike; the first warms caches
            for name, params in servers.items():
                took, used = await once(params)
                if run:
                    wall[name].append(took)
                    cpu[name].append(used)
    print(f"{RUNS} runs each, {os.cpu_count()} CPUs, package {Path(hf_train_mcp.__file__).parent}")
    report("initialize + tools/list, wall time:", wall)
    report("CPU time of the server process:", cpu)


if __name__ == "__main__":
    anyio.run(main)
