// The dir:// store: a conversation saved by one node is continued by
// another pointed at the same directory, exactly as the first would have
// continued it; a state over --store-max-bytes is refused with 507.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { tmpDir, startNode, postJson, getJson } from "./cluster_helpers.mjs";

test("dir:// store: node B continues what node A saved", { timeout: 120000 }, async () => {
  const dir = tmpDir("dirstore");
  const store = ["--store", `dir://${dir}`];
  const a = await startNode([...store, "--node-id", "nodeA"]);
  try {
    const u = `${a.url}/v1/conversations`;
    for (const id of ["moved", "stays"]) {
      assert.equal((await postJson(u, { id, prefix: "The smith said:" })).status, 201);
      const r = await postJson(`${u}/${id}/messages`, { content: " Welcome.", max_tokens: 8, temperature: 0 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.store.version, 2);
    }
    assert.ok(fs.existsSync(`${dir}/moved.meta`) && fs.existsSync(`${dir}/moved.2.state`));
    assert.ok(!fs.existsSync(`${dir}/moved.1.state`), "the older version is removed");
    assert.match(fs.readFileSync(`${dir}/moved.meta`, "utf8"), /^2 nodeA - 0 \d+\n$/);
    await a.stop();  // "stays" would go on on node A; the reference is a third node
    const b = await startNode([...store, "--node-id", "nodeB"]);
    const c = await startNode([...store, "--node-id", "nodeC"]);
    try {
      const rb = await postJson(`${b.url}/v1/conversations/moved/messages`,
        { content: " What do you sell?", max_tokens: 12, temperature: 0, if_version: 2 });
      const rc = await postJson(`${c.url}/v1/conversations/stays/messages`,
        { content: " What do you sell?", max_tokens: 12, temperature: 0, if_version: 2 });
      assert.equal(rb.status, 200, JSON.stringify(rb.body));
      assert.equal(rb.body.text, rc.body.text);
      assert.equal(rb.body.store.version, 3);
      assert.equal(rb.body.store.holder, "nodeB");
      assert.deepEqual((await getJson(`${b.url}/v1/conversations/moved`)).body.tokens,
        (await getJson(`${c.url}/v1/conversations/stays`)).body.tokens);
      // Deleting removes the files.
      assert.equal((await getJson(`${b.url}/v1/conversations/moved`, { method: "DELETE" })).status, 200);
      assert.ok(!fs.existsSync(`${dir}/moved.meta`));
      assert.equal((await getJson(`${c.url}/v1/conversations/moved`)).status, 404);
    } finally {
      await b.stop();
      await c.stop();
    }
    // A state over the store's limit: refused, the turn undone.
    const small = await startNode(["--store", `dir://${dir}`, "--node-id", "nodeD", "--store-max-bytes", "150000"]);
    try {
      const su = `${small.url}/v1/conversations`;
      assert.equal((await postJson(su, { id: "big", prefix: "A" })).status, 201);
      const before = (await getJson(`${su}/big`)).body.n_tokens;
      // 700 tokens' KV alone (272 B each on tiny) is over the limit, whether
      // the save finds the last token decoded (with logits) or queued.
      const r = await postJson(`${su}/big/messages`, { content: " long", max_tokens: 700, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 507, JSON.stringify(r.body));
      assert.equal(r.body.error.code, "state_too_large");
      assert.match(r.body.error.message, /bytes of state; the store takes at most 150000 \(--store-max-bytes\)/);
      assert.equal((await getJson(`${su}/big`)).body.n_tokens, before);
    } finally {
      await small.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
