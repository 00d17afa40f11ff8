"""Memory classes that a torch upgrade must not silently break (each case in a process of its own).

A path that falls back to a dense ``(t, t)`` mask still gives the right numbers, so only the
peak memory can tell: at ``t = 8192`` one ``(h, t, t)`` float32 tensor is 1 GiB, and each case
must stay under an eighth of it above what bias-free causal SDPA needs on the same inputs.

Each case runs in a child forked from one interpreter that imported torch and posenc once (a fresh
interpreter per case spent 3 of its 5 seconds importing); the child restarts its peak after its warm-up
(Linux's ``clear_refs``), so that only the case grows it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import posenc

T, HEADS, HEAD_DIM = 8192, 4, 16
DENSE_BYTES = HEADS * T * T * 4

#: Runs each case of ``argv[1]`` (a JSON list of argument lists) in a child forked from this process
#: by ``run(*case)`` (defined by the test), one JSON line per case: its result, or its error.
RUNNER = """
import json, os, resource, sys, traceback
import torch
import posenc


def peak():  # the peak resident size since the last reset_peak() (Linux: VmHWM)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def reset_peak():  # a forked child starts at its parent's peak: start it again from now, where allowed
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass  # (then the parent's import peak hides up to a few MiB of growth: far below the bounds)


{run}

for case in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:  # the child: one case
        code = 1
        try:
            print(json.dumps(run(*case)), flush=True)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status:
        print(json.dumps({"error": f"exit status {status}"}), flush=True)
"""

ATTENTION = textwrap.dedent(
    """
    def run(spec, causal, padded, amp, t, h, dh):
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, h, t, dh) for _ in range(3))
        encoding = posenc.build(spec, num_heads=h, head_dim=dh, causal=causal)
        mask = None
        if padded:  # a left-padded row: its first 100 keys are padding
            keep = torch.ones(1, t, dtype=torch.bool)
            keep[:, :100] = False
            mask = keep[:, None, None, :]
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            # What attention itself needs: bias-free causal SDPA, twice (allocator warm).
            for _ in range(2):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            reset_peak()
            before = peak()
            out = posenc.attention(q, k, v, encoding, causal=causal, attn_mask=mask)
            after = peak()
        return {"growth": after - before, "finite": bool(out[..., 200:, :].isfinite().all())}
    """
)


def _run_cases(run: str, cases: list[list]) -> list[dict]:
    """The results of ``run`` (source defining ``run(*case)``) on each case, each in a forked child."""
    script = RUNNER.replace("{run}", run)
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert len(results) == len(cases) and not any("error" in r for r in results), (
        results,
        done.stderr[-3000:],
    )
    return results


#: (spec, causal, padded, autocast): the most common real case is a left-padded causal batch (rope);
#: autocast once copied the Toeplitz view whole (bfloat16, inside SDPA)
CASES = [
    ("alibi", True, False, False),
    ("alibi", False, False, False),
    ("t5", True, False, False),
    ("t5", False, False, False),
    ("rope", True, True, False),
    ("alibi", True, True, False),
    ("alibi", False, False, True),
    ("t5", False, False, True),
]


def test_attention_never_builds_a_dense_mask():
    results = _run_cases(ATTENTION, [[*case, T, HEADS, HEAD_DIM] for case in CASES])
    grew = []
    for (spec, causal, padded, amp), result in zip(CASES, results, strict=True):
        assert result["finite"], (spec, causal, padded, amp)
        if result["growth"] >= DENSE_BYTES / 8:
            grew.append(
                f"{spec} causal={causal} padded={padded} autocast={amp}: {result['growth'] / 2**20:.0f} MiB"
            )
    assert not grew, (
        f"peak memory grew (a dense (h, t, t) float32 tensor is {DENSE_BYTES / 2**20:.0f} MiB): {grew}"
    )


PACKED_T = 16_384
PACKED_DENSE_BYTES = HEADS * PACKED_T * PACKED_T * 4

PACKED = textwrap.dedent(
    """
    def run(spec, t, h, dh):
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
        with torch.no_grad():
            # Warm up (kernels, allocator) on a short prefix; a full-length dense call would cost seconds.
            small = slice(0, 1024)
            for _ in range(2):
                posenc.attention(q[:, :, small], k[:, :, small], v[:, :, small], encoding, causal=True,
                                 document_ids=document_ids[small])
            reset_peak()
            before = peak()
            out = posenc.attention(q, k, v, encoding, causal=True, document_ids=document_ids)
            after = peak()
        # Spot check: the last document's first rows equal that document alone.
        part = slice(15000, 15100)
        alone = posenc.attention(q[:, :, part], k[:, :, part], v[:, :, part], encoding, causal=True)
        close = bool(torch.allclose(out[:, :, part], alone, atol=1e-5, rtol=1e-5))
        return {"growth": after - before, "close": close}
    """
)
SPECS = ["rope", "alibi", "t5"]


def test_packed_documents_never_build_a_dense_mask():
    """8 documents in 16,384 tokens: peak growth well under a tenth of one (h, t, t) float32 tensor."""
    results = _run_cases(PACKED, [[spec, PACKED_T, HEADS, HEAD_DIM] for spec in SPECS])
    assert all(r["close"] for r in results), results
    grew = [
        f"{spec}: {r['growth'] / 2**20:.0f} MiB"
        for spec, r in zip(SPECS, results, strict=True)
        if r["growth"] >= PACKED_DENSE_BYTES / 10
    ]
    assert not grew, (
        f"packed: peak memory grew (a dense (h, t, t) float32 tensor is {PACKED_DENSE_BYTES / 2**20:.0f} MiB): {grew}"
    )


@pytest.mark.parametrize("spec, dropout_p", [("t5", 0.0), ("kerple", 0.0), ("alibi", 0.1), ("t5", 0.1)])
def test_a_training_step_keeps_no_more_weights_for_the_backward_than_the_budget(monkeypatch, spec, dropout_p):
    """With gradients, what a causal call keeps for the backward stays within the bias budget. On the CPU SDPA's
    flash kernel takes no learned bias and no dropout, and its math kernel keeps each query chunk's weights (at
    t = 1024: 12.9 MiB for T5 and KERPLE, 36.9 MiB for ALiBi with dropout, of a 16 MiB (h, t, t) float32
    tensor): within the budget they are kept (no recompute), past it the chunks are checkpointed (0.75-0.82 MiB
    kept). The backward gives the one dense call's gradients either way."""
    t, h, dh = 1024, 4, 16
    dense = h * t * t * 4
    q, k, v = (torch.randn(1, h, t, dh, requires_grad=True) for _ in range(3))
    encoding = posenc.build(spec, num_heads=h, head_dim=dh, causal=True)
    params = (q, k, v, *encoding.parameters())

    def step() -> tuple[int, tuple[torch.Tensor, ...]]:
        kept: dict[int, int] = {}

        def pack(saved: torch.Tensor) -> torch.Tensor:
            kept[saved.untyped_storage().data_ptr()] = saved.untyped_storage().nbytes()
            return saved

        torch.manual_seed(1)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
            out = posenc.attention(q, k, v, encoding, causal=True, dropout_p=dropout_p)
        return sum(kept.values()), torch.autograd.grad(out.square().sum(), params)

    kept_within, grads_within = step()  # the default CPU budget, 64 MiB, holds the dense weights
    assert kept_within > dense / 2
    monkeypatch.setitem(posenc.attend.BIAS_BUDGET_BYTES, "cpu", dense // 4)
    kept_past, grads_past = step()
    assert kept_past < dense / 16, f"{kept_past / 2**20:.1f} MiB kept for the backward"
    for got, want in zip(grads_past, grads_within, strict=True):  # (the same dropout masks: seeded alike)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if dropout_p == 0:  # the one dense call's
        dense_out = posenc.attention(q, k, v, encoding, causal=True, backend="sdpa")
        for got, want in zip(grads_past, torch.autograd.grad(dense_out.square().sum(), params), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
