// weft serve through the official `openai` npm client: chat completions,
// streaming, stop strings, JSON schema, logit bias, errors, concurrent streams (tools:
// tools.test.mjs) — each
// result compared with the same request run straight on weft's C++ API
// (serve_reference), for the same seed.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, reference, requireNpm, chat } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
});
// `fn(client)` against a server of its own, for comparisons that must be
// exact: on a server that has answered other requests a new conversation's
// KV cells sit after the cached prefixes, attention sums in another order,
// and on AVX-512 CPUs that moved logprobs by 3e-5 and flipped an XTC draw.
// A fresh server places them as serve_reference does (measured: equal).
async function onFreshServer(fn) {
  const s = await startServer();
  try {
    return await fn(new OpenAI({ baseURL: s.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 }));
  } finally {
    assert.equal((await s.stop()).code, 0, s.log());
  }
}
after(async () => {
  const r = await server.stop();
  assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + server.log());
});

// Exact comparisons sample without top_p: top_p sorts the candidates by
// probability, and a random model's near-uniform distribution over 32000
// tokens has near-ties whose order flips with the last-bit differences of
// another KV-cell placement. The plain distribution draws in vocabulary
// order, where such noise does not move the draw.
// The reference reads the same fields, minus what it does not need.
const refOf = (req) => reference({ messages: req.messages, max_tokens: req.max_tokens, temperature: req.temperature,
  top_p: req.top_p, seed: req.seed, ...(req.stop ? { stop: req.stop } : {}),
  ...(req.logit_bias ? { logit_bias: req.logit_bias } : {}),
  ...(req.logprobs ? { logprobs: true, top_logprobs: req.top_logprobs ?? 0 } : {}),
  ...Object.fromEntries(Object.entries(req).filter(([k]) => LLAMA_SAMPLING.includes(k))) });
// llama-server's sampling fields beyond OpenAI's (the client sends them as given).
const LLAMA_SAMPLING = ["top_k", "min_p", "typical_p", "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base",
  "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta",
  "banned_strings"];

test("models lists the served model", async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ["tiny"]);
});

test("a chat completion equals the executor's own result for the seed", async () => {
  const req = chat("Tell me about the forge.");
  const r = await client.chat.completions.create(req);
  const ref = refOf(req);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.finish_reason);
  assert.equal(r.usage.prompt_tokens, ref.prompt_tokens);
  assert.equal(r.usage.completion_tokens, ref.completion_tokens);
  assert.equal(r.usage.total_tokens, ref.prompt_tokens + ref.completion_tokens);
  // Another seed gives another text (the seed reaches the sampler).
  const other = await client.chat.completions.create({ ...req, seed: 12 });
  assert.equal(other.choices[0].message.content, refOf({ ...req, seed: 12 }).text);
  assert.notEqual(other.choices[0].message.content, r.choices[0].message.content);
});

test("top_p reaches the sampler: a tiny nucleus is the greedy choice", async () => {
  const greedy = refOf(chat("Any rumours?", { temperature: 0, max_tokens: 12 })).text;
  const hot = { temperature: 1.5, seed: 4, max_tokens: 12 };
  const nucleus = await client.chat.completions.create(chat("Any rumours?", { ...hot, top_p: 1e-9 }));
  assert.equal(nucleus.choices[0].message.content, greedy);
  const wide = await client.chat.completions.create(chat("Any rumours?", hot));
  assert.notEqual(wide.choices[0].message.content, greedy);
});

test("streaming sends the same text as deltas, then usage", async () => {
  const req = chat("What do you sell?", { seed: 5, max_tokens: 20 });
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, chunks = 0, role = null;
  for await (const ch of stream) {
    chunks++;
    assert.equal(ch.object, "chat.completion.chunk");
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const ref = refOf(req);
  assert.equal(role, "assistant");
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(text, ref.text);
  assert.equal(finish, ref.finish_reason);
  assert.deepEqual(usage, { prompt_tokens: ref.prompt_tokens, completion_tokens: ref.completion_tokens,
    total_tokens: ref.prompt_tokens + ref.completion_tokens });
});

test("completions: raw prompt text, streamed and not", async () => {
  const req = { model: "tiny", prompt: "Once upon a time", max_tokens: 12, temperature: 0.7, seed: 3 };
  const ref = reference({ prompt: req.prompt, max_tokens: 12, temperature: 0.7, seed: 3 });
  const r = await client.completions.create(req);
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, ref.text);
  assert.equal(r.usage.prompt_tokens, ref.prompt_tokens);
  let text = "";
  for await (const ch of await client.completions.create({ ...req, stream: true })) text += ch.choices[0]?.text ?? "";
  assert.equal(text, ref.text);
});

test("stop strings cut the text where the executor's text first has them", async () => {
  const base = chat("Describe the town.", { temperature: 0, max_tokens: 24 });
  const full = refOf(base).text;
  // A stop string from the middle of the greedy text (not the first piece).
  const at = Math.floor(full.length / 2);
  const stop = full.slice(at, at + 3);
  assert.ok(stop.trim().length > 0 && full.length > 8, `unusable greedy text ${JSON.stringify(full)}`);
  const r = await client.chat.completions.create({ ...base, stop: [stop, "\u0001never"] });
  assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
  let text = "";
  for await (const ch of await client.chat.completions.create({ ...base, stop, stream: true }))
    text += ch.choices[0]?.delta?.content ?? "";
  assert.equal(text, full.slice(0, full.indexOf(stop)));
});

test("response_format json_schema: the reply parses and fits the schema", async () => {
  const schema = { type: "object", additionalProperties: false, required: ["mood", "level", "armed"],
    properties: { mood: { enum: ["calm", "angry", "sly"] }, level: { type: "integer" }, armed: { type: "boolean" } } };
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create(chat("Report.", { seed, max_tokens: 120,
      response_format: { type: "json_schema", json_schema: { name: "npc", schema, strict: true } } }));
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, "stop", text);
    const v = JSON.parse(text);
    assert.deepEqual(Object.keys(v).sort(), ["armed", "level", "mood"]);
    assert.ok(["calm", "angry", "sly"].includes(v.mood), text);
    assert.ok(Number.isInteger(v.level), text);
    assert.equal(typeof v.armed, "boolean");
  }
  // Without the schema the same seed's text is not JSON (the grammar did the work).
  const plain = await client.chat.completions.create(chat("Report.", { seed: 1, max_tokens: 30 }));
  assert.throws(() => JSON.parse(plain.choices[0].message.content));
});

test("logit_bias: +100 forces a token, -100 bans one, a bias at a temperature is the executor's", async () => {
  const greedy = chat("Any rumours?", { temperature: 0, max_tokens: 6 });
  const plain = refOf(greedy);
  // A token the model writes itself (so its text is printable), forced at every step.
  const forced = plain.completion_token_ids[2];
  const req = { ...greedy, logit_bias: { [String(forced)]: 100 } };
  const ref = refOf(req);
  assert.deepEqual(ref.completion_token_ids, Array(6).fill(forced));
  const r = await client.chat.completions.create(req);
  assert.equal(r.choices[0].message.content, ref.text);
  assert.ok(ref.text.length > 0);
  assert.notEqual(r.choices[0].message.content, plain.text);
  // -100 bans the greedy first token: the reply starts elsewhere.
  const first = plain.completion_token_ids[0];
  const banned = { ...greedy, logit_bias: { [String(first)]: -100 } };
  const refBanned = refOf(banned);
  assert.notEqual(refBanned.completion_token_ids[0], first);
  const rb = await client.chat.completions.create(banned);
  assert.equal(rb.choices[0].message.content, refBanned.text);
  // At a temperature, several biases: the executor's draw for the seed.
  const hot = chat("Tell me about the forge.", { logit_bias: { [String(forced)]: 3.5, "17": -100, "100": -2 } });
  const rh = await client.chat.completions.create(hot);
  assert.equal(rh.choices[0].message.content, refOf(hot).text);
  assert.notEqual(rh.choices[0].message.content, refOf(chat("Tell me about the forge.")).text);
});

test("logprobs: each token's and the top alternatives are the executor's, streamed or not", async () => {
  const req = chat("Tell me about the forge.", { logprobs: true, top_logprobs: 3, max_tokens: 10 });
  const ref = refOf(req);
  const r = await onFreshServer((fresh) => fresh.chat.completions.create(req));
  assert.equal(r.choices[0].message.content, ref.text);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, ref.completion_tokens);
  // The same tokens, in the same order, with the same values (a fresh
  // server: see onFreshServer).
  let worst = 0;
  for (const [i, e] of content.entries()) {
    const want = ref.logprobs[i];
    assert.ok(e.logprob <= 0);
    worst = Math.max(worst, Math.abs(e.logprob - want.logprob));
    assert.equal(e.top_logprobs.length, 3);
    for (const [k, t] of e.top_logprobs.entries()) {
      worst = Math.max(worst, Math.abs(t.logprob - want.top[k][1]));
      if (k > 0) assert.ok(e.top_logprobs[k - 1].logprob >= t.logprob);
    }
  }
  console.log(`# logprobs: largest difference from the executor's ${worst.toExponential(2)}`);
  assert.ok(worst < 1e-5, `logprobs differ by ${worst}`);
  assert.deepEqual(Buffer.concat(content.map((e) => Buffer.from(e.bytes))).toString("utf8"), ref.text);
  // Streamed: the text as before, every token's logprobs in the last chunk.
  const chunks = [];
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) chunks.push(ch);
  const withLp = chunks.filter((ch) => ch.choices[0]?.logprobs);
  assert.equal(withLp.length, 1);
  assert.ok(withLp[0].choices[0].finish_reason);
  assert.deepEqual(withLp[0].choices[0].logprobs.content.map((e) => e.bytes), content.map((e) => e.bytes));
  // Without logprobs: null, as OpenAI answers.
  const plain = await client.chat.completions.create(chat("Tell me about the forge."));
  assert.equal(plain.choices[0].logprobs, null);
  // Legacy completions: logprobs is how many alternatives.
  const cr = await client.completions.create({ model: "tiny", prompt: "The forge", max_tokens: 5, temperature: 0, logprobs: 2 });
  const lp = cr.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, 5);
  for (const [i, top] of lp.top_logprobs.entries()) {
    assert.equal(Object.keys(top).length <= 2, true);
    assert.equal(Math.max(...Object.values(top)), lp.token_logprobs[i], "greedy takes the most likely");
  }
});

test("llama-server's sampling fields (top_k, min_p, typical_p, XTC, DRY, mirostat) and banned_strings reach the sampler as the executor's", async () => {
  const base = chat("Tell me about the forge.", { max_tokens: 24 });
  const plain = refOf(base).text;
  const points = Array.from(plain);  // code points: no half of a surrogate pair
  const ban = points.slice(Math.floor(points.length / 2), Math.floor(points.length / 2) + 2).join("");
  const variants = [
    { banned_strings: [ban] },
    { top_k: 40, min_p: 0.01, typical_p: 0.9 },
    { xtc_probability: 0.8, xtc_threshold: 0.0005 },
    { temperature: 0, dry_multiplier: 2.0, dry_allowed_length: 1, dry_sequence_breakers: ["."] },
    { mirostat: 2, mirostat_tau: 3.0, mirostat_eta: 0.2 },
  ];
  for (const v of variants) {
    const req = { ...base, ...v };
    const ref = refOf(req);
    const r = await onFreshServer((fresh) => fresh.chat.completions.create(req));
    assert.equal(r.choices[0].message.content, ref.text, JSON.stringify(v));
    if (v.temperature === undefined) assert.notEqual(ref.text, plain, `${JSON.stringify(v)} changes the draw`);
    if (v.banned_strings) assert.ok(!r.choices[0].message.content.includes(ban), r.choices[0].message.content);
  }
});

test("errors: OpenAI's shape and status codes", async () => {
  const expectError = async (req, status, param, code) => {
    await assert.rejects(client.chat.completions.create(req), (e) => {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, status, e.message);
      if (param !== undefined) assert.equal(e.param, param, e.message);
      if (code !== undefined) assert.equal(e.code, code, e.message);
      return true;
    });
  };
  await expectError({ ...chat("x"), model: "gpt-4o" }, 404, "model", "model_not_found");
  await expectError(chat("x", { temperature: 5 }), 400, "temperature");
  await expectError(chat("x", { top_logprobs: 2 }), 400, "top_logprobs");
  await expectError(chat("x", { mirostat: 1 }), 400, "mirostat");
  const fn = (name, parameters) => ({ type: "function", function: { name, parameters } });
  await expectError(chat("x", { tools: [fn("give item")] }), 400, "tools");
  await expectError(chat("x", { tools: [fn("a", { type: "string" })] }), 400, "tools");
  await expectError(chat("x", { tools: [fn("a")], tool_choice: { type: "function", function: { name: "b" } } }), 400, "tool_choice");
  await expectError(chat("x", { tool_choice: "required" }), 400, "tool_choice");
  await expectError(chat("x", { typical_p: 0 }), 400, "typical_p");
  await expectError(chat("x", { dry_sequence_breakers: [""] }), 400, "dry_sequence_breakers");
  await expectError(chat("x", { banned_strings: ["a", 3] }), 400, "banned_strings");
  await expectError(chat("x", { logprobs: true, top_logprobs: 21 }), 400, "top_logprobs");
  await expectError(chat("x", { top_p: 0 }), 400, "top_p");
  await expectError(chat("x", { max_tokens: "many" }), 400, "max_tokens", "invalid_type");
  await expectError(chat("x", { max_tokens: 0 }), 400, "max_tokens");
  await expectError(chat("x", { max_tokens: 1 << 20 }), 400, "max_tokens", "max_tokens_exceeded");
  await expectError(chat("x", { n: 2 }), 400, "n");
  await expectError(chat("x", { stop: ["a", "b", "c", "d", "e"] }), 400, "stop");
  await expectError({ model: "tiny", messages: [] }, 400, "messages");
  await expectError({ model: "tiny", messages: [{ role: "user", content: 7 }] }, 400, "messages[0].content");
  await expectError(chat("x", { response_format: { type: "xml" } }), 400, "response_format");
  // logit_bias: a key that is no token id, a bias outside [-100, 100], not a number, not an object.
  for (const [bias, message, code] of [
    [{ abc: 1 }, "'logit_bias' key 'abc' is not a token id in [0, ", "invalid_value"],
    [{ "99999999": 1 }, "'logit_bias' key '99999999' is not a token id in [0, ", "invalid_value"],
    [{ "-1": 1 }, "'logit_bias' key '-1' is not a token id in [0, ", "invalid_value"],
    [{ "5": 101 }, "'logit_bias[\"5\"]' is 101; it must be in [-100, 100]", "invalid_value"],
    [{ "5": -100.5 }, "'logit_bias[\"5\"]' is -100.5; it must be in [-100, 100]", "invalid_value"],
    [{ "5": "high" }, "'logit_bias[\"5\"]' must be a number, not \"high\"", "invalid_type"],
    [[1, 2], "'logit_bias' must be an object of token ids to numbers, not [1,2]", "invalid_type"],
  ]) {
    await assert.rejects(client.chat.completions.create(chat("x", { logit_bias: bias })), (e) => {
      assert.equal(e.status, 400, e.message);
      assert.equal(e.param, "logit_bias", e.message);
      assert.equal(e.code, code, e.message);
      assert.ok(e.message.includes(message), e.message);
      return true;
    });
  }
  // A schema libweft's converter refuses; the message says where.
  await assert.rejects(client.chat.completions.create(chat("x", { response_format: { type: "json_schema",
    json_schema: { name: "n", schema: { type: "object", properties: { a: { type: "strin" } } } } } })), (e) => {
    assert.equal(e.status, 400, e.message);
    assert.equal(e.param, "response_format", e.message);
    assert.equal(e.code, "unsupported_schema", e.message);
    assert.match(e.message, /JSON schema at #\/properties\/a\/type: unknown type 'strin'/);
    return true;
  });
  await expectError(chat("word ".repeat(1500)), 400, undefined, "context_length_exceeded");
  // The server still answers.
  const r = await client.chat.completions.create(chat("still there?", { max_tokens: 2 }));
  assert.equal(r.usage.completion_tokens, 2);
});

test("concurrent streams each finish with the executor's text", async () => {
  // Greedy: the tiny model's batch-composition noise (normalised MSE ~2e-7,
  // docs/EXECUTOR.md) is far below its top-two logit gaps on these prompts,
  // so sharing batches does not change a greedy choice.
  const reqs = ["Greetings.", "Any work?", "Farewell.", "Who rules here?", "A sword, please."].map((q, i) =>
    chat(q, { temperature: 0, max_tokens: 24 + 4 * i }));
  const t0 = Date.now();
  const results = await Promise.all(reqs.map(async (req) => {
    let text = "", finish = null, deltas = 0;
    for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
      const c = ch.choices[0];
      if (c?.delta?.content) { text += c.delta.content; deltas++; }
      if (c?.finish_reason) finish = c.finish_reason;
    }
    return { text, finish, deltas };
  }));
  const ms = Date.now() - t0;
  results.forEach((r, i) => {
    const ref = refOf(reqs[i]);
    assert.equal(r.text, ref.text, `stream ${i}`);
    assert.equal(r.finish, ref.finish_reason, `stream ${i}`);
    assert.ok(r.deltas > 1, `stream ${i} came in one piece`);
  });
  assert.ok(ms < 30000, `five short streams took ${ms} ms`);
});
