"""Memory classes that a torch upgrade must not silently break (each case in a fresh process).

A path that falls back to a dense ``(t, t)`` mask still gives the right numbers, so only the
peak memory can tell: at ``t = 8192`` one ``(h, t, t)`` float32 tensor is 1 GiB, and each case
must stay under an eighth of it above what bias-free causal SDPA needs on the same inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

T, HEADS, HEAD_DIM = 8192, 4, 16
DENSE_BYTES = HEADS * T * T * 4

SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    import posenc

    spec, causal, padded = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    t, h, dh = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, t, dh) for _ in range(3))
    encoding = posenc.build(spec, num_heads=h, head_dim=dh, causal=causal)
    mask = None
    if padded:  # a left-padded row: its first 100 keys are padding
        keep = torch.ones(1, t, dtype=torch.bool)
        keep[:, :100] = False
        mask = keep[:, None, None, :]

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    with torch.no_grad():
        # What attention itself needs: bias-free causal SDPA, twice (allocator warm).
        for _ in range(2):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        before = peak()
        out = posenc.attention(q, k, v, encoding, causal=causal, attn_mask=mask)
        after = peak()
    print(json.dumps({"growth": after - before, "finite": bool(out[..., 200:, :].isfinite().all())}))
    """
)


def _growth(spec: str, causal: bool, padded: bool = False) -> dict:
    args = [spec, str(int(causal)), str(int(padded)), str(T), str(HEADS), str(HEAD_DIM)]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("spec", "causal", "padded"),
    [
        ("alibi", True, False),
        ("alibi", False, False),
        ("t5", True, False),
        ("t5", False, False),
        ("rope", True, True),  # the most common real case: a left-padded causal batch
        ("alibi", True, True),
    ],
)
def test_attention_never_builds_a_dense_mask(spec, causal, padded):
    result = _growth(spec, causal, padded)
    assert result["finite"]
    assert result["growth"] < DENSE_BYTES / 8, (
        f"{spec} causal={causal} padded={padded}: peak memory grew by {result['growth'] / 2**20:.0f} MiB, "
        f"a dense (h, t, t) float32 tensor is {DENSE_BYTES / 2**20:.0f} MiB"
    )


PACKED_T = 16_384
PACKED_DENSE_BYTES = HEADS * PACKED_T * PACKED_T * 4

PACKED_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    import posenc

    spec, t, h, dh = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    # Cap the address space 3 GiB above what the process maps now (a CUDA build of torch maps
    # gigabytes it never touches): a dense (h, t, t) float32 fallback fails instead of swapping.
    with open("/proc/self/status") as status:
        mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    limit = mapped + 3 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, t, dh) for _ in range(3))
    encoding = posenc.build(spec, num_heads=h, head_dim=dh, causal=True)
    # 8 documents of uneven lengths.
    cuts = torch.tensor([0, 1000, 3000, 3500, 7000, 9000, 12000, 15000, t])
    document_ids = torch.bucketize(torch.arange(t), cuts[1:-1], right=True)

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    with torch.no_grad():
        # Warm up (kernels, allocator) on a short prefix; a full-length dense call would cost seconds.
        small = slice(0, 1024)
        for _ in range(2):
            posenc.attention(q[:, :, small], k[:, :, small], v[:, :, small], encoding, causal=True,
                             document_ids=document_ids[small])
        before = peak()
        out = posenc.attention(q, k, v, encoding, causal=True, document_ids=document_ids)
        after = peak()
    # Spot check: the last document's first rows equal that document alone.
    part = slice(15000, 15100)
    alone = posenc.attention(q[:, :, part], k[:, :, part], v[:, :, part], encoding, causal=True)
    close = bool(torch.allclose(out[:, :, part], alone, atol=1e-5, rtol=1e-5))
    print(json.dumps({"growth": after - before, "close": close}))
    """
)


@pytest.mark.parametrize("spec", ["rope", "alibi", "t5"])
def test_packed_documents_never_build_a_dense_mask(spec):
    """8 documents in 16,384 tokens: peak growth well under a tenth of one (h, t, t) float32 tensor."""
    args = [spec, str(PACKED_T), str(HEADS), str(HEAD_DIM)]
    done = subprocess.run(
        [sys.executable, "-c", PACKED_SCRIPT, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["close"]
    assert result["growth"] < PACKED_DENSE_BYTES / 10, (
        f"{spec} packed: peak memory grew by {result['growth'] / 2**20:.0f} MiB, "
        f"a dense (h, t, t) float32 tensor is {PACKED_DENSE_BYTES / 2**20:.0f} MiB"
    )
