"""The parser families the scripted models speak: one description each (markers, chat template, scripts), so that a
family is data and harness.models.scripted builds any of them with the same construction.

    family = FAMILIES["qwen3_coder"]     # Family(name, source, specials, eos, markers, scripts, template, ...)
    family.source                        # the manifest's model.source: "scripted-qwen3-coder"

Every family answers the same requests with the same meaning (what a client gets once the engine's parsers have run:
TOOL_CALLS, REASONING, ANSWERS below), written in its own format:

    hermes       ChatML, <tool_call>{"name": .., "arguments": {..}}</tool_call>, <think> blocks   (vLLM hermes + qwen3)
    qwen3_coder  ChatML, <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>, no reasoning
                 (Qwen3-Coder; vLLM qwen3_coder / qwen3_xml)
    llama3_json  Llama 3 headers, {"name": .., "parameters": {..}} (parallel calls joined by "; "), no reasoning
                 (Llama 3.x; vLLM llama3_json)
    pythonic     Llama 3 headers, [get_weather(city='Paris', ...), get_time(...)], no reasoning (Llama 3.2/4, Olmo;
                 vLLM pythonic)
    deepseek_v3  DeepSeek roles, <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME + a json block,
                 no reasoning (DeepSeek-V3-0324; vLLM deepseek_v3)
    kimi_k2      Kimi roles, <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
                 {..}, no reasoning (Kimi-K2-Instruct; vLLM kimi_k2)

A family without reasoning answers the thinking scripts as their direct twins (its template has no thinking switch).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Family", "FAMILIES", "HERMES", "SELECTOR", "SELECTORS", "SELECTOR_TOKENS", "TOOL_CALLS", "REASONING", "ANSWERS",
           "CALL_MARKUP", "family_of_source", "SCRIPTED_SOURCES"]  # fmt: skip

SELECTOR = "{selector}"  # in a prompt ending: the script's selector token (a template that ends on a special token)
SELECTORS = ("call", "parallel", "call_direct", "parallel_direct", "think", "plain", "after_tool")
SELECTOR_TOKENS = tuple(f"<|script:{s}|>" for s in SELECTORS)

# What a client should get out of each script once the engine's parsers have run (what the conformance cases check),
# the same in every family.
_WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})
_TIME = ("get_time", {"timezone": "Europe/Paris"})
TOOL_CALLS = {"call": [_WEATHER], "parallel": [_WEATHER, _TIME], "call_direct": [_WEATHER],
              "parallel_direct": [_WEATHER, _TIME]}  # fmt: skip
REASONING = {"think": "The user says hello. I greet them back.", "call": "The user wants the weather.",
             "parallel": "The user wants weather and time."}  # fmt: skip
ANSWERS = {"think": "Hello! How can I help?", "plain": "Hello! How can I help?",
           "after_tool": "The weather in Paris is 18 degrees Celsius."}  # fmt: skip


@dataclass(frozen=True)
class Family:
    """One parser family's scripted model, as data. `scripts` maps every selector to the pieces greedy decoding emits
    (then `eos`); a piece of one character is that byte's token, a longer one a vocabulary entry of its own."""

    name: str  # the family's name, as vLLM's --tool-call-parser spells it where one parser serves it
    source: str  # the manifest's model.source
    specials: tuple[str, ...]  # control tokens: the first is the pad token
    eos: str  # the end of an answer (one of specials)
    markers: tuple[str, ...]  # added tokens the engines' parsers look up by id, printed in the output
    scripts: dict[str, list[str]]
    template: str  # the chat template (Jinja): renders <|script:NAME|> before the generation prompt
    # a generation prompt's last two tokens, each a one-byte character, an added token or SELECTOR
    prompt_endings: tuple[tuple[str, str], ...]
    reasoning: bool  # the scripts reason in <think> blocks (a reasoning parser splits them off)
    markup: tuple[str, ...] = ()  # call markup that is text, not a token (never left in a client's content)
    parser_args: tuple[str, ...] = ()  # the server flags that select the family's parsers (where a server takes them)
    gguf_name: str = ""

    @property
    def pad(self) -> str:
        return self.specials[0]

    @property
    def never_merge(self) -> str:
        """A BPE merge that never applies (llama.cpp's loader refuses an empty merge list)."""
        return f"{self.specials[1]} {self.eos}"


def _direct_twins(scripts: dict[str, list[str]]) -> dict[str, list[str]]:
    """A family without reasoning: each thinking script is its direct twin."""
    twins = {"call": scripts["call_direct"], "parallel": scripts["parallel_direct"], "think": scripts["plain"]}
    return {**scripts, **twins}


# a call's arguments as the template is given them: a JSON string as it is, an object as JSON
_ARGUMENTS = (
    "{%- if call['arguments'] is string -%}{{- call['arguments'] -}}{%- else -%}{{- call['arguments'] | tojson -}}"
    "{%- endif -%}"
)

# ChatML with hermes tool calls and <think> blocks (the shape of Qwen3's template, so vLLM's hermes and qwen3 parsers
# and llama.cpp's template analysis see what they know). The selector is rendered only in the generation prompt.
_HERMES_TEMPLATE = (
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
    + _ARGUMENTS
    + "{{- '}\\n</tool_call>' -}}"
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


_ANSWER = ["Hello! ", "How can ", "I help?"]
# the same answer in six tokens: with its end token past any small max_tokens a case cuts at (4), a cut is a cut
_LONG_ANSWER = ["Hello", "! ", "How ", "can ", "I ", "help?"]
_THINK = ["<think>", "\nThe user", " says hello.", " I greet", " them back.\n", "</think>", "\n\n", *_ANSWER]
_AFTER_TOOL = ["The weather", " in Paris", " is 18", " degrees", " Celsius."]
_THINK_CALL = ["<think>", "\nThe user", " wants the weather.\n", "</think>", "\n\n"]
_THINK_PARALLEL = ["<think>", "\nThe user", " wants weather", " and time.\n", "</think>", "\n\n"]

_HERMES_WEATHER = ['\n{"name": "get_weather", "arguments": ', '{"city": ', '"Paris", ', '"unit": ', '"celsius"}', "}\n"]
# its last piece closes the arguments, the call and the line at once: the second </tool_call> follows another token
_HERMES_TIME = ['\n{"name": "get_time", "arguments": ', '{"timezone": ', '"Europe/', 'Paris"}}\n']

# With thinking on (the default, as Qwen3), a tool script reasons first, so a reasoning parser ends before the tool
# call; with enable_thinking false it calls at once (and a reasoning parser never sees </think>).
HERMES = Family(
    name="hermes", source="scripted-tiny",
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>",
    markers=("<tool_call>", "</tool_call>", "<think>", "</think>"),
    scripts={
        "call": [*_THINK_CALL, "<tool_call>", *_HERMES_WEATHER, "</tool_call>"],
        # the separator "\n" differs from the "\n\n" after </think>, so the second <tool_call> follows another token
        "parallel": [*_THINK_PARALLEL, "<tool_call>", *_HERMES_WEATHER, "</tool_call>", "\n", "<tool_call>",
                     *_HERMES_TIME, "</tool_call>"],
        "call_direct": ["<tool_call>", *_HERMES_WEATHER, "</tool_call>"],
        # the separator "\n\n" is one piece: the prompt ends with "\n", so the second <tool_call> follows another token
        "parallel_direct": ["<tool_call>", *_HERMES_WEATHER, "</tool_call>", "\n\n", "<tool_call>", *_HERMES_TIME,
                            "</tool_call>"],
        "think": list(_THINK),
        "plain": list(_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    },
    template=_HERMES_TEMPLATE, prompt_endings=(("t", "\n"), ("\n", "\n")), reasoning=True,
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"),
    gguf_name="harness-tiny-scripted",
)  # fmt: skip

# -- the other families' templates share their content macro and the script selection ---------------------------

_TEXT_MACRO = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for part in content -%}{%- if part is mapping and part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
)


def _select(prompt: str, thinking: bool, always: bool = False) -> str:
    """The generation prompt: the script's selector, then `prompt`; with thinking, enable_thinking false picks the
    direct scripts and closes an empty think block as Qwen3's template does. `always`: the selector is rendered
    whether or not a generation prompt is asked for, so the generation prompt is `prompt` alone (llama.cpp's
    Qwen3-Coder and Kimi K2 handlers parse the output after a generation prompt they know)."""
    direct = ("{%- set direct = '_direct' if enable_thinking is defined and enable_thinking is false else '' -%}"
              if thinking else "{%- set direct = '' -%}")  # fmt: skip
    tail = ("{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
            "{%- endif -%}" if thinking else "")  # fmt: skip
    pick = (
        direct + "{%- if messages and messages[-1]['role'] == 'tool' -%}{%- set script = 'after_tool' -%}"
        "{%- elif tools and tools | length > 1 -%}{%- set script = 'parallel' + direct -%}"
        "{%- elif tools -%}{%- set script = 'call' + direct -%}"
        "{%- elif direct -%}{%- set script = 'plain' -%}"
        "{%- else -%}{%- set script = 'think' -%}"
        "{%- endif -%}"
    )
    if always:
        return (
            pick
            + "{{- '<|script:' + script + '|>' -}}{%- if add_generation_prompt -%}{{- '"
            + prompt
            + "' -}}"
            + tail
            + "{%- endif -%}"
        )
    return (
        "{%- if add_generation_prompt -%}"
        + pick
        + "{{- '<|script:' + script + '|>"
        + prompt
        + "' -}}"
        + tail
        + "{%- endif -%}"
    )


def _call_of(var: str = "tool_call") -> str:
    return f"{{%- set call = {var}['function'] if {var}.get('function') else {var} -%}}"


# Qwen3-Coder's XML calls in ChatML (the shape of Qwen3-Coder's template, which does not think: llama.cpp recognises it by
# <tool_call>, <function= and <parameter= with newlines between the tags; vLLM's qwen3_coder and qwen3_xml parse it).
_QWEN3_CODER_TEMPLATE = (
    _TEXT_MACRO + "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- text(messages[0]['content']) + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:\\n\\n"
    "<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n"
    "</function>\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages and messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + text(messages[0]['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' and loop.first -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{{- text(message['content']) -}}"
    "{%- if message.get('tool_calls') -%}"
    "{%- for tool_call in message['tool_calls'] -%}"
    + _call_of()
    + "{%- if not loop.first or message['content'] -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n<function=' + call['name'] + '>\\n' -}}"
    "{%- if call['arguments'] is mapping -%}"
    "{%- for name, value in call['arguments'].items() -%}"
    "{{- '<parameter=' + name + '>\\n' -}}"
    "{%- if value is string -%}{{- value -}}{%- else -%}{{- value | tojson -}}{%- endif -%}"
    "{{- '\\n</parameter>\\n' -}}"
    "{%- endfor -%}"
    "{%- else -%}{{- call['arguments'] -}}"
    "{%- endif -%}"
    "{{- '</function>\\n</tool_call>' -}}"
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
    "{%- endfor -%}" + _select("<|im_start|>assistant\\n", thinking=False, always=True)
)

# "<parameter" and its name are two pieces, as Qwen's tokenizer splits them: vLLM 0.11's qwen3_coder streaming parser
# never sends the arguments' opening brace when one delta holds the whole "<parameter=" (coalesced deltas)
_CODER_WEATHER = ["\n<function=get_weather>\n", "<parameter", "=city>\n", "Paris\n", "</parameter>\n",
                  "<parameter", "=unit>\n", "celsius\n", "</parameter>\n", "</function>\n"]  # fmt: skip
# its "</function>" and "\n" are two pieces: the second </tool_call> follows another token than the first's (a
# piece holding both "</parameter>" and "</function>" is a coalesced delta: 0.11's parser then drops the parameter)
_CODER_TIME = ["\n<function=get_time>\n", "<parameter", "=timezone>\n", "Europe/Paris\n", "</parameter>\n",
               "</function>", "\n"]  # fmt: skip

QWEN3_CODER = Family(
    name="qwen3_coder", source="scripted-qwen3-coder",
    specials=HERMES.specials, eos=HERMES.eos, markers=("<tool_call>", "</tool_call>"),
    scripts=_direct_twins({
        "call_direct": ["<tool_call>", *_CODER_WEATHER, "</tool_call>"],
        # the separator "\n\n" is one piece: the prompt ends with "\n", so the second <tool_call> follows another token
        "parallel_direct": ["<tool_call>", *_CODER_WEATHER, "</tool_call>", "\n\n", "<tool_call>", *_CODER_TIME,
                            "</tool_call>"],
        "plain": list(_LONG_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    }),
    template=_QWEN3_CODER_TEMPLATE, prompt_endings=HERMES.prompt_endings, reasoning=False,
    markup=("<function=", "<parameter=", "</function>"),
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"),
    gguf_name="harness-tiny-scripted-qwen3-coder",
)  # fmt: skip


def _llama3_template(instructions: str, call: str, joiner: str, opening: str, closing: str) -> str:
    """Llama 3's headers (<|start_header_id|>role<|end_header_id|>, <|eot_id|>), tools in the system turn, tool results
    as ipython turns; `call` renders one call (Jinja, the call in `call`), `joiner` between calls, the list of calls
    between `opening` and `closing`."""
    return (
        _TEXT_MACRO + "{{- '<|begin_of_text|>' -}}"
        "{%- set system = text(messages[0]['content']) if messages and messages[0]['role'] == 'system' else '' -%}"
        "{%- if tools or system -%}"
        "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}"
        "{%- if tools -%}{{- 'Environment: ipython\\n\\n' -}}{%- endif -%}"
        "{{- system -}}"
        "{%- if tools -%}"
        "{%- if system -%}{{- '\\n\\n' -}}{%- endif -%}"
        "{{- '" + instructions + "\\n\\n' -}}"
        "{%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n\\n' -}}{%- endfor -%}"
        "{%- endif -%}"
        "{{- '<|eot_id|>' -}}"
        "{%- endif -%}"
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'system' and loop.first -%}"
        "{%- elif message['role'] == 'assistant' -%}"
        "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
        "{%- if message.get('tool_calls') -%}"
        "{{- '" + opening + "' -}}"
        "{%- for tool_call in message['tool_calls'] -%}"
        + _call_of()
        + "{%- if not loop.first -%}{{- '"
        + joiner
        + "' -}}{%- endif -%}"
        + call
        + "{%- endfor -%}"
        "{{- '" + closing + "' -}}"
        "{%- else -%}{{- text(message['content']) -}}"
        "{%- endif -%}"
        "{{- '<|eot_id|>' -}}"
        "{%- elif message['role'] == 'tool' or message['role'] == 'ipython' -%}"
        "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + text(message['content']) + '<|eot_id|>' -}}"
        "{%- else -%}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + text(message['content'])"
        " + '<|eot_id|>' -}}"
        "{%- endif -%}"
        "{%- endfor -%}" + _select("<|start_header_id|>assistant<|end_header_id|>\\n\\n", thinking=False)
    )


_LLAMA3_SPECIALS = ("<|end_of_text|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
_JSON_CALL = "{{- '{\"name\": \"' + call['name'] + '\", \"parameters\": ' -}}" + _ARGUMENTS + "{{- '}' -}}"
_LLAMA3_JSON_TEMPLATE = _llama3_template(
    "Given the following functions, respond with a JSON for a function call with its proper arguments. Respond in "
    'the format {"name": function name, "parameters": dictionary of argument name and its value}; separate '
    'several calls with "; ". Do not use variables.',
    _JSON_CALL,
    "; ",
    "",
    "",
)
_JSON_WEATHER = ['{"name": "get_weather", "parameters": ', '{"city": ', '"Paris", ', '"unit": ', '"celsius"}}']
_JSON_TIME = ['{"name": "get_time", "parameters": ', '{"timezone": ', '"Europe/', 'Paris"}}']

LLAMA3_JSON = Family(
    name="llama3_json", source="scripted-llama3-json",
    specials=_LLAMA3_SPECIALS, eos="<|eot_id|>", markers=("<|python_tag|>",),
    scripts=_direct_twins({
        "call_direct": list(_JSON_WEATHER),
        "parallel_direct": [*_JSON_WEATHER, "; ", *_JSON_TIME],
        "plain": list(_LONG_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    }),
    template=_LLAMA3_JSON_TEMPLATE, prompt_endings=(("\n", "\n"),), reasoning=False,
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"),
    gguf_name="harness-tiny-scripted-llama3-json",
)  # fmt: skip

_PYTHONIC_CALL = (
    "{{- call['name'] + '(' -}}"
    "{%- if call['arguments'] is mapping -%}"
    "{%- for name, value in call['arguments'].items() -%}"
    "{%- if not loop.first -%}{{- ', ' -}}{%- endif -%}{{- name + '=' -}}{{- value | tojson -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- ')' -}}"
)
_PYTHONIC_TEMPLATE = _llama3_template(
    "You may call one or more functions. To call them, respond with a Python list of calls and nothing else: "
    "[func_name1(param_name1=value1, param_name2=value2), func_name2(param=value)]",
    _PYTHONIC_CALL,
    ", ",
    "[",
    "]",
)
_PY_WEATHER = ["[get_weather(", "city='Paris', ", "unit='celsius'"]
_PY_TIME = ["get_time(", "timezone='Europe/", "Paris')]"]

PYTHONIC = Family(
    name="pythonic", source="scripted-pythonic",
    specials=_LLAMA3_SPECIALS, eos="<|eot_id|>", markers=("<|python_tag|>",),
    scripts=_direct_twins({
        "call_direct": [*_PY_WEATHER, ")]"],
        "parallel_direct": [*_PY_WEATHER, "), ", *_PY_TIME],
        "plain": list(_LONG_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    }),
    template=_PYTHONIC_TEMPLATE, prompt_endings=(("\n", "\n"),), reasoning=False,
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "pythonic"),
    gguf_name="harness-tiny-scripted-pythonic",
)  # fmt: skip

# DeepSeek V3's tool-call tokens and roles (the shape of DeepSeek-V3-0324's template: no reasoning). The model sees two
# tokens back, so the second call writes its type in two pieces: its name follows another context than the first's.
_DS = {
    "calls": "<｜tool▁calls▁begin｜>",
    "calls_end": "<｜tool▁calls▁end｜>",
    "call": "<｜tool▁call▁begin｜>",
    "call_end": "<｜tool▁call▁end｜>",
    "sep": "<｜tool▁sep｜>",
    "outputs": "<｜tool▁outputs▁begin｜>",
    "outputs_end": "<｜tool▁outputs▁end｜>",
    "output": "<｜tool▁output▁begin｜>",
    "output_end": "<｜tool▁output▁end｜>",
}
_DEEPSEEK_V3_TEMPLATE = (
    _TEXT_MACRO + "{{- '<｜begin▁of▁sentence｜>' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- text(messages[0]['content']) -}}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '\\n\\n## Tools\\nYou have access to the following tools:' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n\\nTo call a tool, reply with "
    + _DS["calls"]
    + _DS["call"]
    + "function"
    + _DS["sep"]
    + "NAME\\n```json\\nARGUMENTS\\n```"
    + _DS["call_end"]
    + _DS["calls_end"]
    + "' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' and loop.first -%}"
    "{%- elif message['role'] == 'user' -%}{{- '<｜User｜>' + text(message['content']) -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<｜Assistant｜>' + text(message['content']) -}}"
    "{%- if message.get('tool_calls') -%}"
    "{{- '" + _DS["calls"] + "' -}}"
    "{%- for tool_call in message['tool_calls'] -%}"
    + _call_of()
    + "{%- if not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '"
    + _DS["call"]
    + "function"
    + _DS["sep"]
    + "' + call['name'] + '\\n```json\\n' -}}"
    + _ARGUMENTS
    + "{{- '\\n```"
    + _DS["call_end"]
    + "' -}}"
    "{%- endfor -%}"
    "{{- '" + _DS["calls_end"] + "' -}}"
    "{%- endif -%}"
    "{{- '<｜end▁of▁sentence｜>' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '" + _DS["outputs"] + "' -}}{%- endif -%}"
    "{{- '" + _DS["output"] + "' + text(message['content']) + '" + _DS["output_end"] + "' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '" + _DS["outputs_end"] + "' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}" + _select("<｜Assistant｜>", thinking=False)
)
_DS_WEATHER = [_DS["call"], "function", _DS["sep"], "get_weather\n```json\n", '{"city": ', '"Paris", ', '"unit": ',
               '"celsius"}', "\n```", _DS["call_end"]]  # fmt: skip
_DS_TIME = [_DS["call"], "fun", "ction", _DS["sep"], "get_time\n```json\n", '{"timezone": ', '"Europe/',
            'Paris"}\n```', _DS["call_end"]]  # fmt: skip

DEEPSEEK_V3 = Family(
    name="deepseek_v3", source="scripted-deepseek-v3",
    specials=("<｜▁pad▁｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
    eos="<｜end▁of▁sentence｜>",
    markers=tuple(_DS.values()),
    scripts=_direct_twins({
        "call_direct": [_DS["calls"], *_DS_WEATHER, _DS["calls_end"]],
        "parallel_direct": [_DS["calls"], *_DS_WEATHER, "\n", *_DS_TIME, _DS["calls_end"]],
        "plain": list(_LONG_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    }),
    template=_DEEPSEEK_V3_TEMPLATE, prompt_endings=((SELECTOR, "<｜Assistant｜>"),), reasoning=False,
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3"),
    gguf_name="harness-tiny-scripted-deepseek-v3",
)  # fmt: skip

# Kimi K2's sections and functions.NAME:IDX call ids (the shape of Kimi-K2-Instruct's template: no reasoning).
_KIMI = {
    "section": "<|tool_calls_section_begin|>",
    "section_end": "<|tool_calls_section_end|>",
    "call": "<|tool_call_begin|>",
    "args": "<|tool_call_argument_begin|>",
    "call_end": "<|tool_call_end|>",
}
_KIMI_TEMPLATE = (
    _TEXT_MACRO + "{%- if tools -%}"
    "{{- '<|im_system|>tool_declare<|im_middle|>' -}}{{- tools | tojson -}}{{- '<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_assistant|>assistant<|im_middle|>' + text(message['content']) -}}"
    "{%- if message.get('tool_calls') -%}"
    "{{- '" + _KIMI["section"] + "' -}}"
    "{%- for tool_call in message['tool_calls'] -%}"
    + _call_of()
    + "{%- set id = tool_call.get('id') or ('functions.' ~ call['name'] ~ ':' ~ loop.index0) -%}"
    "{{- '"
    + _KIMI["call"]
    + "' + id + '"
    + _KIMI["args"]
    + "' -}}"
    + _ARGUMENTS
    + "{{- '"
    + _KIMI["call_end"]
    + "' -}}"
    "{%- endfor -%}"
    "{{- '" + _KIMI["section_end"] + "' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_system|>tool<|im_middle|>## Return of ' + (message.get('tool_call_id') or '') + '\\n'"
    " + text(message['content']) + '<|im_end|>' -}}"
    "{%- elif message['role'] == 'system' -%}"
    "{{- '<|im_system|>system<|im_middle|>' + text(message['content']) + '<|im_end|>' -}}"
    "{%- else -%}"
    "{{- '<|im_user|>user<|im_middle|>' + text(message['content']) + '<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}" + _select("<|im_assistant|>assistant<|im_middle|>", thinking=False, always=True)
)
_KIMI_WEATHER = [_KIMI["call"], "functions.get_weather:0", _KIMI["args"], '{"city": ', '"Paris", ', '"unit": ',
                 '"celsius"}', _KIMI["call_end"]]  # fmt: skip
_KIMI_TIME = [_KIMI["call"], "functions.get_time:1", _KIMI["args"], '{"timezone": ', '"Europe/', 'Paris"}',
              _KIMI["call_end"]]  # fmt: skip

KIMI_K2 = Family(
    name="kimi_k2", source="scripted-kimi-k2",
    specials=("[PAD]", "[BOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"),
    eos="<|im_end|>",
    markers=tuple(_KIMI.values()),
    scripts=_direct_twins({
        "call_direct": [_KIMI["section"], *_KIMI_WEATHER, _KIMI["section_end"]],
        "parallel_direct": [_KIMI["section"], *_KIMI_WEATHER, *_KIMI_TIME, _KIMI["section_end"]],
        "plain": list(_LONG_ANSWER),
        "after_tool": list(_AFTER_TOOL),
    }),
    template=_KIMI_TEMPLATE, prompt_endings=(("t", "<|im_middle|>"),), reasoning=False,
    parser_args=("--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"),
    gguf_name="harness-tiny-scripted-kimi-k2",
)  # fmt: skip

FAMILIES: dict[str, Family] = {f.name: f for f in (HERMES, QWEN3_CODER, LLAMA3_JSON, PYTHONIC, DEEPSEEK_V3, KIMI_K2)}
SCRIPTED_SOURCES: dict[str, Family] = {f.source: f for f in FAMILIES.values()}
# call and reasoning markup of every family: text a client must never find left in its content
CALL_MARKUP: tuple[str, ...] = tuple(dict.fromkeys(m for f in FAMILIES.values() for m in (*f.markers, *f.markup)))


def family_of_source(source: object) -> Family | None:
    """The family a manifest's model.source names, or None when it is not a scripted model."""
    return SCRIPTED_SOURCES.get(source) if isinstance(source, str) else None
