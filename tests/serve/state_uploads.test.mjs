// PUT /v1/conversations/{id}/state is untrusted input: a real state cut
// short, with bytes flipped, or replaced by noise, is a typed 4xx and the
// conversation it was aimed at is unchanged; with the CRC fixed up (so the
// parser, not the checksum, meets the damage) it is a 4xx or a state that
// loads, never a crash; through it all the server answers and a stream on
// another conversation gives the reference's text. Seeded: the same
// mutations every run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, reference, getJson, postJson, readSse, crc32, waitFor } from "./helpers.mjs";

// mulberry32: a small seeded generator.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The state's trailing CRC-32 (docs/STATE_FORMAT.md) made right for `buf`'s body.
function fixCrc(buf) {
  const out = Buffer.from(buf);
  out.writeUInt32LE(crc32(out.subarray(0, out.length - 4)), out.length - 4);
  return out;
}

const put = (url, body) => getJson(url, { method: "PUT", headers: { "content-type": "application/octet-stream" }, body });
async function stateOf(url) {
  const r = await fetch(url, { signal: AbortSignal.timeout(30000) });
  assert.equal(r.status, 200);
  return Buffer.from(await r.arrayBuffer());
}

test("damaged, truncated and hostile states: 4xx, nothing changed, the server and other streams unaffected",
  { timeout: 110000 }, async () => {
    const s = await startServer();
    const u = s.url + "/v1/conversations";
    try {
      assert.equal((await postJson(u, { id: "target", prefix: "The innkeeper said:" })).status, 201);
      assert.equal((await postJson(`${u}/target/messages`, { content: " Rooms?", max_tokens: 6, temperature: 0 })).status, 200);
      // The reply's last token is decoded by a step after the reply returns
      // (then the state holds its logits): the state compared is the settled one.
      await waitFor(async () => (await getJson(`${u}/target`)).body.n_queued === 0, 30000, "the reply's last token decoded");
      const good = await stateOf(`${u}/target/state`);
      assert.equal(crc32(good.subarray(0, good.length - 4)), good.readUInt32LE(good.length - 4), "the CRC is where the format says");
      const tokens = (await getJson(`${u}/target`)).body.tokens;

      // A long stream on another conversation, running through the uploads.
      assert.equal((await postJson(u, { id: "other", prefix: "The blacksmith said:" })).status, 201);
      const streamed = fetch(`${u}/other/messages`, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ content: " Welcome", max_tokens: 48, temperature: 0, stream: true }),
        signal: AbortSignal.timeout(60000) }).then((r) => readSse(r));

      const next = rng(42);
      const pick = (n) => Math.floor(next() * n);
      const mutations = [];
      for (let i = 0; i < 40; i++) mutations.push(["truncated", good.subarray(0, pick(good.length))]);
      for (let i = 0; i < 60; i++) {
        const m = Buffer.from(good);
        for (let k = 1 + pick(8); k > 0; k--) m[pick(m.length)] ^= 1 + pick(255);
        mutations.push(["flipped", m]);
      }
      for (let i = 0; i < 10; i++) {
        const m = Buffer.alloc(1 + pick(200000));
        for (let j = 0; j < m.length; j++) m[j] = pick(256);
        mutations.push(["noise", m]);
      }
      mutations.push(["magic only", good.subarray(0, 8)], ["no CRC", good.subarray(0, good.length - 4)],
        ["doubled", Buffer.concat([good, good])]);

      const codes = new Map();
      for (const [kind, body] of mutations) {
        const r = await put(`${u}/target/state`, body);
        assert.ok(r.status >= 400 && r.status < 500, `${kind} (${body.length} bytes): ${r.status} ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.type, "invalid_request_error", `${kind}: ${JSON.stringify(r.body)}`);
        assert.ok(typeof r.body.error.code === "string" && typeof r.body.error.message === "string");
        codes.set(r.body.error.code, (codes.get(r.body.error.code) ?? 0) + 1);
      }
      console.log(`# ${mutations.length} damaged uploads refused, by code: ${JSON.stringify(Object.fromEntries(codes))}`);
      assert.ok(codes.get("corrupt") > 0);

      // The CRC fixed up: the parser meets the damage. Each to an id of its
      // own: refused (4xx), or a state that loads (then removed).
      let refused = 0, loaded = 0;
      const turns = new Map();
      for (let i = 0; i < 60; i++) {
        const m = Buffer.from(good);
        // Mostly the header and the counts and lengths near it, where a
        // parser trusts numbers; now and then anywhere.
        const span = i % 4 === 3 ? m.length - 4 : Math.min(256, m.length - 4);
        for (let k = 1 + pick(4); k > 0; k--) m[pick(span)] ^= 1 << pick(8);
        const r = await put(`${u}/probe-${i}/state`, fixCrc(m));
        if (r.status >= 400 && r.status < 500) {
          refused++;
          assert.equal(r.body.error.type, "invalid_request_error", JSON.stringify(r.body));
          assert.equal((await getJson(`${u}/probe-${i}`)).status, 404, "a refused upload leaves no conversation");
        } else {
          assert.equal(r.status, 201, `probe ${i}: ${r.status} ${JSON.stringify(r.body)}`);
          loaded++;
          // What loaded is a conversation like any other: a turn on it
          // generates, or fails with a typed error, and the server goes on.
          const t = await postJson(`${u}/probe-${i}/messages`, { content: " Go", max_tokens: 2, temperature: 0 });
          assert.ok(t.status === 200 || (t.status >= 400 && t.body?.error?.code), `probe ${i} turn: ${t.status} ${JSON.stringify(t.body)}`);
          turns.set(t.status, (turns.get(t.status) ?? 0) + 1);
          assert.equal((await getJson(`${u}/probe-${i}`, { method: "DELETE" })).status, 200);
        }
      }
      console.log(`# CRC fixed up: ${refused} refused, ${loaded} loaded as valid states; ` +
        `a turn on those, by status: ${JSON.stringify(Object.fromEntries(turns))}`);

      // Nothing changed: the same tokens, the same state bytes, and it continues.
      assert.deepEqual((await getJson(`${u}/target`)).body.tokens, tokens);
      const after = await stateOf(`${u}/target/state`);
      assert.ok(after.equals(good), `the target's state is byte for byte what it was (${good.length} bytes, now ${after.length})`);
      // The executor's bookkeeping after all that churn: read whole (a
      // dangling entry once showed here as a use after free under TSan).
      const metrics = await fetch(s.url + "/metrics");
      assert.equal(metrics.status, 200);
      assert.match(await metrics.text(), /weft_conversations_residency\{residency="resident"\} \d/);
      const list = (await getJson(u)).body.data.map((c) => c.id).sort();
      assert.deepEqual(list, ["other", "target"]);
      const { events, done } = await streamed;
      assert.ok(done, "the stream ended with [DONE]");
      const last = events.at(-1);
      assert.equal(last.object, "conversation.message", JSON.stringify(last));
      const ref = reference({ prompts: ["The blacksmith said:", " Welcome"], max_tokens: 48, temperature: 0 });
      assert.equal(last.text, ref.text);
      assert.equal((await getJson(s.url + "/health")).status, 200);
      // A good state still loads.
      assert.equal((await put(`${u}/target/state`, good)).status, 200);
    } finally {
      assert.equal((await s.stop()).code, 0, "weft serve exits 0:\n" + s.log());
    }
  });
