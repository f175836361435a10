// API keys and ownership (docs/SERVE.md, "API keys"): the official openai
// client with right, wrong and missing keys (401 in OpenAI's shape); two keys
// that cannot see each other's conversations (404 on every route, as for an
// id that does not exist; the listing filtered) while an admin key sees
// both; random ids; --key-max-conversations, --key-max-streams and
// --key-tokens-per-minute; no keys on a non-loopback host
// refused; the key file read again on SIGHUP.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { startServer, requireNpm, getJson, env, within, waitFor, callWithKey, stateWithKey } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
const KA = "key-alice-0123456789", KB = "key-bob-0123456789ab", KADMIN = "key-admin-0123456789";

const call = callWithKey, stateOf = stateWithKey;

function assert401(r, what) {
  assert.equal(r.status, 401, `${what}: ${JSON.stringify(r.body)}`);
  assert.deepEqual(Object.keys(r.body.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(r.body.error.type, "invalid_request_error");
  assert.equal(r.body.error.code, "invalid_api_key");
  assert.equal(r.body.error.param, null);
  assert.equal(r.headers.get("www-authenticate"), "Bearer");
}

test("the openai client with right, wrong and missing keys", { timeout: 60000 }, async () => {
  const s = await startServer(["--api-key", KA, "--admin-key", KADMIN]);
  try {
    assert.match(s.log(), /API keys: 2 accepted, 1 of them admin/);
    const client = (apiKey) => new OpenAI({ baseURL: s.url + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
    const req = { model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0 };
    const ok = await client(KA).chat.completions.create(req);
    assert.equal(ok.object, "chat.completion");
    assert.deepEqual((await client(KADMIN).models.list()).data.map((m) => m.id), ["tiny"]);
    for (const wrong of ["key-alice-012345678X", KA + "0", "sk-something-else-entirely"]) {
      await assert.rejects(client(wrong).chat.completions.create(req), (e) => {
        assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
        assert.equal(e.status, 401);
        assert.equal(e.code, "invalid_api_key");
        assert.equal(e.type, "invalid_request_error");
        assert.equal(e.param, null);
        assert.equal(e.error.message, "Incorrect API key provided.");
        return true;
      });
    }
    // No key at all (the client insists on one: plain fetch), and the
    // other schemes, on every kind of route, an unknown one included.
    for (const [method, p] of [["GET", "/v1/models"], ["POST", "/v1/chat/completions"], ["GET", "/v1/conversations"],
      ["POST", "/v1/conversations"], ["GET", "/v1/conversations/x/state"], ["GET", "/v1/status"], ["GET", "/metrics"],
      ["GET", "/no/such/route"]]) {
      const r = await call(s.url + p, null, method, method === "POST" ? req : undefined);
      assert401(r, `${method} ${p}`);
      assert.match(r.body.error.message, /You didn't provide an API key/);
      assert401(await getJson(s.url + p, { method, headers: { authorization: `Basic ${KA}` } }), `Basic ${p}`);
    }
    // /health and the dashboard's page need none; /metrics takes any key
    // without --metrics-key.
    assert.equal((await call(s.url + "/health", null)).status, 200);
    assert.equal((await call(s.url + "/", null)).status, 200);
    assert.equal((await call(s.url + "/metrics", KA)).status, 200);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("--metrics-key: /metrics takes it or an admin key, nothing else does", { timeout: 60000 }, async () => {
  const KM = "key-metrics-0123456";
  const s = await startServer(["--api-key", KA, "--admin-key", KADMIN, "--metrics-key", KM]);
  try {
    assert.equal((await call(s.url + "/metrics", KM)).status, 200);
    assert.equal((await call(s.url + "/metrics", KADMIN)).status, 200);
    assert401(await call(s.url + "/metrics", KA), "an API key on /metrics");
    assert401(await call(s.url + "/metrics", null), "no key on /metrics");
    assert401(await call(s.url + "/v1/models", KM), "the metrics key elsewhere");
  } finally {
    await s.stop();
  }
});

test("two keys cannot see each other's conversations; an admin key sees both", { timeout: 60000 }, async () => {
  const s = await startServer(["--api-key", KA, "--api-key", KB, "--admin-key", KADMIN]);
  const u = s.url + "/v1/conversations";
  try {
    const a = await call(u, KA, "POST", { prefix: "The smith said:" });
    const b = await call(u, KB, "POST", { prefix: "The baker said:" });
    assert.equal(a.status, 201, JSON.stringify(a.body));
    assert.equal(b.status, 201);
    const ida = a.body.id, idb = b.body.id;
    // 128 random bits, hex.
    for (const id of [ida, idb]) assert.match(id, /^conv_[0-9a-f]{32}$/);
    assert.notEqual(ida, idb);
    assert.equal((await call(`${u}/${ida}/messages`, KA, "POST", { content: " Hi", max_tokens: 4, temperature: 0 })).status, 200);
    const before = (await call(`${u}/${ida}`, KA)).body;
    const stateB = await stateOf(s.url, KB, idb);

    // Every route, as B, on A's id: exactly what an id that does not exist gets.
    const ghost = "conv_" + "0".repeat(32);
    const routes = (id) => [
      ["GET", `${u}/${id}`], ["GET", `${u}/${id}/state`], ["PUT", `${u}/${id}/state`, stateB],
      ["POST", `${u}/${id}/fork`, {}], ["POST", `${u}/${id}/messages`, { content: " x", max_tokens: 2 }],
      ["POST", `${u}/${id}/rewind`, { n: 1 }], ["DELETE", `${u}/${id}`]];
    const theirs = routes(ida), none = routes(ghost);
    for (let i = 0; i < theirs.length; i++) {
      const [method, url, body] = theirs[i];
      const r = await call(url, KB, method, body);
      const n = await call(none[i][1], KB, method, body);
      if (method === "PUT") {
        // A new id is the caller's to make; another key's is not.
        assert.equal(r.status, 404, `PUT ${url}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, "conversation_not_found");
        assert.equal(r.body.error.message, `no conversation '${ida}'`);
        assert.equal(n.status, 201);
        assert.equal((await call(`${u}/${ghost}`, KB, "DELETE")).status, 200);
        continue;
      }
      assert.equal(r.status, 404, `${method} ${url}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(r.body, JSON.parse(JSON.stringify(n.body).replaceAll(ghost, ida)), `${method} ${url}`);
      assert.equal(r.body.error.code, "conversation_not_found");
    }
    // A's conversation is as it was.
    const after = (await call(`${u}/${ida}`, KA)).body;
    assert.deepEqual(after.tokens, before.tokens);
    assert.ok((await stateOf(s.url, KA, ida)).length > 0);

    // Listings and the status JSON show the caller's own.
    const ids = async (key) => (await call(u, key)).body.data.map((c) => c.id).sort();
    assert.deepEqual(await ids(KA), [ida]);
    assert.deepEqual(await ids(KB), [idb]);
    assert.deepEqual(await ids(KADMIN), [ida, idb].sort());
    assert.deepEqual((await call(s.url + "/v1/status", KB)).body.conversations.map((c) => c.id), [idb]);

    // The admin key uses A's conversation; its fork is the admin's.
    assert.equal((await call(`${u}/${ida}`, KADMIN)).status, 200);
    const f = await call(`${u}/${ida}/fork`, KADMIN, "POST", {});
    assert.equal(f.status, 201);
    assert.equal((await call(`${u}/${f.body.id}`, KA)).status, 404);
    assert.equal((await call(`${u}/${f.body.id}`, KADMIN, "DELETE")).status, 200);

    // A client-chosen id is owned the same way; the namespace is shared.
    assert.equal((await call(u, KA, "POST", { id: "alice-chosen", prefix: "A" })).status, 201);
    assert.equal((await call(`${u}/alice-chosen`, KB)).status, 404);
    assert.equal((await call(u, KB, "POST", { id: "alice-chosen" })).status, 409);
    // A PUT of A's own state under a new id is A's.
    const put = await call(`${u}/alice-copy/state`, KA, "PUT", await stateOf(s.url, KA, ida));
    assert.equal(put.status, 201, JSON.stringify(put.body));
    assert.equal((await call(`${u}/alice-copy`, KB)).status, 404);
    assert.deepEqual(await ids(KA), [ida, "alice-chosen", "alice-copy"].sort());

    // B deletes its own; A's stay.
    assert.equal((await call(`${u}/${idb}`, KB, "DELETE")).status, 200);
    assert.deepEqual(await ids(KB), []);
    assert.equal((await call(`${u}/${ida}`, KA)).status, 200);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("without keys: ids are random too, and everyone sees everything", { timeout: 60000 }, async () => {
  const s = await startServer();
  try {
    assert.match(s.log(), /no API keys: unauthenticated, anyone who reaches 127\.0\.0\.1 may use every conversation/);
    const u = s.url + "/v1/conversations";
    const made = new Set();
    for (let i = 0; i < 4; i++) {
      const r = await call(u, null, "POST", {});
      assert.equal(r.status, 201);
      assert.match(r.body.id, /^conv_[0-9a-f]{32}$/);
      made.add(r.body.id);
    }
    assert.equal(made.size, 4);
    // Any Authorization header is ignored.
    assert.equal((await call(u, "whatever-key-00000000")).body.data.length, 4);
  } finally {
    await s.stop();
  }
});

test("--key-max-conversations: 429 with Retry-After, per key", { timeout: 60000 }, async () => {
  const s = await startServer(["--api-key", KA, "--api-key", KB, "--key-max-conversations", "2"]);
  const u = s.url + "/v1/conversations";
  try {
    const first = (await call(u, KA, "POST", {})).body.id;
    assert.equal((await call(u, KA, "POST", {})).status, 201);
    const r = await call(u, KA, "POST", {});
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.equal(r.body.error.code, "too_many_conversations");
    assert.match(r.body.error.message, /this API key holds 2 conversations on this server, its limit \(--key-max-conversations 2\)/);
    assert.equal(r.headers.get("retry-after"), "1");
    // A chat request needs a conversation of its own too.
    const c = await call(s.url + "/v1/chat/completions", KA, "POST",
      { model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 });
    assert.equal(c.status, 429);
    assert.equal((await call(u, KB, "POST", {})).status, 201);
    assert.equal((await call(`${u}/${first}`, KA, "DELETE")).status, 200);
    assert.equal((await call(u, KA, "POST", {})).status, 201);
  } finally {
    await s.stop();
  }
});

// Runs `weft serve` expecting it to exit before listening; returns its code and output.
async function runToExit(args) {
  const child = spawn(env.cli, ["serve", "-m", env.model, "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const r = await within(new Promise((res) => child.on("exit", (code) => res(code))), 30000, "timeout");
  if (r === "timeout") child.kill("SIGKILL");
  return { code: r, out };
}

test("no keys on a non-loopback host: refused unless --allow-unauthenticated; bad keys refused", { timeout: 60000 }, async () => {
  const r = await runToExit(["--host", "0.0.0.0"]);
  assert.notEqual(r.code, 0, r.out);
  assert.notEqual(r.code, "timeout", r.out);
  assert.match(r.out, /--host 0\.0\.0\.0 is not a loopback address and no API key is configured: give --api-key or --api-key-file, or pass --allow-unauthenticated/);
  assert.doesNotMatch(r.out, /listening on/);
  const bad = await runToExit(["--api-key", "short"]);
  assert.notEqual(bad.code, 0);
  assert.match(bad.out, /--api-key #1: the key is 5 characters; keys are 16-512 printable ASCII characters/);
  assert.doesNotMatch(bad.out, /listening on/);
  // With the flag it starts, and says it is open.
  const s = await startServer(["--host", "0.0.0.0", "--allow-unauthenticated"]);
  try {
    assert.match(s.log(), /no API keys: unauthenticated, anyone who reaches 0\.0\.0\.0 may use every conversation/);
    assert.equal((await call(s.url.replace("0.0.0.0", "127.0.0.1") + "/v1/models", null)).status, 200);
  } finally {
    await s.stop();
  }
  // With a key, a non-loopback host needs no flag.
  const k = await startServer(["--host", "0.0.0.0", "--api-key", KA]);
  try {
    assert401(await call(k.url.replace("0.0.0.0", "127.0.0.1") + "/v1/models", null), "keyed 0.0.0.0");
  } finally {
    await k.stop();
  }
});

test("SIGHUP reads the key file again: an added key works, a removed one gets 401", { timeout: 60000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "weft-keys-"));
  const file = path.join(dir, "keys.txt");
  fs.writeFileSync(file, `# keys\n${KA}\n\nadmin ${KADMIN}\n`);
  const s = await startServer(["--api-key-file", file]);
  const models = s.url + "/v1/models";
  const hup = async (pattern, n) => {
    s.child.kill("SIGHUP");
    await waitFor(() => (s.log().match(pattern) || []).length >= n, 10000, `the log to say ${pattern}`);
  };
  try {
    assert.match(s.log(), /API keys: 2 accepted, 1 of them admin \(--api-key-file .*keys\.txt, read again on SIGHUP\)/);
    const a = await call(s.url + "/v1/conversations", KA, "POST", {});
    assert.equal(a.status, 201);
    assert401(await call(models, KB), "B before");
    fs.writeFileSync(file, `${KB}\nadmin ${KADMIN}\n`);
    await hup(/SIGHUP: 2 keys accepted \(1 admin\)/g, 1);
    assert.equal((await call(models, KB)).status, 200);
    assert401(await call(models, KA), "A after its removal");
    // A's conversation stays A's: B cannot use it, the admin can.
    assert.equal((await call(`${s.url}/v1/conversations/${a.body.id}`, KB)).status, 404);
    assert.equal((await call(`${s.url}/v1/conversations/${a.body.id}`, KADMIN)).status, 200);
    // A bad file leaves the keys as they were.
    fs.writeFileSync(file, `${KA}\nshort\n`);
    await hup(/SIGHUP: keeping the keys as they were: --api-key-file .* line 2: the key is 5 characters/g, 1);
    assert.equal((await call(models, KB)).status, 200);
    assert401(await call(models, KA), "A after a bad reload");
    // The server is still up and stops cleanly.
    assert.equal((await call(s.url + "/health", null)).status, 200);
  } finally {
    assert.equal((await s.stop()).code, 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("--key-max-streams: a key's second generation at once is 429 too_many_streams; other keys go on", { timeout: 90000 }, async () => {
  const s = await startServer(["--api-key", KA, "--api-key", KB, "--key-max-streams", "1", "--max-tokens", "8000"],
    { ctx: 8192 });
  const client = (apiKey) => new OpenAI({ baseURL: s.url + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
  const req = { model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0 };
  try {
    // A long stream of A's (8,000 tokens: seconds on tiny), held open.
    const stream = await client(KA).chat.completions.create({ ...req, max_tokens: 8000, ignore_eos: true, stream: true });
    const it = stream[Symbol.asyncIterator]();
    assert.equal((await it.next()).done, false);
    await assert.rejects(client(KA).chat.completions.create(req), (e) => {
      assert.ok(e instanceof OpenAI.RateLimitError, String(e));
      assert.equal(e.status, 429);
      assert.equal(e.code, "too_many_streams");
      assert.equal(e.type, "rate_limit_error");
      assert.equal(e.headers.get("retry-after"), "1");
      assert.match(e.error.message, /this API key runs 1 generations on this server, its limit \(--key-max-streams 1\)/);
      return true;
    });
    // A conversation's message is a generation too; creating one is not.
    const conv = await call(s.url + "/v1/conversations", KA, "POST", { prefix: "Hi" });
    assert.equal(conv.status, 201);
    const m = await call(`${s.url}/v1/conversations/${conv.body.id}/messages`, KA, "POST", { content: " there", max_tokens: 2 });
    assert.equal(m.status, 429, JSON.stringify(m.body));
    assert.equal(m.body.error.code, "too_many_streams");
    // Nothing of the refused message was queued.
    assert.equal((await call(`${s.url}/v1/conversations/${conv.body.id}`, KA)).body.n_tokens, conv.body.n_tokens);
    assert.equal((await client(KB).chat.completions.create(req)).choices.length, 1);
    // The stream's client goes away: its slot comes back.
    stream.controller.abort();
    await waitFor(async () => (await call(`${s.url}/v1/conversations/${conv.body.id}/messages`, KA, "POST",
      { content: " there", max_tokens: 2 })).status === 200, 20000, "A's slot to come back");
  } finally {
    await s.stop();
  }
});

test("--key-tokens-per-minute: over it, 429 rate_limit_exceeded with Retry-After; other keys go on", { timeout: 60000 }, async () => {
  const s = await startServer(["--api-key", KA, "--api-key", KB, "--key-tokens-per-minute", "30"]);
  const client = (apiKey) => new OpenAI({ baseURL: s.url + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
  const req = { model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 40, temperature: 0, ignore_eos: true };
  try {
    // Under the limit when admitted: it runs to its end, over the limit.
    const first = await client(KA).chat.completions.create(req);
    assert.equal(first.usage.completion_tokens, 40);
    const used = first.usage.total_tokens;
    assert.ok(used >= 30, `used ${used}`);
    await assert.rejects(client(KA).chat.completions.create(req), (e) => {
      assert.ok(e instanceof OpenAI.RateLimitError, String(e));
      assert.equal(e.code, "rate_limit_exceeded");
      // Every token of the first request counted: prompt and generated.
      assert.match(e.error.message, new RegExp(`this API key used ${used} tokens in the last 60 s on this server, its limit \\(--key-tokens-per-minute 30\\); retry in [0-9.]+ s`));
      const after = Number(e.headers.get("retry-after"));
      assert.ok(Number.isInteger(after) && after >= 50 && after <= 60, `Retry-After ${after}`);
      return true;
    });
    const conv = await call(s.url + "/v1/conversations", KA, "POST", {});
    const m = await call(`${s.url}/v1/conversations/${conv.body.id}/messages`, KA, "POST", { content: "Hi", max_tokens: 2 });
    assert.equal(m.status, 429);
    assert.equal(m.body.error.code, "rate_limit_exceeded");
    assert.equal((await client(KB).chat.completions.create({ ...req, max_tokens: 2 })).usage.completion_tokens, 2);
  } finally {
    await s.stop();
  }
});
