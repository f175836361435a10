// weft serve --speculative lookup through the official `openai` npm client:
// a greedy completion with drafts has the same text as the same request
// opted out ("speculative": false) and as weft's C++ API without drafts
// (serve_reference); /metrics and /v1/status count the drafts, and an
// opted-out request adds none.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, reference, requireNpm, chat, getJson, parseMetrics } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
let server, client;

before(async () => {
  // --draft-always: every draft the step allows (on a CPU the adaptive cost
  // model may decline them all, and this test needs drafts to count).
  server = await startServer(["--speculative", "lookup", "--draft-max", "6", "--draft-always"]);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
});
after(async () => {
  const r = await server.stop();
  assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + server.log());
});

const metrics = async () => parseMetrics(await (await fetch(server.url + "/metrics")).text());

test("greedy with and without speculation: the same text; the drafts are counted", async () => {
  assert.match(server.log(), /speculative decoding lookup, at most 6 draft tokens a step \(always\)/);
  // Greedy over a few tokens far above the rest: the reply repeats itself,
  // so lookup has something to copy (the model's logits still choose).
  const logit_bias = Object.fromEntries([300, 301, 302, 303, 304].map((t) => [String(t), 30]));
  const req = chat("Tell me about the forge.", { temperature: 0, max_tokens: 40, logit_bias });
  const m0 = await metrics();
  assert.equal(m0.weft_tokens_drafted_total, 0);
  assert.equal(m0.weft_drafts_accepted_total, 0);

  const plain = await client.chat.completions.create({ ...req, speculative: false });
  const m1 = await metrics();
  assert.equal(m1.weft_tokens_drafted_total, 0, "an opted-out request drafts nothing");
  assert.equal(plain.usage.completion_tokens, 40);

  const spec = await client.chat.completions.create(req);
  const m2 = await metrics();
  assert.equal(spec.choices[0].message.content, plain.choices[0].message.content);
  assert.equal(spec.usage.completion_tokens, 40);
  const ref = reference({ messages: req.messages, max_tokens: req.max_tokens, temperature: 0, seed: req.seed, logit_bias });
  assert.equal(spec.choices[0].message.content, ref.text, "the C++ API without drafts");
  assert.ok(m2.weft_tokens_drafted_total > 0, JSON.stringify(m2));
  assert.ok(m2.weft_drafts_accepted_total > 0 && m2.weft_drafts_accepted_total <= m2.weft_tokens_drafted_total);
  assert.ok(m2.weft_tokens_decoded_total - m1.weft_tokens_decoded_total < 40 + m2.weft_tokens_drafted_total + 64,
    "drafts are counted in the tokens decoded");

  const status = (await getJson(server.url + "/v1/status")).body;
  assert.equal(status.tokens_drafted, m2.weft_tokens_drafted_total);
  assert.equal(status.drafts_accepted, m2.weft_drafts_accepted_total);

  // Streamed, the same text.
  let text = "";
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
    text += ch.choices[0]?.delta?.content ?? "";
  }
  assert.equal(text, plain.choices[0].message.content);
});

test("\"speculative\" must be a boolean", async () => {
  await assert.rejects(client.chat.completions.create({ ...chat("Hi."), speculative: "yes" }),
    (e) => e.status === 400 && /'speculative' must be true or false/.test(e.message));
});
