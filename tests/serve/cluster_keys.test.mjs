// Ownership across nodes (docs/DEPLOYING.md): a conversation's owner (its
// key's id) is written with its state, so after the node that made it stops,
// another node serves it to the key that made it and answers 404 to another
// key — without loading it or moving its version — while an admin key sees
// it. Keys pass through nginx as they are. Redis and dir:// stores both.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import { need, tmpDir, startRedis, startNode, startNginx, getJson, redisCli, storeVersion } from "./cluster_helpers.mjs";
import { callWithKey, stateWithKey } from "./helpers.mjs";

need("redis-server", "redis-cli", "nginx");

const KA = "key-alice-0123456789", KB = "key-bob-0123456789ab", KADMIN = "key-admin-0123456789";
const keys = ["--api-key", KA, "--api-key", KB, "--admin-key", KADMIN];
const keyId = (k) => createHash("sha256").update(k).digest("hex").slice(0, 32);

const call = callWithKey, stateOf = stateWithKey;
const listed = async (url, key) => (await call(`${url}/v1/conversations`, key)).body.data.map((c) => c.id);

// Every conversation route as `key` on `id`: each must be 404 conversation_not_found.
async function all404(url, key, id, stateBytes) {
  const u = `${url}/v1/conversations/${id}`;
  for (const [method, p, body] of [["GET", ""], ["GET", "/state"], ["PUT", "/state", stateBytes], ["POST", "/fork", {}],
    ["POST", "/messages", { content: " x", max_tokens: 2 }], ["POST", "/rewind", { n: 1 }], ["DELETE", ""]]) {
    const r = await call(u + p, key, method, body);
    assert.equal(r.status, 404, `${method} ${p}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.error.code, "conversation_not_found");
    assert.equal(r.body.error.message, `no conversation '${id}'`);
  }
}

test("redis: after node A stops, node B serves A's conversation to key A only", { timeout: 120000 }, async () => {
  const dir = tmpDir("keys");
  const redis = await startRedis(dir);
  const store = ["--store", redis.url, "--lease-seconds", "10"];
  const a = await startNode([...store, "--node-id", "nodeA", ...keys]);
  const b = await startNode([...store, "--node-id", "nodeB", ...keys]);
  const nginx = await startNginx(dir, [a, b]);
  try {
    // Through nginx: the key reaches the nodes; none is 401.
    const none = await call(`${nginx.url}/v1/conversations`, null, "POST", {});
    assert.equal(none.status, 401);
    assert.equal(none.body.error.code, "invalid_api_key");
    const viaProxy = await call(`${nginx.url}/v1/conversations`, KA, "POST", { prefix: "Hello" });
    assert.equal(viaProxy.status, 201, JSON.stringify(viaProxy.body));
    assert.equal((await call(`${nginx.url}/v1/conversations/${viaProxy.body.id}`, KB)).status, 404);
    assert.equal((await call(`${nginx.url}/v1/conversations/${viaProxy.body.id}`, KA)).status, 200);

    // Key A's conversation, made and advanced on node A.
    const made = await call(`${a.url}/v1/conversations`, KA, "POST", { prefix: "The ferryman said:" });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id;
    assert.match(id, /^conv_[0-9a-f]{32}$/);
    const t = await call(`${a.url}/v1/conversations/${id}/messages`, KA, "POST",
      { content: " Fare, please.", max_tokens: 8, temperature: 0 });
    assert.equal(t.status, 200, JSON.stringify(t.body));
    assert.equal(t.body.store.version, 2);
    assert.equal(redisCli(redis.port, "HGET", `weft:{${id}}:meta`, "owner"), keyId(KA));
    const tokens = (await call(`${a.url}/v1/conversations/${id}`, KA)).body.tokens;
    // A state of key B's own, for B's PUT.
    const own = await call(`${b.url}/v1/conversations`, KB, "POST", { prefix: "Hi" });
    assert.equal(own.status, 201);
    const bytes = await stateOf(b.url, KB, own.body.id);

    // Key B on node B, which does not hold it: 404 everywhere, nothing loaded,
    // no lease left, the version unmoved.
    await all404(b.url, KB, id, bytes);
    assert.ok(!(await listed(b.url, KADMIN)).includes(id), "key B's requests did not load it on node B");
    assert.equal(redisCli(redis.port, "HGET", `weft:{${id}}:meta`, "lease_node"), "");
    assert.equal(storeVersion(redis.port, id), 2);

    // Node A goes; node B serves it to key A, from the store.
    await a.stop();
    const got = await call(`${b.url}/v1/conversations/${id}`, KA);
    assert.equal(got.status, 200, JSON.stringify(got.body));
    assert.deepEqual(got.body.tokens, tokens);
    // Now that node B holds it, key B still gets 404 on every route.
    await all404(b.url, KB, id, bytes);
    assert.equal(storeVersion(redis.port, id), 2);
    assert.deepEqual(await listed(b.url, KB), [own.body.id]);
    assert.ok((await listed(b.url, KA)).includes(id));
    assert.ok((await listed(b.url, KADMIN)).includes(id));
    const t2 = await call(`${b.url}/v1/conversations/${id}/messages`, KA, "POST",
      { content: " Across.", max_tokens: 8, temperature: 0, if_version: 2 });
    assert.equal(t2.status, 200, JSON.stringify(t2.body));
    assert.equal(t2.body.store.version, 3);
    assert.equal(t2.body.store.holder, "nodeB");
    assert.equal(redisCli(redis.port, "HGET", `weft:{${id}}:meta`, "owner"), keyId(KA), "the owner stays");
    // Through nginx, node A gone: the same.
    assert.equal((await call(`${nginx.url}/v1/conversations/${id}`, KA)).status, 200);
    assert.equal((await call(`${nginx.url}/v1/conversations/${id}`, KB)).status, 404);
    // The admin key may delete it; then it is gone from the store.
    assert.equal((await call(`${b.url}/v1/conversations/${id}`, KADMIN, "DELETE")).status, 200);
    assert.equal(storeVersion(redis.port, id), 0);
  } finally {
    await nginx.stop();
    await a.stop();
    await b.stop();
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("dir://: the owner is the record's last field; another node keeps it", { timeout: 120000 }, async () => {
  const dir = tmpDir("keysdir");
  const store = ["--store", `dir://${dir}`];
  const a = await startNode([...store, "--node-id", "nodeA", ...keys]);
  try {
    const made = await call(`${a.url}/v1/conversations`, KA, "POST", { id: "owned", prefix: "Once" });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.match(fs.readFileSync(`${dir}/owned.meta`, "utf8"), new RegExp(`^1 nodeA - 0 \\d+ ${keyId(KA)}\\n$`));
  } finally {
    await a.stop();
  }
  const b = await startNode([...store, "--node-id", "nodeB", ...keys]);
  try {
    await all404(b.url, KB, "owned", Buffer.from("not a state"));
    assert.equal((await call(`${b.url}/v1/conversations/owned`, KA)).status, 200);
    // Key B cannot take the id either.
    assert.equal((await call(`${b.url}/v1/conversations`, KB, "POST", { id: "owned" })).status, 409);
    assert.match(fs.readFileSync(`${dir}/owned.meta`, "utf8"), new RegExp(` ${keyId(KA)}\\n$`));
  } finally {
    await b.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
