"""A Llama as Hugging Face's LlamaForCausalLM computes it (RMSNorm, rotate-half RoPE, grouped-query attention,
SwiGLU, tied embeddings, no biases), written out so the exported weights mean the same thing to our importer.
Shapes are noted next to each tensor: B batch, T tokens, D hidden, H heads, K kv heads, E head dim, F MLP."""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Shape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (D)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(shape: Shape, length: int):
    """cos, sin: (T, E), HF's layout: the E/2 frequencies twice over (rotate-half pairs i and i + E/2)."""
    e = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, e, 2, dtype=torch.float32) / e))
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        e = s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * e, bias=False)  # (H*E, D)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * e, bias=False)  # (K*E, D)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * e, bias=False)  # (K*E, D)
        self.o_proj = nn.Linear(s.num_attention_heads * e, s.hidden_size, bias=False)  # (D, H*E)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        s, e = self.s, self.s.head_dim
        q = self.q_proj(x).view(b, t, s.num_attention_heads, e).transpose(1, 2)  # (B, H, T, E)
        k = self.k_proj(x).view(b, t, s.num_key_value_heads, e).transpose(1, 2)  # (B, K, T, E)
        v = self.v_proj(x).view(b, t, s.num_key_value_heads, e).transpose(1, 2)  # (B, K, T, E)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Query head h reads kv head h // (H / K), as HF's repeat_kv arranges them.
        rep = s.num_attention_heads // s.num_key_value_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q * (1.0 / math.sqrt(e))) @ k.transpose(-2, -1) + mask  # (B, H, T, T)
        out = F.softmax(scores, dim=-1) @ v  # (B, H, T, E)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)  # (F, D)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)  # (F, D)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)  # (D, F)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = Mlp(s)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)  # (V, D), also the output projection
        self.layers = nn.ModuleList([Layer(s) for _ in range(s.num_hidden_layers)])
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.apply(self._init)
        # GPT-2's scaling: residual writes shrink with depth so the stream's variance stays put.
        for name, p in self.named_parameters():
            if name.endswith('o_proj.weight') or name.endswith('down_proj.weight'):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * s.num_hidden_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        """ids: (B, T) -> logits (B, T, V)."""
        t = ids.shape[1]
        cos, sin = rope_tables(self.s, t)
        mask = torch.full((t, t), float('-inf')).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x) @ self.embed_tokens.weight.T

    def hf_state(self):
        """Tensors under Hugging Face's names (model.*), tied output projection not repeated."""
        return {f'model.{k}': v for k, v in self.state_dict().items()}
