"""The scripted tiny model: a Llama checkpoint whose weights, not training, make greedy decoding follow fixed scripts.

`harness model build DIR --model scripted-tiny` writes it; manifests pin it as `model.source: scripted-tiny`. It exists
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
    "config",
    "vocab_strings",
    "token_kinds",
    "NEVER_MERGE",
    "greedy",
    "encode_script",
]

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
MARKERS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]  # added tokens the engines' parsers look up
SELECTORS = ["call", "parallel", "call_direct", "parallel_direct", "think", "plain", "after_tool"]
SELECTOR_TOKENS = [f"<|script:{s}|>" for s in SELECTORS]
SPECIALS = [PAD, IM_START, IM_END]

_CALL_WEATHER = ['\n{"name": "get_weather", "arguments": ', '{"city": ', '"Paris", ', '"unit": ', '"celsius"}', "}\n"]
# its last piece closes the arguments, the call and the line at once: the second </tool_call> follows another token
_CALL_TIME = ['\n{"name": "get_time", "arguments": ', '{"timezone": ', '"Europe/', 'Paris"}}\n']
_ANSWER = ["Hello! ", "How can ", "I help?"]

# selector -> the pieces greedy decoding emits (then <|im_end|>). Pieces of one character are that byte's token.
# With thinking on (the default, as Qwen3), a tool script reasons first, so a reasoning parser ends before the tool
# call; with enable_thinking false it calls at once (and a reasoning parser never sees </think>).
SCRIPTS: dict[str, list[str]] = {
    "call": ["<think>", "\nThe user", " wants the weather.\n", "</think>", "\n\n",
             "<tool_call>", *_CALL_WEATHER, "</tool_call>"],
    # the separator "\n" differs from the "\n\n" after </think>, so the second <tool_call> follows another token
    "parallel": ["<think>", "\nThe user", " wants weather", " and time.\n", "</think>", "\n\n",
                 "<tool_call>", *_CALL_WEATHER, "</tool_call>", "\n", "<tool_call>", *_CALL_TIME, "</tool_call>"],
    "call_direct": ["<tool_call>", *_CALL_WEATHER, "</tool_call>"],
    # the separator "\n\n" is one piece: the prompt ends with "\n", so the second <tool_call> follows another token
    "parallel_direct": ["<tool_call>", *_CALL_WEATHER, "</tool_call>", "\n\n", "<tool_call>", *_CALL_TIME,
                        "</tool_call>"],
    "think": ["<think>", "\nThe user", " says hello.", " I greet", " them back.\n", "</think>", "\n\n", *_ANSWER],
    "plain": list(_ANSWER),
    "after_tool": ["The weather", " in Paris", " is 18", " degrees", " Celsius."],
}  # fmt: skip
SCRIPT_TEXT = {name: "".join(pieces) for name, pieces in SCRIPTS.items()}

# What a client should get out of each script once the engine's parsers have run (what the conformance cases check).
_WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})
_TIME = ("get_time", {"timezone": "Europe/Paris"})
TOOL_CALLS = {"call": [_WEATHER], "parallel": [_WEATHER, _TIME], "call_direct": [_WEATHER],
              "parallel_direct": [_WEATHER, _TIME]}  # fmt: skip
REASONING = {"think": "The user says hello. I greet them back.", "call": "The user wants the weather.",
             "parallel": "The user wants weather and time."}  # fmt: skip
ANSWERS = {"think": "Hello! How can I help?", "plain": "Hello! How can I help?",
           "after_tool": "The weather in Paris is 18 degrees Celsius."}  # fmt: skip

# The last two tokens a generation prompt can end with: "assistant\n", or the empty think block of enable_thinking false.
_PROMPT_ENDINGS = [("t", "\n"), ("\n", "\n")]

# ChatML with hermes tool calls and <think> blocks (the shape of Qwen3's template, so vLLM's hermes and qwen3 parsers
# and llama.cpp's template analysis see what they know). The selector is rendered only in the generation prompt.
CHAT_TEMPLATE = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for part in content -%}{%- if part is mapping and part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- text(messages[0]['content']) + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages and messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + text(messages[0]['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' and loop.first -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if message.get('reasoning_content') -%}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- text(message['content']) -}}"
    "{%- if message.get('tool_calls') -%}"
    "{%- for tool_call in message['tool_calls'] -%}"
    "{%- set call = tool_call['function'] if tool_call.get('function') else tool_call -%}"
    "{%- if not loop.first or message['content'] -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' -}}"
    "{%- if call['arguments'] is string -%}{{- call['arguments'] -}}{%- else -%}{{- call['arguments'] | tojson -}}"
    "{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + text(message['content']) + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text(message['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{%- set direct = '_direct' if enable_thinking is defined and enable_thinking is false else '' -%}"
    "{%- if messages and messages[-1]['role'] == 'tool' -%}{%- set script = 'after_tool' -%}"
    "{%- elif tools and tools | length > 1 -%}{%- set script = 'parallel' + direct -%}"
    "{%- elif tools -%}{%- set script = 'call' + direct -%}"
    "{%- elif direct -%}{%- set script = 'plain' -%}"
    "{%- else -%}{%- set script = 'think' -%}"
    "{%- endif -%}"
    "{{- '<|script:' + script + '|><|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)

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


def _pieces() -> list[str]:
    """The multi-character script pieces that are not markers, in first-use order (their vocabulary order)."""
    seen: list[str] = []
    for pieces in SCRIPTS.values():
        for p in pieces:
            if len(p.encode("utf-8")) > 1 and p not in MARKERS and p not in seen:
                seen.append(p)
    return seen


def vocabulary() -> list[str]:
    """Token id -> its text: 256 bytes (as latin-1 stand-ins for the byte), specials, markers, selectors, pieces."""
    return [bytes([b]).decode("latin-1") for b in range(256)] + SPECIALS + MARKERS + SELECTOR_TOKENS + _pieces()


def _ids() -> dict[str, int]:
    vocab = vocabulary()
    out = {t: i for i, t in enumerate(vocab[256:], start=256)}
    return out


def encode_script(name: str) -> list[int]:
    """The token ids greedy decoding emits for a script, <|im_end|> included."""
    ids = _ids()
    out = []
    for p in SCRIPTS[name]:
        out.append(ids[p] if p in ids else p.encode("utf-8")[0])
    return out + [ids[IM_END]]


def _byte_id(ch: str) -> int:
    return ch.encode("utf-8")[0]


def _rules() -> list[tuple[int, int, int, int]]:
    """(selector index, previous id, current id, next id) for every step of every script."""
    rules = []
    for s_index, name in enumerate(SELECTORS):
        seq = encode_script(name)
        for prev_ch, cur_ch in _PROMPT_ENDINGS:
            rules.append((s_index, _byte_id(prev_ch), _byte_id(cur_ch), seq[0]))
        prev = _byte_id("\n")  # the prompt's last token, in every ending
        for i in range(len(seq) - 1):
            rules.append((s_index, prev, seq[i], seq[i + 1]))
            prev = seq[i]
    return rules


def check_rules() -> list[tuple[int, int, int, int]]:
    """The rule table, deduplicated; ValueError when one context would need two next tokens."""
    table: dict[tuple[int, int, int], int] = {}
    for s, p, c, n in _rules():
        if table.setdefault((s, p, c), n) != n:
            raise ValueError(f"script {SELECTORS[s]}: context ({p}, {c}) needs both {table[(s, p, c)]} and {n}")
    return [(s, p, c, n) for (s, p, c), n in table.items()]


# Default successors outside the scripts: ":abc" then a quote, so text is printable and a constrained JSON string
# closes after a few characters; the bias orders what a grammar allows when the successor is masked (closing before
# opening, whitespace last: a JSON grammar that allows whitespace anywhere never gets an endless run of it).
_SUCCESSOR = {'"': ":", ":": "a", "a": "b", "b": "c", "c": '"'}
_BIAS = {'"': 3.0, "}": 2.8, "]": 2.6, ":": 2.5, "0": 2.4, ",": 2.2, "a": 1.5, " ": 0.5, "\n": 0.4}


def _shape() -> dict[str, int]:
    v = len(vocabulary())
    n_prev = math.ceil(v / 64)  # previous-token heads: 64 value dims each, together one-hot of every token
    n_kv = n_prev + 1  # + the selector head
    width = 1 + 3 * v + len(SELECTORS)  # const, A, B, S, C
    n_heads = n_kv * math.ceil(width / (64 * n_kv))
    n_rules = len(check_rules())
    inter = 64 * math.ceil((n_rules + v) / 64)
    return {"vocab": v, "n_prev": n_prev, "n_kv": n_kv, "n_heads": n_heads, "hidden": 64 * n_heads,
            "intermediate": inter}  # fmt: skip


def _positional_margin(theta: np.ndarray, pairs: int, max_len: int) -> float:
    delta = np.arange(0, max_len)
    score = np.cos(np.outer(delta - 1, theta[:pairs])).sum(axis=1)
    return float(score[1] - np.max(np.delete(score, 1)))


def scripted_weights() -> dict[str, np.ndarray]:
    """The HF tensors (float32 little-endian, [out, in]) of the construction in the module docstring."""
    s, dims = SCRIPTED_MODEL_SPEC, _shape()
    v, hd, hidden, n_heads, n_kv = dims["vocab"], s["head_dim"], dims["hidden"], dims["n_heads"], dims["n_kv"]
    group = n_heads // n_kv
    a0, b0, s0 = 1, 1 + v, 1 + 2 * v
    c0 = s0 + len(SELECTORS)
    ids = _ids()
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
    rules = check_rules()
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
    for t in range(v):  # one unit per current token: its default successor
        u = len(rules) + t
        succ = _SUCCESSOR.get(vocabulary()[t], "a") if t < 256 else "a"
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


def config() -> dict:
    """config.json's content (and the shape the GGUF writer reads)."""
    s, dims = SCRIPTED_MODEL_SPEC, _shape()
    ids = _ids()
    return {
        "architectures": [s["architecture"]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": ids[IM_END],
        "pad_token_id": ids[PAD],
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


def _added_tokens() -> list[dict]:
    ids = _ids()
    special = set(SPECIALS) | set(SELECTOR_TOKENS)
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
        for t in SPECIALS + MARKERS + SELECTOR_TOKENS
    ]


def byte_level(text: str) -> str:
    """A piece's vocabulary string: its UTF-8 bytes in GPT-2's ByteLevel alphabet."""
    b2u = bytes_to_unicode()
    return "".join(b2u[b] for b in text.encode("utf-8"))


def vocab_strings() -> list[str]:
    """Token id -> its string in tokenizer.json (and GGUF): bytes and pieces in the ByteLevel alphabet."""
    vocab = vocabulary()
    added = set(SPECIALS + MARKERS + SELECTOR_TOKENS)
    b2u = bytes_to_unicode()
    return [b2u[i] if i < 256 else (t if t in added else byte_level(t)) for i, t in enumerate(vocab)]


# llama.cpp's loader refuses an empty merge list; this one never applies (BPE starts from single characters)
NEVER_MERGE = f"{IM_START} {IM_END}"


def token_kinds() -> list[str]:
    """Token id -> its GGUF kind: bytes and pieces normal, specials and selectors control, markers user_defined (always
    matched whole in a prompt, and printed)."""
    vocab = vocabulary()
    control = set(SPECIALS) | set(SELECTOR_TOKENS)
    return ["control" if t in control else "user_defined" if t in MARKERS else "normal" for t in vocab]


def _tokenizer_json() -> dict:
    vocab = {t: i for i, t in enumerate(vocab_strings())}
    # the pieces are never produced by encoding: prompts are bytes, markers and specials
    return tokenizer_json(vocab, _added_tokens(), None)


def scripted_files() -> dict[str, bytes]:
    """Relative file name -> exact bytes of every file of the scripted model."""
    ids = _ids()
    generation_config = {"eos_token_id": ids[IM_END], "pad_token_id": ids[PAD]}
    specials = {"eos_token": IM_END, "pad_token": PAD}
    tokenizer_config = {
        **specials,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "added_tokens_decoder": {
            str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for t in _added_tokens()
        },
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": SCRIPTED_MODEL_SPEC["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return {
        "config.json": dumps(config()),
        "generation_config.json": dumps(generation_config),
        "model.safetensors": safetensors_bytes(scripted_weights()),
        "special_tokens_map.json": dumps(specials),
        "tokenizer.json": dumps(_tokenizer_json()),
        "tokenizer_config.json": dumps(tokenizer_config),
    }


def build_scripted_model(dest: Path, force: bool = False) -> str:
    """Write the scripted model into `dest` (new or empty; with force, a scripted model built before) and return its
    content hash."""
    return build_model_dir(dest, scripted_files, SCRIPTED_FILE_NAMES, config(), force=force, what="scripted model")


# -- a NumPy forward pass with HF Llama's semantics: proves the weights before any engine runs them -----------------


def _rope(x: np.ndarray, positions: np.ndarray, theta: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    ang = positions[:, None] * theta[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def next_token_logits(ids: list[int], weights: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Logits after the last of `ids` (float64, one layer, causal attention, HF rotate-half RoPE)."""
    s, cfg = SCRIPTED_MODEL_SPEC, config()
    w = {k: a.astype(np.float64) for k, a in (weights or scripted_weights()).items()}
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


def greedy(prompt_ids: list[int], max_tokens: int = 64) -> list[int]:
    """Greedy decoding with `next_token_logits` until <|im_end|> (included) or max_tokens."""
    weights = scripted_weights()
    eos = _ids()[IM_END]
    ids, out = list(prompt_ids), []
    for _ in range(max_tokens):
        t = int(np.argmax(next_token_logits(ids, weights)))
        out.append(t)
        ids.append(t)
        if t == eos:
            break
    return out


def render_ids(text: str) -> list[int]:
    """Encode a rendered prompt as the tokenizer does: added tokens whole, everything else byte by byte."""
    ids = _ids()
    added = sorted(SPECIALS + MARKERS + SELECTOR_TOKENS, key=len, reverse=True)
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


def decode(ids: list[int]) -> str:
    vocab = vocabulary()
    raw = b"".join(vocab[t].encode("latin-1") if t < 256 else vocab[t].encode("utf-8") for t in ids)
    return raw.decode("utf-8", errors="replace")


def script_names() -> list[str]:
    return list(SELECTORS)


if __name__ == "__main__":  # a quick look: python -m harness.models.scripted
    print(json.dumps(_shape()))
