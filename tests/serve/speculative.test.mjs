// weft serve --speculative lookup through the official `openai` npm client:
// a greedy completion with drafts has the same text as the same request
// opted out ("speculative": false) and as weft's C++ API without drafts
// (serve_reference); /metrics and /v1/status count the drafts, and an
// opted-out request adds none. Then --draft-model with the test model as
// its own draft model: the same text with and without drafts, the draft
// model's tokens and seconds counted; flags that cannot work are refused.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, reference, requireNpm, chat, getJson, parseMetrics, env } from "./helpers.mjs";

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

test("--draft-model: the model drafting for itself gives the same text; its work is counted", async () => {
  // A second server (the first keeps its own counts): model is the default
  // drafter with --draft-model; --draft-p-min 0 drafts --draft-max tokens.
  const ds = await startServer(["--draft-model", env.model, "--draft-max", "4", "--draft-always", "--draft-ctx", "512",
    "--draft-p-min", "0"]);
  try {
    assert.match(ds.log(), /speculative decoding model \(\S+, .*; 512 cells, p_min 0\), at most 4 draft tokens a step \(always\)/);
    const dc = new OpenAI({ baseURL: ds.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
    const dm = async () => parseMetrics(await (await fetch(ds.url + "/metrics")).text());
    // As above; the draft model picks with the request's logit biases too.
    const logit_bias = Object.fromEntries([300, 301, 302, 303, 304].map((t) => [String(t), 30]));
    const req = chat("Tell me about the forge.", { temperature: 0, max_tokens: 40, logit_bias });
    const plain = await dc.chat.completions.create({ ...req, speculative: false });
    const m1 = await dm();
    assert.equal(m1.weft_tokens_drafted_total, 0, "an opted-out request drafts nothing");
    assert.equal(m1.weft_draft_model_tokens_total, 0);

    const spec = await dc.chat.completions.create(req);
    assert.equal(spec.choices[0].message.content, plain.choices[0].message.content);
    assert.equal(spec.usage.completion_tokens, 40);
    const ref = reference({ messages: req.messages, max_tokens: req.max_tokens, temperature: 0, seed: req.seed, logit_bias });
    assert.equal(spec.choices[0].message.content, ref.text, "the C++ API without drafts");
    const m2 = await dm();
    assert.ok(m2.weft_tokens_drafted_total > 0, JSON.stringify(m2));
    // Drafting for itself, the draft model is nearly always right.
    assert.ok(m2.weft_drafts_accepted_total * 2 > m2.weft_tokens_drafted_total, JSON.stringify(m2));
    assert.ok(m2.weft_draft_model_tokens_total > 0 && m2.weft_draft_model_seconds_total > 0, JSON.stringify(m2));
    const status = (await getJson(ds.url + "/v1/status")).body;
    assert.equal(status.draft_model_tokens, m2.weft_draft_model_tokens_total);
    assert.ok(status.draft_model_seconds > 0);

    let text = "";
    for await (const ch of await dc.chat.completions.create({ ...req, stream: true })) {
      text += ch.choices[0]?.delta?.content ?? "";
    }
    assert.equal(text, plain.choices[0].message.content, "streamed, the same text");
  } finally {
    const r = await ds.stop();
    assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + ds.log());
  }
});

test("draft flags that cannot work are refused at startup", async () => {
  const refused = async (args, re) => assert.rejects(startServer(args), (e) => re.test(e.message) || assert.fail(e.message));
  await refused(["--speculative", "model"], /--speculative model needs --draft-model PATH/);
  await refused(["--draft-p-min", "0.2"], /--draft-ctx and --draft-p-min need --draft-model PATH/);
  await refused(["--draft-model", env.model, "--speculative", "lookup"],
    /--draft-model with --speculative lookup: the draft model would never draft/);
  await refused(["--draft-model", env.model, "--draft-ctx", "1000000"], /--draft-ctx 1000000 is above the draft model's n_ctx_train/);
});
