"""The reference tiny model's shape as `config.json` states it, for block-math tests (one copy, not one per file)."""

TINY_CONFIG = {
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "hidden_size": 128,
    "head_dim": 64,
    "torch_dtype": "float32",
}
