"""Context parallelism on the CPU: each process holds a slice of the sequence, attention sees all of it.

Run (2 processes talking over gloo on this machine; any number that splits the sequence works)::

    torchrun --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29517 examples/context_parallel.py

Every rank holds torch's head-tail shard of the sequence (rank r: chunks r and 2W-1-r of 2W),
uses global positions for the encoding and for causality, and gets exactly its rows of the
single-process attention. docs/packing.md runs it.
"""

import torch
import torch.distributed as dist

import posenc
from posenc.distributed import context_parallel_attention, shard_batch, unshard

dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank = dist.get_rank()

torch.manual_seed(0)  # every rank makes the same whole batch, then keeps its own tokens
b, h, t, dh = 2, 4, 64, 16
q, k, v = (torch.randn(b, h, t, dh) for _ in range(3))

for spec in ("rope", "alibi", "t5", "none"):
    encoding = posenc.build(spec, head_dim=dh, num_heads=h, causal=True)
    # This rank's queries, keys and values (dim 2 is the sequence) and their global positions.
    (q_r, k_r, v_r), positions = shard_batch([q, k, v], seq_dims=2)
    out = context_parallel_attention(q_r, k_r, v_r, encoding, positions=positions, causal=True)
    whole = unshard(out, seq_dim=2)  # every rank's rows, back in sequence order
    error = (whole - posenc.attention(q, k, v, encoding, causal=True)).abs().max().item()
    if rank == 0:
        print(
            f"{spec}: rank 0 holds positions {positions[:3].tolist()}..{positions[-3:].tolist()}, "
            f"max difference from one process {error:.1e}"
        )
    assert error < 1e-5

dist.destroy_process_group()
