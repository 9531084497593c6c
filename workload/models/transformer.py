"""A decoder-only transformer's shape, its well-known presets, and the formulas of its
parameter counts and floating-point operations (used by the ``llm`` model).

Notation (also in docs/llm.md): L layers, h hidden size, a attention heads, a_kv
key/value heads (grouped-query attention; a_kv = a is plain multi-head attention),
h_kv = a_kv h / a, f FFN size, s sequence length (tokens), V vocabulary, E experts
(0: a dense MLP), k experts per token, n_mat = 3 for a gated (SwiGLU) MLP, else 2;
b sequences per micro-batch.

Parameters are the matrices' weights (biases and norms, under 0.1% of any preset, are
left out):

- attention, per layer: ``2 h^2 + 2 h h_kv`` (Q and output projections, K and V);
- MLP, per layer: ``n_mat h f``; with experts ``E n_mat h f`` plus the router ``h E``;
- embedding ``V h``, plus an output layer ``V h`` unless the two are tied.

Forward FLOPs of one micro-batch (a multiply-add is 2 FLOPs; the attention scores are
counted over the full s x s square, as Megatron-LM's analysis does):

- attention, per layer: ``2 b s (2 h^2 + 2 h h_kv) + 4 b s^2 h``;
- MLP, per layer: ``2 b s n_mat h f``; with experts ``2 b s k n_mat h f + 2 b s h E``;
- output layer (logits): ``2 b s h V``.

A backward pass costs twice its forward (the gradients of the inputs and of the
weights), plus one forward more when activations are recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class TransformerShape:
    """The dimensions of a decoder-only transformer (see the module docstring)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    seq: int
    vocab: int
    experts: int = 0  # 0: a dense MLP
    top_k: int = 0  # experts per token (MoE only)
    gated: bool = True  # SwiGLU: three MLP matrices instead of two
    tied_embeddings: bool = False  # the output layer reuses the embedding matrix

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def kv_hidden(self) -> int:
        """h_kv: the width of the K and V projections."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated else 2

    # -- parameters (weights) ------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Weights of one layer's attention: 2 h^2 + 2 h h_kv."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_hidden

    @property
    def expert_params(self) -> int:
        """Weights of one expert (or of the dense MLP): n_mat h f."""
        return self.mlp_matrices * self.hidden * self.ffn

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def mlp_params(self) -> int:
        """Weights of one layer's MLP: all experts and the router, or the dense MLP."""
        if self.moe:
            return self.experts * self.expert_params + self.router_params
        return self.expert_params

    @property
    def layer_params(self) -> int:
        return self.attention_params + self.mlp_params

    @property
    def embedding_params(self) -> int:
        """V h: the embedding matrix (and, untied, the output layer's as many)."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        heads = 1 if self.tied_embeddings else 2
        return self.layers * self.layer_params + heads * self.embedding_params

    # -- forward FLOPs of one micro-batch of ``batch`` sequences ---------------------------
    def attention_flops(self, batch: int) -> int:
        """2 b s (2 h^2 + 2 h h_kv) + 4 b s^2 h."""
        b, s, h = batch, self.seq, self.hidden
        return 2 * b * s * self.attention_params + 4 * b * s * s * h

    def mlp_flops(self, batch: int) -> int:
        """2 b s n_mat h f, or with experts 2 b s k n_mat h f + 2 b s h E."""
        tokens = batch * self.seq
        if self.moe:
            return 2 * tokens * (self.top_k * self.expert_params + self.router_params)
        return 2 * tokens * self.expert_params

    def logits_flops(self, batch: int) -> int:
        """2 b s h V."""
        return 2 * batch * self.seq * self.hidden * self.vocab

    def with_overrides(self, **values: int) -> TransformerShape:
        """A copy with the given dimensions (those that are 0 or absent keep the preset's)."""
        names = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in values.items() if k in names and v})


# Published configurations (the models' papers and model cards). Vocabularies as
# released (GPT-3's is GPT-2's tokenizer, 50257).
PRESETS: dict[str, TransformerShape] = {
    # Brown et al. 2020, table 2.1: 96 layers, d_model 12288, 96 heads, d_ff = 4 d_model,
    # context 2048; GELU MLP, tied input and output embeddings.
    "gpt3-175b": TransformerShape(
        96, 12288, 96, 96, 49152, 2048, 50257, gated=False, tied_embeddings=True
    ),
    # Touvron et al. 2023 (Llama 2) and its config.json: GQA with 8 KV heads, context 4096.
    "llama-2-70b": TransformerShape(80, 8192, 64, 8, 28672, 4096, 32000),
    # Llama 3 8B config.json: GQA with 8 KV heads, context 8192, 128256-token vocabulary.
    "llama-3-8b": TransformerShape(32, 4096, 32, 8, 14336, 8192, 128256),
    # Llama 3 70B config.json.
    "llama-3-70b": TransformerShape(80, 8192, 64, 8, 28672, 8192, 128256),
    # Mixtral 8x7B config.json: 8 experts, 2 per token; trained here at context 4096.
    "mixtral-8x7b": TransformerShape(32, 4096, 32, 8, 14336, 4096, 32000, experts=8, top_k=2),
}
