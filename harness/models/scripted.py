"""The scripted tiny models: Llama checkpoints whose weights, not training, make greedy decoding follow fixed scripts.

One per parser family (harness.models.families: each family is data, built by the functions here with `fam=`); the
default, the hermes family, is described below. `harness model build DIR --model scripted-tiny` writes it (another
family: `--model scripted-qwen3-coder`, ...); manifests pin it as `model.source: scripted-tiny`. It exists
so that the engines' own tool-call and reasoning parsers run (the reference model's random weights never emit a tool
call): its chat template is Qwen-style ChatML with hermes tool calls and `<think>` blocks, the markers are single
vocabulary entries (vLLM's hermes and qwen3 parsers look them up by id), and greedy output is, token for token:

    call             one tool offered           <think>..</think>\\n\\n<tool_call>\\n{"name": "get_weather", "arguments": {..}}\\n</tool_call>
    parallel         two or more tools          the same, then a get_time call
    call_direct      one tool, thinking off     the tool call without the think block
    parallel_direct  two tools, thinking off    both calls without the think block
    think            no tools (the default)     <think>\\n...\\n</think>\\n\\nHello! How can I help?
    plain            enable_thinking false      Hello! How can I help?
    after_tool       last message a tool        The weather in Paris is 18 degrees Celsius.

How the weights do it (one layer; every matrix is written, nothing is random):
  The template ends the prompt with a selector token `<|script:NAME|>` followed by `<|im_start|>assistant\\n`. The
  residual stream holds blocks: a constant, the current token (one-hot, A), the previous token (B), the selector (S),
  the next-token vote (C). Attention has two kinds of heads. Previous-token heads: query and key come from the
  constant only and RoPE turns their score into sum_j cos((delta - 1) * theta_j), highest at delta = 1 (the margin
  over every other distance up to the context length is checked when the weights are made); their values copy A
  into B. The selector head: only selector tokens have a key (on RoPE's slowest pair, so position barely matters) and
  its value copies which selector it is into S. The MLP holds one SiLU unit per rule (selector, previous, current) ->
  next: its gate is positive only when all three match; its down projection votes for `next` in C, and the lm_head
  reads C. A weaker unit per token votes for a default successor and a small bias orders the rest, so text outside
  the scripts (a raw completion, a grammar-constrained answer) is printable and a constrained JSON value closes.

Scripts are written as vocabulary pieces (several tokens for the arguments, so they stream); `check_rules` refuses a
script set where one (selector, previous, current) would need two next tokens.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from harness.models.bytelevel import build_model_dir, bytes_to_unicode, dumps, safetensors_bytes, tokenizer_json

__all__ = [
    "SCRIPTED_MODEL_SPEC",
    "SCRIPTED_FILE_NAMES",
    "SCRIPTS",
    "SCRIPT_TEXT",
    "TOOL_CALLS",
    "REASONING",
    "ANSWERS",
    "CHAT_TEMPLATE",
    "MARKERS",
    "vocabulary",
    "scripted_weights",
    "scripted_files",
    "build_scripted_model",
    "check_rules",
    "check_family",
    "config",
    "vocab_strings",
    "token_kinds",
    "NEVER_MERGE",
    "greedy",
    "encode_script",
]

from harness.models.families import ANSWERS, HERMES, REASONING, SELECTOR, SELECTOR_TOKENS, SELECTORS, TOOL_CALLS, Family

# the hermes family's, by their old names (the default scripted model, `scripted-tiny`)
PAD, IM_START, IM_END = HERMES.specials
MARKERS = list(HERMES.markers)
SPECIALS = list(HERMES.specials)
SCRIPTS: dict[str, list[str]] = HERMES.scripts
SCRIPT_TEXT = {name: "".join(pieces) for name, pieces in SCRIPTS.items()}
CHAT_TEMPLATE = HERMES.template

SCRIPTED_MODEL_SPEC: dict = {
    "architecture": "LlamaForCausalLM",
    "num_hidden_layers": 1,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "dtype": "float32",
    # how strongly each part of the construction speaks (see the module docstring)
    "positional_pairs": 16,  # RoPE pairs of a previous-token head's score (the fastest ones)
    "positional_amplitude": 15.0,  # |q| = |k| per pair: margin 1.08 * 15 * 15 / 8 = 30 nats over any other distance
    "selector_score": 48.0,  # q.k / sqrt(d) of the selector head on the selector token (others: 0)
    "gate": 40.0,  # SiLU gate scale: an unmatched rule gives silu(-20), about -4e-8
    "rule_logit": 40.0,
    "default_logit": 8.0,
}
SCRIPTED_FILE_NAMES = ("config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                       "tokenizer.json", "tokenizer_config.json")  # fmt: skip


def _added(fam: Family) -> list[str]:
    """The added tokens, in vocabulary order: specials, markers, selectors."""
    return [*fam.specials, *fam.markers, *SELECTOR_TOKENS]


def _pieces(fam: Family = HERMES) -> list[str]:
    """The multi-character script pieces that are not added tokens, in first-use order (their vocabulary order)."""
    seen: list[str] = []
    added = set(_added(fam))
    for name in SELECTORS:
        for p in fam.scripts[name]:
            if len(p.encode("utf-8")) > 1 and p not in added and p not in seen:
                seen.append(p)
    return seen


def vocabulary(fam: Family = HERMES) -> list[str]:
    """Token id -> its text: 256 bytes (as latin-1 stand-ins for the byte), specials, markers, selectors, pieces."""
    return [bytes([b]).decode("latin-1") for b in range(256)] + _added(fam) + _pieces(fam)


def _ids(fam: Family = HERMES) -> dict[str, int]:
    vocab = vocabulary(fam)
    out = {t: i for i, t in enumerate(vocab[256:], start=256)}
    return out


def encode_script(name: str, fam: Family = HERMES) -> list[int]:
    """The token ids greedy decoding emits for a script, the end token included."""
    ids = _ids(fam)
    out = []
    for p in fam.scripts[name]:
        out.append(ids[p] if p in ids else p.encode("utf-8")[0])
    return out + [ids[fam.eos]]


def check_family(fam: Family) -> None:
    """ValueError naming the family (and the script) when its description cannot be built: a script missing or
    empty, an end token that is not a special, added tokens that repeat or are one character (that byte's token), or
    a piece that holds an added token's text (a parser that looks the marker up by id would never see it)."""
    where = f"family {fam.name}"
    missing = [s for s in SELECTORS if not fam.scripts.get(s)]
    if missing:
        raise ValueError(f"{where}: script {missing[0]} missing or empty")
    if fam.eos not in fam.specials or len(fam.specials) < 2:
        raise ValueError(f"{where}: the end token {fam.eos!r} must be one of two or more specials")
    added = _added(fam)
    for t in added:
        if added.count(t) > 1:
            raise ValueError(f"{where}: added token {t!r} is listed twice (specials, markers and selectors are one "
                             "vocabulary)")  # fmt: skip
        if len(t.encode("utf-8")) < 2:
            raise ValueError(f"{where}: added token {t!r} collides with the byte token of the same character")
    for s in SELECTORS:
        for piece in fam.scripts[s]:
            if piece not in added and any(t in piece for t in added):
                inside = next(t for t in added if t in piece)
                raise ValueError(f"{where}, script {s}: piece {piece!r} holds the added token {inside!r}: write the "
                                 "token as a piece of its own")  # fmt: skip
    for ending in fam.prompt_endings:
        if any(t != SELECTOR and t not in added and len(t.encode("utf-8")) != 1 for t in ending):
            raise ValueError(f"{where}: a prompt ending is two tokens (a one-byte character, an added token or the "
                             f"selector), not {ending!r}")  # fmt: skip


def _byte_id(ch: str) -> int:
    return ch.encode("utf-8")[0]


def _rules(fam: Family) -> list[tuple[int, int, int, int]]:
    """(selector index, previous id, current id, next id) for every step of every script."""
    ids = _ids(fam)
    rules = []
    for s_index, name in enumerate(SELECTORS):
        seq = encode_script(name, fam)
        selector = ids[SELECTOR_TOKENS[s_index]]

        def token(text: str, selector: int = selector) -> int:
            return selector if text == SELECTOR else ids[text] if text in ids else _byte_id(text)

        for prev_text, cur_text in fam.prompt_endings:
            rules.append((s_index, token(prev_text), token(cur_text), seq[0]))
        prev = token(fam.prompt_endings[0][1])  # the prompt's last token, the same in every ending
        for i in range(len(seq) - 1):
            rules.append((s_index, prev, seq[i], seq[i + 1]))
            prev = seq[i]
    return rules


def check_rules(fam: Family = HERMES) -> list[tuple[int, int, int, int]]:
    """The rule table, deduplicated; ValueError naming the family and the script when one context would need two
    next tokens, or when the family's description does not hold together (see check_family)."""
    check_family(fam)
    vocab = vocabulary(fam)
    table: dict[tuple[int, int, int], int] = {}
    for s, p, c, n in _rules(fam):
        if table.setdefault((s, p, c), n) != n:
            raise ValueError(f"family {fam.name}, script {SELECTORS[s]}: after {vocab[p]!r} {vocab[c]!r} it needs both "
                             f"{vocab[table[(s, p, c)]]!r} and {vocab[n]!r} next")  # fmt: skip
    return [(s, p, c, n) for (s, p, c), n in table.items()]


# Default successors outside the scripts: ":abc" then a quote, so text is printable and a constrained JSON string
# closes after a few characters; the bias orders what a grammar allows when the successor is masked (closing before
# opening, whitespace last: a JSON grammar that allows whitespace anywhere never gets an endless run of it).
_SUCCESSOR = {'"': ":", ":": "a", "a": "b", "b": "c", "c": '"'}
_BIAS = {'"': 3.0, "}": 2.8, "]": 2.6, ":": 2.5, "0": 2.4, ",": 2.2, "a": 1.5, " ": 0.5, "\n": 0.4}


def _shape(fam: Family = HERMES) -> dict[str, int]:
    v = len(vocabulary(fam))
    n_prev = math.ceil(v / 64)  # previous-token heads: 64 value dims each, together one-hot of every token
    n_kv = n_prev + 1  # + the selector head
    width = 1 + 3 * v + len(SELECTORS)  # const, A, B, S, C
    n_heads = n_kv * math.ceil(width / (64 * n_kv))
    n_rules = len(check_rules(fam))
    inter = 64 * math.ceil((n_rules + v) / 64)
    return {"vocab": v, "n_prev": n_prev, "n_kv": n_kv, "n_heads": n_heads, "hidden": 64 * n_heads,
            "intermediate": inter}  # fmt: skip


def _positional_margin(theta: np.ndarray, pairs: int, max_len: int) -> float:
    delta = np.arange(0, max_len)
    score = np.cos(np.outer(delta - 1, theta[:pairs])).sum(axis=1)
    return float(score[1] - np.max(np.delete(score, 1)))


def scripted_weights(fam: Family = HERMES) -> dict[str, np.ndarray]:
    """The HF tensors (float32 little-endian, [out, in]) of the construction in the module docstring."""
    s, dims = SCRIPTED_MODEL_SPEC, _shape(fam)
    v, hd, hidden, n_heads, n_kv = dims["vocab"], s["head_dim"], dims["hidden"], dims["n_heads"], dims["n_kv"]
    group = n_heads // n_kv
    a0, b0, s0 = 1, 1 + v, 1 + 2 * v
    c0 = s0 + len(SELECTORS)
    ids = _ids(fam)
    f64 = np.float64

    embed = np.zeros((v, hidden), f64)
    embed[:, 0] = 1.0
    embed[np.arange(v), a0 + np.arange(v)] = 1.0
    # RMSNorm weight that undoes the norm of an embedding (const 1, one 1): the layer sees the embedding itself
    ln1 = np.full(hidden, math.sqrt(2.0 / hidden))

    theta = 1.0 / (s["rope_theta"] ** (np.arange(0, hd, 2, dtype=f64) / hd))
    pairs, amp = s["positional_pairs"], s["positional_amplitude"]
    margin = _positional_margin(theta, pairs, s["max_position_embeddings"]) * amp * amp / math.sqrt(hd)
    assert margin > 25.0, margin  # the previous token wins by e^25 over any other position
    half = hd // 2
    wq = np.zeros((n_heads * hd, hidden), f64)
    wk = np.zeros((n_kv * hd, hidden), f64)
    wv = np.zeros((n_kv * hd, hidden), f64)
    wo = np.zeros((hidden, n_heads * hd), f64)
    for kv in range(n_kv):
        qh = kv * group  # the first query head of each group; the others stay zero (uniform, and unread)
        if kv < dims["n_prev"]:
            for j in range(pairs):  # q = amp e^{-i theta}, k = amp: score amp^2 cos((delta - 1) theta)
                wq[qh * hd + j, 0] = amp * math.cos(theta[j])
                wq[qh * hd + half + j, 0] = -amp * math.sin(theta[j])
                wk[kv * hd + j, 0] = amp
            for d in range(hd):
                tok = kv * hd + d
                if tok < v:
                    wv[kv * hd + d, a0 + tok] = 1.0
                    wo[b0 + tok, qh * hd + d] = 1.0
        else:  # the selector head, on the slowest pair
            j = half - 1
            wq[qh * hd + j, 0] = math.sqrt(s["selector_score"] * math.sqrt(hd))
            for i, name in enumerate(SELECTOR_TOKENS):
                wk[kv * hd + j, a0 + ids[name]] = math.sqrt(s["selector_score"] * math.sqrt(hd))
                wv[kv * hd + i, a0 + ids[name]] = 1.0
                wo[s0 + i, qh * hd + i] = 1.0

    # after attention: const 1, A 1, B ~1, S ~1 (0 without a selector): the norm sees roughly sqrt(4 / hidden)
    ln2 = np.full(hidden, math.sqrt(4.0 / hidden))
    rules = check_rules(fam)
    gate_w = np.zeros((dims["intermediate"], hidden), f64)
    up_w = np.zeros((dims["intermediate"], hidden), f64)
    down_w = np.zeros((hidden, dims["intermediate"]), f64)
    g = s["gate"]
    for u, (sel, prev, cur, nxt) in enumerate(rules):
        gate_w[u, a0 + cur] = g
        gate_w[u, b0 + prev] = g
        gate_w[u, s0 + sel] = g
        gate_w[u, 0] = -2.5 * g
        up_w[u, 0] = 1.0
        down_w[c0 + nxt, u] = 2.0 / g
    default_weight = s["default_logit"] / s["rule_logit"]
    vocab = vocabulary(fam)
    for t in range(v):  # one unit per current token: its default successor
        u = len(rules) + t
        succ = _SUCCESSOR.get(vocab[t], "a") if t < 256 else "a"
        gate_w[u, a0 + t] = g
        gate_w[u, 0] = -0.5 * g
        up_w[u, 0] = 1.0
        down_w[c0 + _byte_id(succ), u] = default_weight * 2.0 / g

    norm = np.full(hidden, math.sqrt(4.0 / hidden))
    lm_head = np.zeros((v, hidden), f64)
    lm_head[np.arange(v), c0 + np.arange(v)] = s["rule_logit"]
    for b in range(32, 127):  # any printable character a grammar allows comes before whitespace
        lm_head[b, 0] += _BIAS.get(chr(b), 1.0)
    for ch in ("\n",):
        lm_head[_byte_id(ch), 0] += _BIAS[ch]
    for t in list(range(256, v)):  # specials, markers, selectors, pieces: only a rule ever picks them
        lm_head[t, 0] -= 10.0

    out = {
        "model.embed_tokens.weight": embed,
        "model.layers.0.input_layernorm.weight": ln1,
        "model.layers.0.self_attn.q_proj.weight": wq,
        "model.layers.0.self_attn.k_proj.weight": wk,
        "model.layers.0.self_attn.v_proj.weight": wv,
        "model.layers.0.self_attn.o_proj.weight": wo,
        "model.layers.0.post_attention_layernorm.weight": ln2,
        "model.layers.0.mlp.gate_proj.weight": gate_w,
        "model.layers.0.mlp.up_proj.weight": up_w,
        "model.layers.0.mlp.down_proj.weight": down_w,
        "model.norm.weight": norm,
        "lm_head.weight": lm_head,
    }
    return {k: np.ascontiguousarray(w.astype("<f4")) for k, w in out.items()}


def config(fam: Family = HERMES) -> dict:
    """config.json's content (and the shape the GGUF writer reads)."""
    s, dims = SCRIPTED_MODEL_SPEC, _shape(fam)
    ids = _ids(fam)
    return {
        "architectures": [s["architecture"]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": ids[fam.eos],
        "pad_token_id": ids[fam.pad],
        "head_dim": s["head_dim"],
        "hidden_act": "silu",
        "hidden_size": dims["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": dims["intermediate"],
        "max_position_embeddings": s["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": dims["n_heads"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_key_value_heads": dims["n_kv"],
        "pretraining_tp": 1,
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": s["rope_theta"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": dims["vocab"],
    }


def _added_tokens(fam: Family) -> list[dict]:
    ids = _ids(fam)
    special = set(fam.specials) | set(SELECTOR_TOKENS)
    return [
        {
            "id": ids[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": t in special,
        }  # fmt: skip
        for t in _added(fam)
    ]


def byte_level(text: str) -> str:
    """A piece's vocabulary string: its UTF-8 bytes in GPT-2's ByteLevel alphabet."""
    b2u = bytes_to_unicode()
    return "".join(b2u[b] for b in text.encode("utf-8"))


def vocab_strings(fam: Family = HERMES) -> list[str]:
    """Token id -> its string in tokenizer.json (and GGUF): bytes and pieces in the ByteLevel alphabet."""
    vocab = vocabulary(fam)
    added = set(_added(fam))
    b2u = bytes_to_unicode()
    return [b2u[i] if i < 256 else (t if t in added else byte_level(t)) for i, t in enumerate(vocab)]


# llama.cpp's loader refuses an empty merge list; this one never applies (BPE starts from single characters)
NEVER_MERGE = HERMES.never_merge


def token_kinds(fam: Family = HERMES) -> list[str]:
    """Token id -> its GGUF kind: bytes and pieces normal, specials and selectors control, markers user_defined (always
    matched whole in a prompt, and printed)."""
    vocab = vocabulary(fam)
    control = set(fam.specials) | set(SELECTOR_TOKENS)
    return ["control" if t in control else "user_defined" if t in fam.markers else "normal" for t in vocab]


def _tokenizer_json(fam: Family) -> dict:
    vocab = {t: i for i, t in enumerate(vocab_strings(fam))}
    # the pieces are never produced by encoding: prompts are bytes, markers and specials
    return tokenizer_json(vocab, _added_tokens(fam), None)


def scripted_files(fam: Family = HERMES) -> dict[str, bytes]:
    """Relative file name -> exact bytes of every file of the family's scripted model."""
    ids = _ids(fam)
    generation_config = {"eos_token_id": ids[fam.eos], "pad_token_id": ids[fam.pad]}
    specials = {"eos_token": fam.eos, "pad_token": fam.pad}
    tokenizer_config = {
        **specials,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "added_tokens_decoder": {
            str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for t in _added_tokens(fam)
        },
        "chat_template": fam.template,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": SCRIPTED_MODEL_SPEC["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return {
        "config.json": dumps(config(fam)),
        "generation_config.json": dumps(generation_config),
        "model.safetensors": safetensors_bytes(scripted_weights(fam)),
        "special_tokens_map.json": dumps(specials),
        "tokenizer.json": dumps(_tokenizer_json(fam)),
        "tokenizer_config.json": dumps(tokenizer_config),
    }


def build_scripted_model(dest: Path, force: bool = False, fam: Family = HERMES) -> str:
    """Write the family's scripted model into `dest` (new or empty; with force, a scripted model built before) and
    return its content hash."""
    return build_model_dir(dest, lambda: scripted_files(fam), SCRIPTED_FILE_NAMES, config(fam), force=force,
                           what=f"scripted model ({fam.name})")  # fmt: skip


# -- a NumPy forward pass with HF Llama's semantics: proves the weights before any engine runs them -----------------


def _rope(x: np.ndarray, positions: np.ndarray, theta: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    ang = positions[:, None] * theta[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def next_token_logits(ids: list[int], weights: dict[str, np.ndarray] | None = None, fam: Family = HERMES) -> np.ndarray:
    """Logits after the last of `ids` (float64, one layer, causal attention, HF rotate-half RoPE)."""
    s, cfg = SCRIPTED_MODEL_SPEC, config(fam)
    w = {k: a.astype(np.float64) for k, a in (weights or scripted_weights(fam)).items()}
    hd, nh, nkv = s["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    x = w["model.embed_tokens.weight"][ids]
    p = "model.layers.0."
    h = _rms(x, w[p + "input_layernorm.weight"], s["rms_norm_eps"])
    n = len(ids)
    pos = np.arange(n, dtype=np.float64)
    theta = 1.0 / (s["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    q = _rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd), pos, theta)
    k = _rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, nkv, hd), pos, theta)
    v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, nkv, hd)
    group = nh // nkv
    heads = []
    for head in range(nh):
        kv = head // group
        scores = (k[:, kv, :] @ q[-1, head, :]) / math.sqrt(hd)
        scores = np.exp(scores - scores.max())
        heads.append((scores / scores.sum()) @ v[:, kv, :])
    x_last = x[-1] + np.concatenate(heads) @ w[p + "self_attn.o_proj.weight"].T
    m = _rms(x_last, w[p + "post_attention_layernorm.weight"], s["rms_norm_eps"])
    gate = m @ w[p + "mlp.gate_proj.weight"].T
    act = gate / (1.0 + np.exp(-gate)) * (m @ w[p + "mlp.up_proj.weight"].T)
    x_last = x_last + act @ w[p + "mlp.down_proj.weight"].T
    return _rms(x_last, w["model.norm.weight"], s["rms_norm_eps"]) @ w["lm_head.weight"].T


def greedy(prompt_ids: list[int], max_tokens: int = 64, fam: Family = HERMES) -> list[int]:
    """Greedy decoding with `next_token_logits` until the end token (included) or max_tokens."""
    weights = scripted_weights(fam)
    eos = _ids(fam)[fam.eos]
    ids, out = list(prompt_ids), []
    for _ in range(max_tokens):
        t = int(np.argmax(next_token_logits(ids, weights, fam)))
        out.append(t)
        ids.append(t)
        if t == eos:
            break
    return out


def render_ids(text: str, fam: Family = HERMES) -> list[int]:
    """Encode a rendered prompt as the tokenizer does: added tokens whole, everything else byte by byte."""
    ids = _ids(fam)
    added = sorted(_added(fam), key=len, reverse=True)
    out, i = [], 0
    while i < len(text):
        tok = next((t for t in added if text.startswith(t, i)), None)
        if tok is not None:
            out.append(ids[tok])
            i += len(tok)
        else:
            out.extend(text[i].encode("utf-8"))
            i += 1
    return out


def decode(ids: list[int], fam: Family = HERMES) -> str:
    vocab = vocabulary(fam)
    raw = b"".join(vocab[t].encode("latin-1") if t < 256 else vocab[t].encode("utf-8") for t in ids)
    return raw.decode("utf-8", errors="replace")


def script_names() -> list[str]:
    return list(SELECTORS)


if __name__ == "__main__":  # a quick look: python -m harness.models.scripted
    from harness.models.families import FAMILIES

    print(json.dumps({name: _shape(f) for name, f in FAMILIES.items()}))
