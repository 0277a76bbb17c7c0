"""A ready check for runs across nodes (what only a GPU cluster can prove): NCCL all-reduce between the machines
of one Jobs network group, with the bandwidth the estimator assumes (estimate/constants.py internode_gbps).

On each of N nodes (rank R), started the way submit_training(nodes=N) starts its script:
    accelerate launch --num_machines N --machine_rank R --num_processes $((N*GPUS)) \
        --main_process_ip ${HF_NETWORK_GROUP_PREFIX}node0 --main_process_port 29500 benchmarks/nccl.py
(or benchmarks/gpu.py --nccl, the same check)
(e.g. as run_script jobs in one network group). Rank 0 prints the measured bus bandwidth in GB/s.
"""

import os
import time


def main(size_mb: int = 512, rounds: int = 10) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    tensor = torch.ones(size_mb * 1024 * 1024 // 4, device="cuda")
    dist.all_reduce(tensor)  # warm-up: NCCL builds its rings here
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(rounds):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / rounds
    bus_gb = tensor.numel() * 4 * 2 * (world - 1) / world / seconds / 1e9  # ring all-reduce traffic per GPU
    assert torch.allclose(tensor[:8], torch.full((8,), float(world) ** (rounds + 1), device="cuda"))
    if rank == 0:
        print(f"NCCL all-reduce across {world} GPUs: {bus_gb:.1f} GB/s bus bandwidth ({size_mb} MB, {seconds * 1e3:.1f} ms)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
