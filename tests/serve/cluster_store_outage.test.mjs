// The state store goes away mid-run (redis-server stopped) and comes back
// (started again on the same port and data): what needs the store gets 503
// store_unavailable with the reason; the conversations a node holds keep
// working, their writes deferred; once Redis is back the deferred turns are
// written and every node sees them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { need, tmpDir, startRedis, startNode, postJson, getJson, storeVersion, waitFor } from "./cluster_helpers.mjs";

need("redis-server", "redis-cli");

test("Redis stopped mid-run: 503 with a reason, held conversations go on, all recovers", { timeout: 120000 },
  async () => {
    const dir = tmpDir("outage");
    let redis = await startRedis(dir);
    const port = redis.port;
    const store = ["--store", redis.url, "--lease-seconds", "5"];
    const a = await startNode([...store, "--node-id", "nodeA"]);
    const b = await startNode([...store, "--node-id", "nodeB"]);
    try {
      const u = `${a.url}/v1/conversations`;
      assert.equal((await postJson(u, { id: "held", prefix: "The miller said:" })).status, 201);
      const t1 = await postJson(`${u}/held/messages`, { content: " Good day.", max_tokens: 6, temperature: 0 });
      assert.equal(t1.status, 200);
      assert.equal(t1.body.store.version, 2);

      await redis.stop();
      // Node A keeps serving the conversation it holds; the write waits.
      const t2 = await postJson(`${u}/held/messages`, { content: " Any news?", max_tokens: 6, temperature: 0 });
      assert.equal(t2.status, 200, JSON.stringify(t2.body));
      assert.match(t2.body.store.deferred, /unavailable/);
      const h = await getJson(a.url + "/health");
      assert.equal(h.status, 200);
      assert.equal(h.body.store_ok, false);
      assert.match(h.body.store_error, /cannot connect|unavailable/);
      assert.equal(h.body.deferred, 1);
      // What needs the store: 503 with the reason.
      for (const [what, r] of [
        ["a conversation node B does not hold", await getJson(`${b.url}/v1/conversations/held`)],
        ["a turn on it at node B", await postJson(`${b.url}/v1/conversations/held/messages`, { content: "x", max_tokens: 1 })],
        ["a new conversation", await postJson(u, { id: "new", prefix: "x" })],
        ["a delete", await getJson(`${u}/held`, { method: "DELETE" })],
      ]) {
        assert.equal(r.status, 503, `${what}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, "store_unavailable", what);
        assert.match(r.body.error.message, /state store .* unavailable: .+/, what);
      }
      // Chat completions need no store.
      const chat = await postJson(`${b.url}/v1/completions`, { model: "tiny", prompt: "Hello", max_tokens: 2 });
      assert.equal(chat.status, 200, JSON.stringify(chat.body));

      // Redis back (same port, same data): the deferred turn is written.
      redis = await startRedis(dir, port);
      await waitFor(async () => {
        const x = (await getJson(a.url + "/health")).body;
        return x.store_ok && x.deferred === 0;
      }, 15000, "node A to write its deferred turn");
      assert.equal(storeVersion(port, "held"), 3);
      // Node B now loads it, with both turns.
      const onA = (await getJson(`${u}/held`)).body.tokens;
      const onB = await getJson(`${b.url}/v1/conversations/held`);
      assert.equal(onB.status, 200, JSON.stringify(onB.body));
      assert.deepEqual(onB.body.tokens, onA);
      // And advances it; node A then catches up from the store.
      const t3 = await postJson(`${b.url}/v1/conversations/held/messages`,
        { content: " Farewell.", max_tokens: 4, temperature: 0, if_version: 3 });
      assert.equal(t3.status, 200, JSON.stringify(t3.body));
      assert.equal(t3.body.store.version, 4);
      assert.equal((await postJson(u, { id: "new", prefix: "x" })).status, 201);
      const t4 = await postJson(`${u}/held/messages`, { content: "", max_tokens: 1, temperature: 0, if_version: 4 });
      assert.equal(t4.status, 200, JSON.stringify(t4.body));
      const after = (await getJson(`${u}/held`)).body.tokens;
      assert.deepEqual(after.slice(0, -1), (await getJson(`${b.url}/v1/conversations/held`)).body.tokens);
    } finally {
      await a.stop();
      await b.stop();
      await redis.stop();
    }
  });
