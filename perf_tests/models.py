"""The seed article's MiniLLM, sized by a config so the same code runs on a laptop CPU and an H200."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class MiniLLMConfig:
    """Model and batch sizes; :data:`SEED_CONFIG` is the article's, :data:`CPU_CONFIG` fits CI."""

    vocab: int = 32000
    dim: int = 2048
    heads: int = 16
    layers: int = 12
    batch: int = 8
    seq: int = 1024

    @property
    def tokens_per_step(self) -> int:
        """Tokens processed by one training step."""
        return self.batch * self.seq


SEED_CONFIG = MiniLLMConfig()
GPU_TEST_CONFIG = MiniLLMConfig(layers=4, batch=8, seq=1024)
CPU_CONFIG = MiniLLMConfig(vocab=1024, dim=128, heads=4, layers=2, batch=4, seq=64)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation, as in the seed."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """Pre-norm transformer block: RMSNorm + MultiheadAttention, RMSNorm + SiLU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        attn_out, _ = self.attn(h, h, h, need_weights=False)
        x = x + attn_out
        return x + self.mlp(self.norm2(x))


class MiniLLM(nn.Module):
    """Embedding, ``layers`` blocks, final norm and LM head (the seed's model)."""

    def __init__(self, cfg: MiniLLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_batch(cfg: MiniLLMConfig, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets (never zeros)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tokens = torch.randint(1, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=gen)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def train_step_fn(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor):
    """A closure running one forward, backward and optimizer step; returns the loss tensor."""

    def step() -> torch.Tensor:
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def fully_shard_minillm(model: MiniLLM, mesh: object, param_dtype: torch.dtype | None = None) -> MiniLLM:
    """FSDP2 as in the seed: ``fully_shard`` every block, then the root, on ``mesh``.

    With ``param_dtype`` (bf16 on CUDA) parameters are all-gathered in that dtype and
    gradients reduced in fp32 (``MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32)``).
    """
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, object] = {"mesh": mesh}
    if param_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model
