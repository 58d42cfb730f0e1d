"""An independent reference for every recipe: eager attention with ``output_attentions`` and
``output_hidden_states``, value vectors read off the projection modules, queries/keys recorded from
the model family's own eager attention function, and pooling done row by row in float64.

It shares nothing with valuelens's capture code; only the tokenization (prompt spans) is reused.
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import torch

from valuelens import Encoder


def _value_from_projection(arch: str, attention, hidden_states, n_kv: int, head_dim: int) -> torch.Tensor:
    """Value vectors ``[B, N, Hkv, D]`` computed from the layer's projection weights."""
    b, n, _ = hidden_states.shape
    if arch == "bloom" or (
        arch == "falcon"
        and not attention.config.multi_query
        and not attention.config.new_decoder_architecture
    ):
        v = attention.query_key_value(hidden_states).view(b, n, -1, 3, head_dim)[..., 2, :]
    elif arch == "falcon" and attention.config.new_decoder_architecture:
        group = attention.num_heads // n_kv
        v = attention.query_key_value(hidden_states).view(b, n, n_kv, group + 2, head_dim)[..., -1, :]
    elif arch == "falcon":
        v = attention.query_key_value(hidden_states).view(b, n, -1, head_dim)[..., -1:, :]
    elif arch == "phi3":
        qkv = attention.qkv_proj(hidden_states)
        q_size = attention.config.num_attention_heads * head_dim
        v = qkv[..., q_size + n_kv * head_dim :]
    elif arch == "gpt2":
        v = attention.c_attn(hidden_states).split(attention.embed_dim, dim=2)[2]
    elif arch == "gpt_neox":
        qkv = attention.query_key_value(hidden_states).view(b, n, -1, 3 * head_dim)
        v = qkv.chunk(3, dim=-1)[2].reshape(b, n, -1)
    else:
        v = attention.v_proj(hidden_states)
    return v.reshape(b, n, n_kv, head_dim)


def reference_embeddings(
    model,
    tokenizer,
    texts,
    recipe,
    layers,
    prompt=None,
    padding_side="right",
    final_norm=False,
    drop_prefix=False,
):
    """Embeddings ``[n, dim]`` (float64 numpy) computed the slow, obvious way.

    ``drop_prefix``: the last token's attention probabilities are zeroed before the pooled span (the
    last token itself kept) and renormalized, head by head."""
    arch = model.config.model_type
    probe = Encoder(model, tokenizer, recipe=recipe, layers=layers, prompt=prompt)
    parts, rec = probe.parts, probe.recipe
    items, _ = probe.reader.tokenize(texts)
    width = max(len(it.ids) for it in items)
    ids = torch.full((len(items), width), 0, dtype=torch.long)
    mask = torch.zeros_like(ids)
    spans = []
    for r, it in enumerate(items):
        off = width - len(it.ids) if padding_side == "left" else 0
        ids[r, off : off + len(it.ids)] = torch.tensor(it.ids)
        mask[r, off : off + len(it.ids)] = 1
        spans.append((off + it.span[0], off + it.span[1], off + len(it.ids) - 1))
    positions = (mask.cumsum(1) - 1).clamp_min(0)

    ref = copy.deepcopy(model)
    if ref.base_model._can_set_attn_implementation():
        # (families that bypass the attention interface keep their own implementation: switching their
        # config alone would hand them a mask of the wrong format)
        ref.set_attn_implementation("eager")
    base = ref.base_model
    rparts = Encoder(ref, tokenizer, recipe=recipe, layers=layers).parts
    values, queries, keys, mlp_in, layer_out = {}, {}, {}, {}, {}
    handles = []
    for i, attn in enumerate(rparts.attentions):

        def pre(mod, args, kwargs, i=i, attn=attn):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            values[i] = _value_from_projection(arch, attn, hs, parts.n_kv_heads, parts.head_dim).detach()

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        if rparts.mlp_downs[i] is not None:
            handles.append(
                rparts.mlp_downs[i].register_forward_pre_hook(
                    lambda m, a, i=i: mlp_in.__setitem__(i, a[0].detach())
                )
            )
        handles.append(
            rparts.layers[i].register_forward_hook(
                lambda m, a, o, i=i: layer_out.__setitem__(i, (o[0] if isinstance(o, tuple) else o).detach())
            )
        )
    modeling = sys.modules[type(rparts.attentions[0]).__module__]
    original = getattr(modeling, "eager_attention_forward", None)
    layer_of = {id(a): i for i, a in enumerate(rparts.attentions)}

    def recording(module, query, key, value, *args, **kwargs):
        queries[layer_of[id(module)]] = query.detach()
        keys[layer_of[id(module)]] = key.detach()
        return original(module, query, key, value, *args, **kwargs)

    if original is not None:
        modeling.eager_attention_forward = recording
    try:
        # attention probabilities only where a recipe needs them: Falcon's output_attentions path
        # (transformers 5.24) computes different hidden states
        with torch.no_grad():
            out = base(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                output_attentions=rec.name in ("wva-lt", "wva", "aligned-wva"),
                output_hidden_states=True,
                use_cache=False,
            )
    finally:
        if original is not None:
            modeling.eager_attention_forward = original
        for h in handles:
            h.remove()

    n_layers = parts.n_layers
    group = parts.group_size
    rows = []
    for b, (s, e, last) in enumerate(spans):
        per_layer = []
        for i in probe.layers:
            if rec.signal == "hidden":
                h = out.hidden_states[i + 1][b] if i < n_layers - 1 else layer_out[i][b]
                if final_norm:
                    h = rparts.final_norm(layer_out[i][b : b + 1])[0]
                tokens = h.double().numpy()
            elif rec.signal == "value":
                tokens = values[i][b].reshape(values[i].shape[1], -1).double().numpy()
            elif rec.signal in ("query", "key"):
                t = (queries if rec.signal == "query" else keys)[i][b]  # [H, N, D]
                tokens = t.permute(1, 0, 2).reshape(t.shape[1], -1).double().numpy()
            elif rec.signal == "mlp":
                tokens = mlp_in[i].reshape(ids.shape[0], ids.shape[1], -1)[b].double().numpy()
            else:
                tokens = None
            if rec.name in ("va", "hs", "query", "key", "activation", "aligned-va"):
                vec = tokens[s:e].mean(0)
                if rec.name == "aligned-va":
                    v = torch.tensor(vec).view(parts.n_kv_heads, parts.head_dim)
                    z = v.repeat_interleave(group, dim=0).reshape(1, -1)
                    vec = rparts.out_projs[i](z.float())[0].double().detach().numpy()
            elif rec.name == "last-token":
                vec = tokens[last]
            elif rec.name == "wmp":
                w = np.arange(1, e - s + 1, dtype=np.float64)
                vec = (tokens[s:e] * w[:, None]).sum(0) / w.sum()
            else:
                att = out.attentions[i][b, :, last, :].double().numpy()  # [H, N]
                if drop_prefix:
                    keep = np.arange(att.shape[1]) >= s
                    keep[last] = True
                    att = np.where(keep, att, 0.0)
                    att = att / att.sum(axis=1, keepdims=True)
                v = values[i][b].double().numpy()  # [N, Hkv, D]
                if rec.name == "wva-lt":
                    p = att.reshape(parts.n_kv_heads, group, -1).mean(1)  # [Hkv, N]
                    vec = np.einsum("kn,nkd->kd", p, v).reshape(-1)
                else:
                    z = np.stack([att[h] @ v[:, h // group, :] for h in range(parts.n_heads)]).reshape(1, -1)
                    if rec.name == "wva":
                        vec = z[0]
                    else:
                        vec = (
                            rparts.out_projs[i](torch.tensor(z, dtype=torch.float32))[0]
                            .double()
                            .detach()
                            .numpy()
                        )
            per_layer.append(vec)
        rows.append(np.mean(per_layer, axis=0))
    return np.stack(rows)
