// weft serve's POST /v1/embeddings through the official `openai` npm client
// (client.embeddings.create), on the generated embedding model (embed.gguf:
// non-causal, mean pooling) and on the chat model's own pooled states
// (--embeddings). Each vector is compared with the same input embedded alone
// straight on weft's C++ API (serve_reference), and usage with the tokens the
// library decoded for it. Also: base64, batches, token inputs, each refusal,
// keys, metrics, a client that goes away, and embeddings while a chat streams.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { startServer, reference, requireNpm, env, chat, getJson, parseMetrics, waitFor } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
const EMBED_MODEL = path.join(path.dirname(env.model), "embed.gguf");
const KEY = "embeddings-test-key-0123456789";
let server, client;

before(async () => {
  server = await startServer(["--embedding-model", EMBED_MODEL, "--api-key", KEY]);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: KEY, maxRetries: 0, timeout: 60000 });
});
after(async () => {
  const r = await server.stop();
  assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + server.log());
});

const TEXTS = ["the blacksmith sells silver swords to travellers at dawn", "a wolf in the north forest",
  "bread", "the mayor owes three gold coins to the baker", "a key hidden under the anvil"];
// Each input embedded alone on the C++ API: {n_embd, vectors, tokens}; each
// request run once (a run loads the models: seconds under TSan).
const refRuns = new Map();
function refEmbed(inputs, extra = { embedding_model: EMBED_MODEL }) {
  const req = { embed: inputs, ...extra };
  const k = JSON.stringify(req);
  if (!refRuns.has(k)) refRuns.set(k, reference(req));
  return refRuns.get(k);
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
// The floats of OpenAI's base64: little-endian float32.
function fromBase64(s) {
  const b = Buffer.from(s, "base64");
  const dv = new DataView(b.buffer, b.byteOffset, b.length);
  return Array.from({ length: b.length / 4 }, (_, i) => dv.getFloat32(4 * i, true));
}
const post = (body, key = KEY) => getJson(server.url + "/v1/embeddings", {
  method: "POST", body: JSON.stringify(body),
  headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) } });

test("each vector has the model's width, unit length, and equals the text embedded alone on the C++ API", async () => {
  const ref = refEmbed(TEXTS);
  assert.equal(ref.n_embd, 64);
  const models = await client.models.list();
  const entry = models.data.find((m) => m.id === "embed");
  assert.ok(entry, "/v1/models lists the embedding model");
  assert.equal(entry.meta.embeddings.n_embd, ref.n_embd);
  const seen = [];
  for (const [i, text] of TEXTS.entries()) {
    const r = await client.embeddings.create({ model: "embed", input: text, encoding_format: "float" });
    assert.equal(r.object, "list");
    assert.equal(r.model, "embed");
    assert.equal(r.data.length, 1);
    assert.equal(r.data[0].object, "embedding");
    assert.equal(r.data[0].index, 0);
    const v = r.data[0].embedding;
    assert.equal(v.length, ref.n_embd);
    assert.ok(Math.abs(norm(v) - 1) < 1e-5, `|v| = ${norm(v)}`);
    // Alone on an idle server the text decodes as the library decodes it alone: the same floats.
    assert.deepEqual(v.map(Math.fround), ref.vectors[i], `text ${i}`);
    // usage counts what the library decoded (BOS/EOS included).
    assert.equal(r.usage.prompt_tokens, ref.tokens[i], `text ${i}`);
    assert.equal(r.usage.total_tokens, ref.tokens[i]);
    seen.push(v);
  }
  // Different texts are different vectors (so the comparisons above could fail).
  for (let i = 0; i < seen.length; ++i)
    for (let j = 0; j < i; ++j) assert.ok(dot(seen[i], seen[j]) < 0.999, `texts ${i} and ${j}`);
  // The same text again: the same vector, bit for bit.
  const again = await client.embeddings.create({ model: "embed", input: TEXTS[0], encoding_format: "float" });
  assert.deepEqual(again.data[0].embedding, seen[0]);
});

test("a batch answers every input at its index, each as the text alone", async () => {
  const ref = refEmbed(TEXTS);
  const r = await client.embeddings.create({ model: "embed", input: TEXTS, encoding_format: "float" });
  assert.deepEqual(r.data.map((d) => d.index), TEXTS.map((_, i) => i));
  assert.equal(r.usage.prompt_tokens, ref.tokens.reduce((a, b) => a + b, 0));
  for (const [i, d] of r.data.entries()) {
    // Decoded beside the others: equal up to the order of float sums.
    assert.ok(maxDiff(d.embedding, ref.vectors[i]) < 1e-4, `input ${i}: ${maxDiff(d.embedding, ref.vectors[i])}`);
    // ...and nearest to its own text's vector, not another's.
    const best = ref.vectors.map((w) => dot(d.embedding, w)).reduce((b, x, j, a) => (x > a[b] ? j : b), 0);
    assert.equal(best, i);
  }
});

test("base64 (the client's default, decoded by it, and asked for) is the same floats as float", async () => {
  const input = [TEXTS[1], TEXTS[3]];
  const f = await client.embeddings.create({ model: "embed", input, encoding_format: "float" });
  const byClient = await client.embeddings.create({ model: "embed", input });  // sends base64, decodes
  const b64 = await client.embeddings.create({ model: "embed", input, encoding_format: "base64" });
  for (let i = 0; i < input.length; ++i) {
    const floats = f.data[i].embedding.map(Math.fround);
    assert.equal(typeof b64.data[i].embedding, "string");
    assert.equal(Buffer.from(b64.data[i].embedding, "base64").length, 4 * floats.length);
    assert.deepEqual(fromBase64(b64.data[i].embedding), floats);
    assert.deepEqual(Array.from(byClient.data[i].embedding), floats);
  }
});

test("token inputs: an array of ids, and an array of id arrays, used as given", async () => {
  const ids = [[1, 450, 2901, 77, 3], [12, 13], [900]];
  const ref = refEmbed(ids);
  const one = await client.embeddings.create({ model: "embed", input: ids[0], encoding_format: "float" });
  assert.equal(one.data.length, 1);
  assert.deepEqual(one.data[0].embedding.map(Math.fround), ref.vectors[0]);
  assert.equal(one.usage.prompt_tokens, ids[0].length);
  assert.equal(ref.tokens[0], ids[0].length);  // the library adds nothing to token inputs either
  const many = await client.embeddings.create({ model: "embed", input: ids, encoding_format: "float" });
  assert.equal(many.data.length, ids.length);
  assert.equal(many.usage.prompt_tokens, 8);
  for (const [i, d] of many.data.entries()) assert.ok(maxDiff(d.embedding, ref.vectors[i]) < 1e-4, `input ${i}`);
});

test("bad input is 400 with OpenAI's error shape, and the server carries on", async () => {
  const nVocab = (await client.models.list()).data.find((m) => m.id === "embed").meta.n_vocab;
  const long = "silver ".repeat(700);
  const cases = [
    [{ input: "" }, 400, "input", "invalid_value", /'input' must not be an empty string/],
    [{ input: [] }, 400, "input", "invalid_value", /'input' must not be an empty array/],
    [{ input: ["a", ""] }, 400, "input", "invalid_value", /'input\[1\]' must not be an empty string/],
    [{ input: ["a", 3] }, 400, "input", "invalid_type", /'input\[1\]' must be a string/],
    [{ input: [5, "a"] }, 400, "input", "invalid_type", /'input\[1\]' must be a token id/],
    [{ input: [[5], []] }, 400, "input", "invalid_value", /'input\[1\]' must not be an empty array/],
    [{ input: { text: "a" } }, 400, "input", "invalid_type", /'input' must be a string, an array of strings/],
    [{ input: [nVocab] }, 400, "input", "invalid_value", new RegExp(`'input\\[0\\]' is ${nVocab}; token ids must be in \\[0, ${nVocab}\\)`)],
    [{ input: long }, 400, "input", "context_length_exceeded", /^'input' is \d+ tokens; this server embeds at most 512 tokens per input \(--embedding-ctx\)$/],
    [{ input: ["short", long] }, 400, "input", "context_length_exceeded", /'input\[1\]' is \d+ tokens; .* at most 512 /],
    [{ input: Array(2049).fill("a") }, 400, "input", "invalid_value", /'input' has 2049 inputs; at most 2048/],
    [{ input: "a", dimensions: 32 }, 400, "dimensions", "invalid_value", /'dimensions' is 32; `embed` gives vectors of 64 floats only/],
    [{ input: "a", encoding_format: "int8" }, 400, "encoding_format", "invalid_value", /expected float or base64/],
    [{ input: "a", model: "tiny" }, 404, "model", "model_not_found", /this server embeds with `embed`/],
  ];
  for (const [body, status, param, code, message] of cases) {
    const what = JSON.stringify(body).slice(0, 80);
    await assert.rejects(client.embeddings.create({ model: "embed", encoding_format: "float", ...body }), (e) => {
      assert.equal(e.status, status, what);
      assert.equal(e.param, param, what);
      assert.equal(e.code, code, what);
      assert.match(e.error.message, message, what);
      return true;
    });
  }
  // Without the model field, and without a key.
  const noModel = await post({ input: "a" });
  assert.equal(noModel.status, 400);
  assert.equal(noModel.body.error.code, "missing_required_parameter");
  const noKey = await post({ model: "embed", input: "a" }, null);
  assert.equal(noKey.status, 401);
  assert.equal(noKey.body.error.code, "invalid_api_key");
  // dimensions equal to the width is taken; the server still answers as before.
  const ok = await client.embeddings.create({ model: "embed", input: TEXTS[0], dimensions: 64, encoding_format: "float" });
  assert.deepEqual(ok.data[0].embedding.map(Math.fround), refEmbed(TEXTS).vectors[0]);
});

test("embeddings requests are answered while a chat completion streams; both finish", async () => {
  const ref = refEmbed(TEXTS);  // first: it blocks this process while it runs
  const req = chat("Tell me a long story about the forge.", { max_tokens: 200, ignore_eos: true, stream: true });
  const stream = await client.chat.completions.create(req);
  let text = "", chunks = 0, finish = null, atEmbedded = -1, embedding = null;
  for await (const c of stream) {
    ++chunks;
    text += c.choices[0]?.delta?.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
    // Once the stream runs: four embeddings requests at once, the chunk count noted when all are answered.
    if (chunks === 2)
      embedding = Promise.all([0, 1, 2, 3].map((k) =>
        client.embeddings.create({ model: "embed", input: TEXTS.slice(k, k + 2), encoding_format: "float" })))
        .then((r) => { atEmbedded = chunks; return r; });
  }
  const batches = await embedding;
  assert.equal(finish, "length");
  assert.ok(text.length > 0);
  for (const [k, r] of batches.entries())
    for (const [i, d] of r.data.entries()) assert.ok(maxDiff(d.embedding, ref.vectors[k + i]) < 1e-4, `batch ${k}, ${i}`);
  // The vectors came while the generation still ran: no request waits for another.
  assert.ok(atEmbedded > 0 && atEmbedded < chunks, `embedded at chunk ${atEmbedded} of ${chunks}`);
});

test("a client that goes away cancels its embedding; metrics and status count the rest", async () => {
  const metrics = async () => parseMetrics((await getJson(server.url + "/metrics",
    { headers: { authorization: `Bearer ${KEY}` } })).body);
  const status = async () => (await getJson(server.url + "/v1/status", { headers: { authorization: `Bearer ${KEY}` } })).body;
  const m0 = await metrics();
  // Counted requests: one of three texts.
  const r = await client.embeddings.create({ model: "embed", input: TEXTS.slice(0, 3), encoding_format: "float" });
  // The executor counts a step's texts once the step's decode has handed out
  // their vectors, so its figures may trail the reply by a moment.
  const m1 = await waitFor(async () => {
    const m = await metrics();
    return m.weft_texts_embedded_total >= m0.weft_texts_embedded_total + 3 ? m : null;
  }, 10000, "the executor to count the texts");
  assert.equal(m1.weft_embedding_requests_total, m0.weft_embedding_requests_total + 1);
  assert.equal(m1.weft_embedding_inputs_total, m0.weft_embedding_inputs_total + 3);
  assert.equal(m1.weft_embedding_tokens_total, m0.weft_embedding_tokens_total + r.usage.prompt_tokens);
  assert.equal(m1.weft_texts_embedded_total, m0.weft_texts_embedded_total + 3);
  assert.equal(m1.weft_embed_tokens_total, m0.weft_embed_tokens_total + r.usage.prompt_tokens);
  assert.equal(m1["weft_http_requests_total{route=\"POST /v1/embeddings\",code=\"200\"}"],
    (m0["weft_http_requests_total{route=\"POST /v1/embeddings\",code=\"200\"}"] ?? 0) + 1);
  const s1 = await status();
  assert.equal(s1.embeddings.model, "embed");
  assert.equal(s1.embeddings.requests, m1.weft_embedding_requests_total);
  assert.equal(s1.embeddings.texts_embedded, m1.weft_texts_embedded_total);

  // 256 texts of ~500 tokens: half a minute of decoding (a 500-token text every other step).
  const many = Array.from({ length: 256 }, (_, i) => `${i} ` + "the river gate at dawn ".repeat(99));
  const abort = new AbortController();
  const gone = fetch(server.url + "/v1/embeddings", { method: "POST", signal: abort.signal,
    headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: "embed", input: many }) }).catch((e) => e);
  await waitFor(async () => (await status()).embeddings.active === 1, 30000, "the embedding to be queued");
  abort.abort();
  assert.equal((await gone).name, "AbortError");
  const m2 = await waitFor(async () => {
    const m = await metrics();
    return m.weft_embedding_disconnects_total === m1.weft_embedding_disconnects_total + 1 &&
      m.weft_embed_pending === 0 && m.weft_active_embeddings === 0 ? m : null;
  }, 30000, "the embedding to be cancelled");
  assert.ok(m2.weft_texts_embedded_total - m1.weft_texts_embedded_total < many.length, "the rest was dropped");
  assert.equal(m2.weft_embedding_requests_total, m1.weft_embedding_requests_total);
  // The server carries on.
  const after = await client.embeddings.create({ model: "embed", input: TEXTS[2], encoding_format: "float" });
  assert.deepEqual(after.data[0].embedding.map(Math.fround), refEmbed(TEXTS).vectors[2]);
});

test("--embeddings: the chat model's own pooled states, as the library makes them", async () => {
  const s = await startServer(["--embeddings", "--pooling", "last", "--embedding-ctx", "64"]);
  try {
    const c = new OpenAI({ baseURL: s.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
    const models = await c.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);
    assert.deepEqual(models.data[0].meta.embeddings, { n_embd: 64, n_ctx: 64, pooling: "last" });
    const ref = refEmbed(TEXTS.slice(0, 2), { pooling: "last", embedding_ctx: 64 });
    const other = refEmbed(TEXTS);  // the embedding model's vectors of the same texts
    for (const [i, text] of TEXTS.slice(0, 2).entries()) {
      const r = await c.embeddings.create({ model: "tiny", input: text, encoding_format: "float" });
      assert.equal(r.data[0].embedding.length, ref.n_embd);
      assert.deepEqual(r.data[0].embedding.map(Math.fround), ref.vectors[i]);
      assert.equal(r.usage.prompt_tokens, ref.tokens[i]);
    }
    const r0 = await c.embeddings.create({ model: "tiny", input: TEXTS[0] });
    assert.ok(maxDiff(Array.from(r0.data[0].embedding), other.vectors[0]) > 1e-3, "not the embedding model's");
    await assert.rejects(c.embeddings.create({ model: "tiny", input: "word ".repeat(80) }),
      (e) => e.status === 400 && e.code === "context_length_exceeded" && /at most 64 tokens/.test(e.error.message));
  } finally {
    assert.equal((await s.stop()).code, 0, s.log());
  }
});

test("without --embedding-model or --embeddings the route says how to turn embeddings on", async () => {
  const s = await startServer();
  try {
    const c = new OpenAI({ baseURL: s.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
    await assert.rejects(c.embeddings.create({ model: "tiny", input: "hello" }), (e) => {
      assert.equal(e.status, 404);
      assert.equal(e.code, "embeddings_disabled");
      assert.match(e.error.message, /--embedding-model PATH/);
      assert.match(e.error.message, /--embeddings/);
      return true;
    });
    const st = (await getJson(s.url + "/v1/status")).body;
    assert.equal(st.embeddings, null);
    // Chat still works there.
    const r = await c.chat.completions.create(chat("Hello"));
    assert.equal(r.object, "chat.completion");
  } finally {
    assert.equal((await s.stop()).code, 0, s.log());
  }
  // --pooling alone is refused at start, naming what it needs.
  await assert.rejects(startServer(["--pooling", "cls"]), /--embedding-ctx and --pooling need --embedding-model PATH or --embeddings/);
});
