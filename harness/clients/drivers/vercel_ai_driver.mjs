// The Vercel AI SDK (`ai`) as its users run it in a Node service pointed at their own server: `generateText`,
// `streamText` and `generateObject` on a provider's model; `@ai-sdk/openai-compatible` for Chat Completions (with
// `supportsStructuredOutputs`, as its docs say for servers that take a json_schema response_format), `@ai-sdk/openai`'s
// `.responses()` model for the Responses API, `@ai-sdk/anthropic` for Messages. Tools are `tool()`s with zod input
// schemas the SDK runs itself, the loop bounded by `stopWhen: stepCountIs(3)` (call, result, answer).
//
// Run by the harness (harness/clients/run.py) as the Python drivers are (see _driver.py):
//
//     node vercel_ai_driver.mjs --base-url URL --model NAME --feature FEATURE
//
// from a copy beside the client's node_modules (installed by `npm ci` from manifests/locks/clients/vercel-ai-*), and
// prints exactly one JSON line on stdout, the client's own result or its exception:
//
//     {"ok": true, "client": "ai 6.0.333 (@ai-sdk/openai-compatible 2.0.92)", "text": "...", "calls": [...]}
//     {"ok": false, "client": "...", "error": {"type": "APICallError", "message": "...", "status": 400}}
//
// It imports nothing of the harness. The tools are the scripted model's: get_weather and get_time, fixed answers.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const MESSAGE_CHARS = 2000; // of an exception's text: the harness bounds the whole line again
const API_KEY = "harness-client-key"; // never a real key: the harness's loopback proxy puts the run's own on the wire
const QUESTION = "What is the weather in Paris?";
const QUESTION_BOTH = "What is the weather and the time in Paris?";
const GREETING = "Say hello.";
const DESCRIBE = "Describe an item as JSON.";
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };
const MAX_TOKENS = 64; // as _driver.py: the longest script is 24 tokens, the scripted manifests serve 2048 of context
const MAX_TOKENS_STRUCTURED = 128;
const MAX_STEPS = 3; // call, result, answer
const TIMEOUT_MS = 60_000;
const PROVIDER = "local"; // the openai-compatible provider's name: its providerOptions key

const Item = z.object({ name: z.string(), count: z.number().int() });

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

// feature -> the provider package it runs through
const SURFACE = {
  chat: "@ai-sdk/openai-compatible", stream: "@ai-sdk/openai-compatible", tools: "@ai-sdk/openai-compatible",
  parallel: "@ai-sdk/openai-compatible", structured: "@ai-sdk/openai-compatible", responses: "@ai-sdk/openai",
  "responses-tools": "@ai-sdk/openai", messages: "@ai-sdk/anthropic", "messages-stream": "@ai-sdk/anthropic",
  "messages-tools": "@ai-sdk/anthropic",
};

function model(args) {
  const baseURL = `${args["base-url"]}/v1`;
  const surface = SURFACE[args.feature];
  if (surface === "@ai-sdk/openai") return createOpenAI({ baseURL, apiKey: API_KEY }).responses(args.model);
  if (surface === "@ai-sdk/anthropic") return createAnthropic({ baseURL, apiKey: API_KEY })(args.model);
  return createOpenAICompatible({ name: PROVIDER, baseURL, apiKey: API_KEY, supportsStructuredOutputs: true })(args.model);
}

function common(args) {
  return { model: model(args), temperature: 0, maxOutputTokens: MAX_TOKENS, maxRetries: 0,
           abortSignal: AbortSignal.timeout(TIMEOUT_MS) };
}

function tools(calls, both) {
  const getWeather = tool({
    description: "Get the current weather in a city.",
    inputSchema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]).optional() }),
    execute: async ({ city, unit = "celsius" }) => {
      calls.push(["get_weather", { city, unit }]);
      return `18 degrees ${unit[0].toUpperCase()}${unit.slice(1)} in ${city}`;
    },
  });
  const getTime = tool({
    description: "Get the current time in a timezone.",
    inputSchema: z.object({ timezone: z.string() }),
    execute: async ({ timezone }) => {
      calls.push(["get_time", { timezone }]);
      return `12:00 in ${timezone}`;
    },
  });
  return both ? { get_weather: getWeather, get_time: getTime } : { get_weather: getWeather };
}

async function chat(args) {
  const r = await generateText({ ...common(args), prompt: GREETING });
  return { text: r.text, finish_reason: r.finishReason };
}

async function stream(args) {
  const r = streamText({ ...common(args), prompt: GREETING, onError: () => {} });
  let text = "";
  for await (const part of r.fullStream) {
    if (part.type === "error") throw part.error; // streamText hands errors to the stream, not to the caller
    if (part.type === "text-delta") text += part.text;
  }
  return { text, finish_reason: await r.finishReason };
}

async function loop(args, both) {
  const calls = [];
  const r = await generateText({ ...common(args), prompt: both ? QUESTION_BOTH : QUESTION, tools: tools(calls, both),
                                 stopWhen: stepCountIs(MAX_STEPS) });
  return { text: r.text, calls, steps: r.steps.length, finish_reason: r.finishReason };
}

async function structured(args) {
  const r = await generateObject({ ...common(args), maxOutputTokens: MAX_TOKENS_STRUCTURED, schema: Item,
                                   prompt: DESCRIBE, providerOptions: { [PROVIDER]: NO_THINKING } });
  return { parsed: r.object };
}

const FEATURES = {
  chat, stream, tools: (a) => loop(a, false), parallel: (a) => loop(a, true), structured,
  responses: chat, "responses-tools": (a) => loop(a, false),
  messages: chat, "messages-stream": stream, "messages-tools": (a) => loop(a, false),
};

function status(e) {
  for (const key of ["statusCode", "status"]) {
    const v = e?.[key];
    if (Number.isInteger(v) && v >= 100 && v <= 599) return v;
  }
  return undefined;
}

function text(e) {
  let message = String(e?.message ?? e);
  const body = typeof e?.responseBody === "string" ? e.responseBody : "";
  if (body && !message) message = body; // the server's own words, as the Python SDKs show them
  else if (body && !body.includes(message)) message += ` - ${body}`;
  return message.slice(0, MESSAGE_CHARS);
}

// The exception as the client raised it: its class, text, HTTP status; the cause (or a retry's last error) it wraps.
function error(e) {
  const err = { type: e?.constructor?.name || typeof e, message: text(e) };
  const cause = e?.lastError ?? e?.cause;
  const code = status(e) ?? status(cause);
  if (code !== undefined) err.status = code;
  if (cause && cause !== e) err.cause = { type: cause?.constructor?.name || typeof cause, message: text(cause) };
  return err;
}

async function main() {
  const { values: args } = parseArgs({ options: { "base-url": { type: "string" }, model: { type: "string" },
                                                  feature: { type: "string" } } });
  for (const need of ["base-url", "model", "feature"]) {
    if (!args[need]) throw new Error(`--${need} is required`);
  }
  if (!Object.hasOwn(FEATURES, args.feature)) throw new Error(`unknown feature ${JSON.stringify(args.feature)}`);
  const client = `ai ${version("ai")} (${SURFACE[args.feature]} ${version(SURFACE[args.feature])})`;
  let out;
  try {
    out = { ok: true, client, ...(await FEATURES[args.feature](args)) };
  } catch (e) {
    out = { ok: false, client, error: error(e) };
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

await main();
