// Two nodes asked to advance the same conversation at once: exactly one
// wins; the other is refused with 409 conversation_leased naming the
// winner; the store's version goes up once. A retry of the refused turn
// that says which version it started from (if_version) is refused with 409
// version_mismatch, so it cannot be applied on top of the winner's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { need, tmpDir, startRedis, startNode, postJson, getJson, storeVersion } from "./cluster_helpers.mjs";

need("redis-server", "redis-cli");

test("two nodes race on one conversation: one wins, the other gets 409, the version moves once", { timeout: 120000 },
  async () => {
    const dir = tmpDir("race");
    const redis = await startRedis(dir);
    const store = ["--store", redis.url, "--lease-seconds", "10"];
    const a = await startNode([...store, "--node-id", "nodeA"]);
    const b = await startNode([...store, "--node-id", "nodeB"]);
    try {
      for (let round = 0; round < 3; round++) {
        const id = `race-${round}`;
        const c = await postJson(`${a.url}/v1/conversations`, { id, prefix: "The guard at the gate said:" });
        assert.equal(c.status, 201, JSON.stringify(c.body));
        // Node B loads it too, so both hold a copy before the race.
        assert.equal((await getJson(`${b.url}/v1/conversations/${id}`)).status, 200);
        const v0 = storeVersion(redis.port, id);
        assert.equal(v0, 1);
        // Long turns (ignore_eos), sent to both nodes at once.
        const body = { content: " Halt!", max_tokens: 160, temperature: 0, ignore_eos: true };
        const [ra, rb] = await Promise.all([
          postJson(`${a.url}/v1/conversations/${id}/messages`, body),
          postJson(`${b.url}/v1/conversations/${id}/messages`, body),
        ]);
        const ok = [ra, rb].filter((r) => r.status === 200);
        const refused = [ra, rb].filter((r) => r.status !== 200);
        assert.equal(ok.length, 1, `statuses ${ra.status} ${rb.status}: ${JSON.stringify(refused.map((r) => r.body))}`);
        assert.equal(refused[0].status, 409, JSON.stringify(refused[0].body));
        assert.equal(refused[0].body.error.code, "conversation_leased");
        const winner = ra.status === 200 ? "nodeA" : "nodeB";
        assert.match(refused[0].body.error.message, new RegExp(`node '${winner}'`));
        assert.equal(ok[0].body.store.version, 2);
        assert.equal(storeVersion(redis.port, id), 2, "the version moved once");
        assert.equal(ok[0].body.usage.completion_tokens, 160);

        // The loser retries "from version 1": refused, the store keeps version 2.
        const loser = ra.status === 200 ? b : a;
        const retry = await postJson(`${loser.url}/v1/conversations/${id}/messages`, { ...body, if_version: 1 });
        assert.equal(retry.status, 409);
        assert.equal(retry.body.error.code, "version_mismatch");
        assert.equal(storeVersion(redis.port, id), 2);
        // The loser's stale copy is replaced by the store's on its next turn:
        // both nodes then agree on the tokens.
        const next = await postJson(`${loser.url}/v1/conversations/${id}/messages`,
          { content: " Who goes there?", max_tokens: 4, temperature: 0, if_version: 2 });
        assert.equal(next.status, 200, JSON.stringify(next.body));
        assert.equal(next.body.store.version, 3);
        const winnerNode = loser === a ? b : a;
        const w = (await postJson(`${winnerNode.url}/v1/conversations/${id}/messages`,
          { content: "", max_tokens: 1, temperature: 0, if_version: 3 }));
        assert.equal(w.status, 200, JSON.stringify(w.body));
        const tw = (await getJson(`${winnerNode.url}/v1/conversations/${id}`)).body.tokens;
        assert.equal(tw.length, (await getJson(`${loser.url}/v1/conversations/${id}`)).body.tokens.length + 1);
      }
    } finally {
      await a.stop();
      await b.stop();
      await redis.stop();
    }
  });
