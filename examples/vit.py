"""A small vision transformer whose position encoding is one config string, run at two resolutions.

Run: ``python examples/vit.py`` (or ``--position "rope_axial(freqs='pixel')"``). The same model code serves

* ``"rope_axial"``: 2D RoPE inside every attention layer, the class token unrotated;
  another resolution gets the coordinates of its own grid;
* ``"learned2d(grid_size=(8, 8))"``: a learned table added to the patches, resampled (bicubic) for another grid;
* ``"sinusoidal2d"``: MAE's fixed 2D sin/cos table, computed for any grid.

The model asks one thing of the encoding: whether it is axial RoPE (then it hands the grid's
coordinates to ``prepare``); everything else goes through the hooks.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import posenc

PATCH, D_MODEL, HEADS, LAYERS, CLASSES = 4, 64, 4, 2, 10


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv, self.out = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 2 * D_MODEL), nn.GELU(), nn.Linear(2 * D_MODEL, D_MODEL))

    def forward(self, x: torch.Tensor, state: posenc.state.PositionState) -> torch.Tensor:
        b, t, _ = x.shape
        # (b, t, 3d) -> 3 x (b, h, t, dh)
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        y = posenc.attention(q, k, v, state)  # bidirectional; the state rotates q and k if it should
        x = x + self.out(y.transpose(1, 2).reshape(b, t, D_MODEL))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Patchify, add a class token, encode positions per ``position``, classify from the class token."""

    def __init__(self, position: str) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, D_MODEL, PATCH, stride=PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, D_MODEL))
        # every encoding takes what it needs from these sizes
        self.pe = posenc.build(position, d_model=D_MODEL, head_dim=D_MODEL // HEADS, num_heads=HEADS)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D_MODEL, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.patchify(images).permute(0, 2, 3, 1)  # (b, h, w, d)
        h, w = patches.shape[1:3]
        patches = self.pe.encode_input(patches)  # additive tables act here (any grid); RoPE passes through
        x = torch.cat((self.cls.expand(len(images), 1, D_MODEL), patches.flatten(1, 2)), 1)  # (b, 1 + hw, d)
        coords = None
        if isinstance(
            self.pe, posenc.AxialRoPE
        ):  # this grid's coordinates; the class token's are 0: no rotation
            coords = self.pe.grid_positions((h, w), num_prefix_tokens=1, device=x.device)
        state = self.pe.prepare(x.shape[1], q_positions=coords, batch=len(images), device=x.device)  # once
        for block in self.blocks:
            x = block(x, state)
        return self.head(x[:, 0])


def main(argv: list[str] | None = None) -> dict[str, tuple[int, ...]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--position", action="append", help="encoding spec(s); default: all three")
    args = parser.parse_args(argv)
    # the learned table has a size: the training grid (32x32 images of 4x4 patches)
    specs = args.position or ["rope_axial", "learned2d(grid_size=(8, 8))", "sinusoidal2d"]
    torch.manual_seed(0)
    shapes = {}
    for spec in specs:
        model = ViT(spec)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        images, labels = torch.randn(8, 3, 32, 32), torch.randint(0, CLASSES, (8,))
        for _ in range(3):  # a few steps at 32x32 (an 8x8 grid) ...
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():  # ... then evaluated at 48x64 (a 12x16 grid)
            logits = model(torch.randn(2, 3, 48, 64))
        shapes[spec] = tuple(logits.shape)
        print(f"{spec:<14} loss {loss.item():.3f} | logits at 48x64: {tuple(logits.shape)}")
    return shapes


if __name__ == "__main__":
    main()
