"""A backend's hardware catalog: the flavors its jobs may run on, each with its GPUs, price and machine, and the
datasheet facts of the GPUs they carry. Each backend brings its own (Backend.catalog); the estimator reads it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFacts:
    """What a hardware list (the Jobs API's, say) does not say about a GPU model."""

    model: str
    memory_gb: float  # per GPU
    bf16: bool
    peak_tflops: float  # dense bf16 (fp16 on T4) tensor-core peak
    bandwidth_tbps: float
    link_gbps: float  # GPU-to-GPU bandwidth of an all-reduce inside one machine (NVLink, else PCIe)
    fp32_tflops: float  # plain fp32 (no tensor cores, no TF32): training without mixed precision
    source: str
    nvlink: bool = False  # the flavor's GPUs share NVLink (SXM parts); else PCIe through the host

    @property
    def ridge(self) -> float:
        """FLOPs per byte of memory traffic at which this GPU's matmuls stop waiting on memory (roofline)."""
        return self.peak_tflops / self.bandwidth_tbps


# NVIDIA datasheets (dense, i.e. without 2:4 sparsity). A10G: AWS G5 documentation and the commonly cited
# 70 TFLOPS dense bf16 (it is a power-capped A10). T4 has no bf16: its peak is fp16. Links: NVLink where the
# flavor's GPUs are SXM parts (A100, H100, H200), else PCIe 4/5 shared through the host (~10-25 GB/s achieved).
GPU_FACTS: dict[str, GpuFacts] = {
    g.model: g
    for g in (
        GpuFacts("T4", 16, False, 65, 0.32, 8, 8.1, "NVIDIA T4 datasheet (fp16 tensor, no bf16)"),
        GpuFacts("L4", 24, True, 121, 0.30, 12, 30, "NVIDIA L4 datasheet"),
        GpuFacts("A10G", 24, True, 70, 0.60, 12, 31, "AWS EC2 G5 docs; NVIDIA A10 datasheet scaled to A10G clocks"),
        GpuFacts("L40S", 48, True, 362, 0.864, 20, 91, "NVIDIA L40S datasheet"),
        GpuFacts("A100", 80, True, 312, 2.04, 200, 19.5, "NVIDIA A100 80GB SXM datasheet", nvlink=True),
        GpuFacts("H100", 80, True, 989, 3.35, 300, 67, "NVIDIA H100 SXM datasheet (not a Jobs flavor: calibration)",
                 nvlink=True),
        GpuFacts("H200", 141, True, 989, 4.8, 300, 67, "NVIDIA H200 SXM datasheet", nvlink=True),
        GpuFacts("RTX PRO 6000", 96, True, 500, 1.79, 25, 120, "NVIDIA RTX PRO 6000 Blackwell Server datasheet"),
    )
}


@dataclass(frozen=True)
class FlavorInfo:
    name: str
    gpu: GpuFacts | None
    gpus: int
    usd_per_hour: float
    ram_gb: float | None = None  # the machine's memory (a merge holds the whole model there)
    vcpus: int | None = None
    disk_gb: float | None = None  # ephemeral storage, when the live list says

    @property
    def gpu_memory_gb(self) -> float:
        return self.gpu.memory_gb if self.gpu else 0.0


@dataclass(frozen=True)
class Catalog:
    flavors: dict[str, FlavorInfo]
    source: str  # "live" or "built-in"
    note: str | None = None  # why the built-in table is used, for the caller's warnings
