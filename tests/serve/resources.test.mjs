// weft serve's own resources and its protections: conversations that fork,
// rewind, save and load over HTTP (checked against weft's equivalences and
// the C++ reference), /metrics, bad input (malformed JSON, wrong types, huge
// bodies, slow clients, a client that leaves mid-stream), the limits, and a
// graceful SIGTERM with a stream running.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, reference, getJson, postJson, readSse, parseMetrics, rawConnect, waitFor, within, sleep }
  from "./helpers.mjs";

test("conversations: create, generate, fork, rewind, save, load, delete", async () => {
  const s = await startServer();
  try {
    const u = s.url + "/v1/conversations";
    const created = await postJson(u, { prefix: "The blacksmith said:" });
    assert.equal(created.status, 201);
    const id = created.body.id;
    assert.equal(created.body.object, "conversation");

    // prompt + generate, greedy: the reference prompts the prefix, decodes
    // it, then the message, as the server does once the prefix is decoded.
    await waitFor(async () => (await getJson(`${u}/${id}`)).body.n_queued === 0, 5000, "the prefix to decode");
    const m = await postJson(`${u}/${id}/messages`, { content: " Welcome", max_tokens: 12, temperature: 0 });
    assert.equal(m.status, 200, JSON.stringify(m.body));
    const ref = reference({ prompts: ["The blacksmith said:", " Welcome"], max_tokens: 12, temperature: 0 });
    assert.equal(m.body.text, ref.text);
    assert.equal(m.body.usage.completion_tokens, 12);
    assert.equal(m.body.finish_reason, "length");

    const info = (await getJson(`${u}/${id}`)).body;
    assert.equal(info.n_tokens, ref.prompt_tokens + 12);
    assert.equal(info.tokens.length, info.n_tokens);
    assert.ok(["resident", "ram", "disk", "recompute"].includes(info.residency));
    await waitFor(async () => (await getJson(`${u}/${id}`)).body.n_cells >= info.n_tokens - 1, 5000, "the cells");

    // Fork: the child has the same tokens; the same message gives the same text.
    const fork = await postJson(`${u}/${id}/fork`, {});
    assert.equal(fork.status, 201);
    const a = await postJson(`${u}/${id}/messages`, { content: " and", max_tokens: 8, temperature: 0 });
    const b = await postJson(`${u}/${fork.body.id}/messages`, { content: " and", max_tokens: 8, temperature: 0 });
    assert.equal(a.body.text, b.body.text);

    // Rewind the last message and its reply: the same message again, the same reply.
    const before = (await getJson(`${u}/${id}`)).body.n_tokens;
    const back = await postJson(`${u}/${id}/rewind`, { n: a.body.usage.prompt_tokens + 8 });
    assert.equal(back.status, 200);
    assert.equal(back.body.n_tokens, before - a.body.usage.prompt_tokens - 8);
    const again = await postJson(`${u}/${id}/messages`, { content: " and", max_tokens: 8, temperature: 0 });
    assert.equal(again.body.text, a.body.text);

    // Save and load under another id: same tokens, same continuation.
    const st = await fetch(`${u}/${id}/state`);
    assert.equal(st.status, 200);
    const bytes = Buffer.from(await st.arrayBuffer());
    assert.ok(bytes.length > 100);
    const put = await getJson(`${u}/restored/state`, { method: "PUT", body: bytes,
      headers: { "content-type": "application/octet-stream" } });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    assert.deepEqual((await getJson(`${u}/restored`)).body.tokens, (await getJson(`${u}/${id}`)).body.tokens);
    const c1 = await postJson(`${u}/${id}/messages`, { content: " so", max_tokens: 6, temperature: 0 });
    const c2 = await postJson(`${u}/restored/messages`, { content: " so", max_tokens: 6, temperature: 0 });
    assert.equal(c1.body.text, c2.body.text);

    // Bad state bytes, bad ids, bad fields.
    const bad = await getJson(`${u}/junk/state`, { method: "PUT", body: Buffer.from("not a state at all"),
      headers: { "content-type": "application/octet-stream" } });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, "corrupt");
    assert.equal((await getJson(`${u}/junk`)).status, 404);
    assert.equal((await postJson(`${u}/${id}/rewind`, { n: "x" })).body.error.param, "n");
    assert.equal((await postJson(`${u}/${id}/rewind`, { n: 1e6 })).status, 400);
    assert.equal((await postJson(u, { id: "bad id!" })).status, 400);
    assert.equal((await postJson(u, { id: fork.body.id })).status, 409);

    // Delete.
    const list = (await getJson(u)).body.data.map((c) => c.id);
    assert.deepEqual(list.sort(), [id, fork.body.id, "restored"].sort());
    assert.equal((await getJson(`${u}/${id}`, { method: "DELETE" })).body.deleted, true);
    assert.equal((await getJson(`${u}/${id}`)).status, 404);
    assert.equal((await getJson(`${u}/${id}`, { method: "DELETE" })).status, 404);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("metrics: counters, residency, the step histogram", async () => {
  const s = await startServer();
  try {
    const c = await postJson(s.url + "/v1/conversations", { prefix: "Hello there" });
    await postJson(`${s.url}/v1/conversations/${c.body.id}/messages`, { content: "!", max_tokens: 10, temperature: 0 });
    const r = await fetch(s.url + "/metrics");
    assert.match(r.headers.get("content-type"), /^text\/plain/);
    const m = parseMetrics(await r.text());
    assert.ok(m.weft_steps_total >= 10, `steps ${m.weft_steps_total}`);
    assert.ok(m.weft_tokens_sampled_total >= 10);
    assert.equal(m.weft_conversations, 1);
    assert.equal(m['weft_conversations_residency{residency="resident"}'], 1);
    assert.equal(m.weft_completion_tokens_total, 10);
    assert.ok(m.weft_kv_cells_used >= 13 && m.weft_kv_cells_used <= m.weft_kv_cells, `cells ${m.weft_kv_cells_used}`);
    const buckets = Object.keys(m).filter((k) => k.startsWith("weft_step_duration_seconds_bucket"));
    assert.equal(buckets.length, 13);
    const counts = buckets.map((k) => m[k]);
    for (let i = 1; i < counts.length; i++) assert.ok(counts[i] >= counts[i - 1], "buckets are cumulative");
    assert.equal(m['weft_step_duration_seconds_bucket{le="+Inf"}'], m.weft_step_duration_seconds_count);
    assert.ok(m.weft_step_duration_seconds_count >= 10 && m.weft_step_duration_seconds_sum > 0);
    assert.equal(m['weft_http_requests_total{route="POST /v1/conversations",code="201"}'], 1);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("bad input and limits: the server refuses it and keeps serving", async () => {
  // 8,000 tokens of `tiny` take ~2.5 s here, far past --timeout (900 took
  // 0.27 s, and once finished inside it).
  const s = await startServer(["--max-conversations", "2", "--max-body-bytes", "4096", "--timeout", "0.3",
    "--read-timeout", "2", "--max-tokens", "8000"], { ctx: 8192 });
  try {
    const chatUrl = s.url + "/v1/chat/completions";
    const raw = (body) => getJson(chatUrl, { method: "POST", headers: { "content-type": "application/json" }, body });
    let r = await raw("{not json");
    assert.equal(r.status, 400);
    assert.equal(r.body.error.code, "invalid_json");
    r = await raw("[1,2]");
    assert.equal(r.status, 400);
    r = await postJson(chatUrl, { model: 5, messages: [] });
    assert.equal(r.body.error.param, "model");
    r = await postJson(chatUrl, { model: "tiny", messages: "hi" });
    assert.equal(r.body.error.param, "messages");
    r = await raw(JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x".repeat(10000) }] }));
    assert.equal(r.status, 413);
    assert.equal(r.body.error.code, "payload_too_large");

    // --timeout: a long generation is cut with 504.
    const conv = (await postJson(s.url + "/v1/conversations", { prefix: "A" })).body.id;
    r = await postJson(`${s.url}/v1/conversations/${conv}/messages`, { content: " long", max_tokens: 8000, temperature: 0 });
    assert.equal(r.status, 504, JSON.stringify(r.body));
    assert.equal(r.body.error.code, "request_timeout");

    // --max-conversations: the third is refused (429).
    assert.equal((await postJson(s.url + "/v1/conversations", {})).status, 201);
    r = await postJson(s.url + "/v1/conversations", {});
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, "too_many_conversations");
    r = await postJson(chatUrl, { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(r.status, 429);
    await getJson(`${s.url}/v1/conversations/${conv}`, { method: "DELETE" });

    // A slow client that never finishes its headers is answered (400) and
    // dropped after --read-timeout; meanwhile others are served.
    const slow = await rawConnect(s.url);
    const closed = new Promise((res) => { for (const e of ["data", "end", "close"]) slow.on(e, res); });
    slow.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
    const t0 = Date.now();
    const ok = await postJson(chatUrl, { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(ok.status, 200);
    assert.ok(await within(closed.then(() => true), 8000, false), "the slow client was not dropped");
    assert.ok(Date.now() - t0 >= 1500, "dropped before --read-timeout");
    slow.destroy();
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("a client that leaves mid-stream: its generation is cancelled, nothing leaks", async () => {
  const s = await startServer();
  try {
    const ac = new AbortController();
    const r = await fetch(s.url + "/v1/chat/completions", { method: "POST", signal: ac.signal,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "talk" }], max_tokens: 900,
        temperature: 0, stream: true }) });
    const reader = r.body.getReader();
    await reader.read();
    await reader.read();
    ac.abort();
    const status = async () => (await getJson(s.url + "/v1/status")).body;
    await waitFor(async () => (await status()).conversations.length === 0, 5000, "the stream's conversation to go");
    const m = parseMetrics(await (await fetch(s.url + "/metrics")).text());
    assert.equal(m.weft_client_disconnects_total, 1);
    assert.equal(m.weft_active_generations, 0);
    assert.equal(m.weft_generating, 0);
    assert.ok(m.weft_completion_tokens_total < 900, `the generation ran on: ${m.weft_completion_tokens_total}`);
    // The cache follows a dispose at the next step boundary.
    await waitFor(async () => parseMetrics(await (await fetch(s.url + "/metrics")).text()).weft_kv_cells_used === 0,
      5000, "the cells to be freed");
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("SIGTERM: a running stream ends cleanly, the server exits 0", async () => {
  // A reply the tiny model cannot finish within the grace period: 900 tokens
  // once did (3,000 tokens/s), and the stream then ended without being cut.
  const s = await startServer(["--shutdown-grace", "0.2", "--max-tokens", "8000"], { ctx: 8192 });
  const conv = (await postJson(s.url + "/v1/conversations", { prefix: "Once" })).body.id;
  const r = await fetch(`${s.url}/v1/conversations/${conv}/messages`, { method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: " upon", max_tokens: 8000, temperature: 0, stream: true }) });
  let deltas = 0;
  const reading = readSse(r, () => deltas++);
  await waitFor(() => deltas >= 2, 5000, "the stream to start");
  const t0 = Date.now();
  const exit = await s.stop(10000);
  assert.equal(exit.code, 0, s.log());
  assert.ok(Date.now() - t0 < 5000, `shutdown took ${Date.now() - t0} ms`);
  const { events, done } = await within(reading, 5000, { events: [], done: false });
  assert.ok(done, "the stream ended with [DONE]");
  const last = events.at(-1);
  assert.equal(last.error?.code, "shutting_down", JSON.stringify(last));
  assert.ok(deltas >= 2);
  assert.match(s.log(), /SIGTERM, shutting down[\s\S]*stopped/);
});
