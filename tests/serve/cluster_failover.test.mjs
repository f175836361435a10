// Two `weft serve` nodes with a Redis state store behind nginx (consistent
// hash on the conversation id): 32 conversations advance turn by turn
// through nginx, streamed; one node is killed with SIGKILL mid-turn halfway
// through; every conversation goes on on the other node from its last
// completed turn: nothing lost, nothing applied twice (the store's version
// counts the turns, and each conversation's text is its prefix and its own
// turns, once each). How many end with exactly the tokens of an
// uninterrupted run is reported, not asserted (see below); that every
// state's logits equal a fresh decode of its history is asserted.
//
// Turns run one at a time (round-robin over the conversations), in both
// runs: a step that decodes several conversations' tokens together rounds
// differently from one that decodes them apart (other matmul shapes), and
// on this random-weight model's nearly flat distributions that flips a
// greedy choice now and then — concurrent turns are the race test's and
// the outage test's business.
import { test } from "node:test";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";
import { need, tmpDir, startRedis, startNode, startNginx, postJson, getJson, storeVersion, turn, sleep, redisCli }
  from "./cluster_helpers.mjs";

need("redis-server", "redis-cli", "nginx");

const N = 32, TURNS = 4;
const prefix = (i) => `Traveller number ${i} asks the innkeeper about the old road.`;
const lines = [" Where does it lead?", " Is it safe at night?", " How far is the town?", " Thank you."];

// Creates the conversations and runs TURNS turns on each (all conversations
// at once, each one's turns in order). `during(done)` is called after every
// turn started with the count so far and its conversation.
async function run(url, tag, during = () => {}) {
  let done = 0;
  const ids = [], retries = {}, replies = {}, marks = {};
  for (let i = 0; i < N; i++) {
    const id = `${tag}-${i}`;
    const c = await postJson(`${url}/v1/conversations`, { id, prefix: prefix(i) });
    assert.equal(c.status, 201, JSON.stringify(c.body));
    assert.equal(c.body.store.version, 1);
    ids.push(id);
    marks[id] = [c.body.n_tokens];
  }
  for (let t = 0; t < TURNS; t++)
    for (const id of ids) {
      const pending = turn(url, id, lines[t], 1 + t, { stream: true });
      await during(++done, id);
      const r = await pending;
      retries[id] = (retries[id] ?? 0) + r.retries;
      (replies[id] ??= []).push(r.written_before ? null : r.text);
      marks[id].push(r.usage ? marks[id].at(-1) + r.usage.total_tokens : NaN);  // tokens after each turn
    }
  const texts = {};
  for (const id of ids) {
    const g = await getJson(`${url}/v1/conversations/${id}`);
    assert.equal(g.status, 200, JSON.stringify(g.body));
    texts[id.slice(tag.length + 1)] = g.body.tokens;
    // Each turn once, in order (a turn whose reply was lost to the kill but
    // which was written is checked by the comparison with the other run).
    if (!replies[id].includes(null)) {
      const mine = prefix(Number(id.slice(tag.length + 1))) + replies[id].map((r, t) => lines[t] + r).join("");
      // (Spaces compared loosely: detokenizing pieces apart and together
      // places a leading space differently.)
      const norm = (x) => x.replace(/\s+/g, " ").trim();
      assert.equal(norm(g.body.text), norm(mine), `${id}: the text is not its prefix and its turns, each once`);
    }
  }
  return { texts, retries, marks };
}

test("SIGKILL of one node: every conversation continues on the other, as if uninterrupted", { timeout: 240000 },
  async () => {
    const dir = tmpDir("failover");
    const redis = await startRedis(dir);
    const store = ["--store", redis.url, "--lease-seconds", "2"];
    // A slot for every conversation: none is parked and restored elsewhere in
    // the cache, which would move its KV cells (see above).
    const shape = { ctx: 4096, parallel: N + 2 };
    const a = await startNode([...store, "--node-id", "nodeA"], shape);
    const b = await startNode([...store, "--node-id", "nodeB"], shape);
    const nginx = await startNginx(dir, [a, b]);
    try {
      // The uninterrupted run.
      const ref = await run(nginx.url, "ref");
      // Both nodes took part (the hash spreads the ids).
      const holders = new Set(Object.keys(ref.texts).map((i) =>
        execHolder(redis.port, `ref-${i}`)));
      assert.ok(holders.has("nodeA") && holders.has("nodeB"), `holders: ${[...holders]}`);

      // The same again, killing node A halfway.
      let killed = null;
      const t0 = Date.now();
      // Halfway, node A dies 15 ms into the next turn that is its.
      const res = await run(nginx.url, "run", async (done, id) => {
        if (!killed && done >= (N * TURNS) / 2 && execHolder(redis.port, id) === "nodeA") {
          await sleep(15);
          killed = Date.now();
          a.child.kill("SIGKILL");
        }
      });
      assert.ok(killed, "node A was killed");
      console.log(`run: ${Date.now() - t0} ms, node A killed after ${killed - t0} ms; retries: ${JSON.stringify(res.retries)}`);
      // What is asserted: no turn lost or repeated (each conversation's
      // turns, in order, once; its version 1 + TURNS). Token equality with
      // the uninterrupted run is only reported, not asserted: a conversation
      // sits in other KV cells (and other batches) on another node or in
      // another run, llama.cpp's attention over a unified cache sums in an
      // order that follows the cells, and on this random-weight model's
      // flat distributions a greedy near-tie then flips — measured in about
      // one run in five, before the kill as well as after. The exact check
      // needs logits over the wire (logprobs, not in weft serve yet): then
      // logits within the usual tolerance, a flip allowed only at a
      // measured near-tie (issue 19's notes). What is asserted instead, at
      // the end: every state holds its own history's logits.
      let differing = 0;
      for (let i = 0; i < N; i++) {
        assert.equal(storeVersion(redis.port, `run-${i}`), 1 + TURNS, `conversation ${i}'s version`);
        assert.equal(res.texts[i].length, ref.texts[i].length, `conversation ${i}: a turn lost or repeated`);
        if (JSON.stringify(res.texts[i]) === JSON.stringify(ref.texts[i])) continue;
        differing++;
        const at = res.texts[i].findIndex((t, k) => t !== ref.texts[i][k]);
        const before = ref.marks[`ref-${i}`][TURNS / 2];
        console.log(`conversation ${i} differs from the reference at token ${at} of ${ref.texts[i].length} ` +
          `(it held ${before} tokens at the kill)`);
      }
      console.log(`${differing} of ${N} conversations differ from the uninterrupted run in some token`);
      // Each conversation had turns after the kill, so node B wrote all of
      // them last — those node A held included (about half, by the hash).
      for (let i = 0; i < N; i++) assert.equal(execHolder(redis.port, `run-${i}`), "nodeB", `run-${i}'s holder`);
      const h = await getJson(b.url + "/health");
      assert.equal(h.status, 200);
      assert.equal(h.body.store_ok, true);

      // The exact check: every conversation's state — moved or not, from the
      // interrupted run and the uninterrupted one — holds the logits of a
      // fresh decode of its own history on raw llama.cpp (state_check), within
      // the tests' usual tolerance. A near-tie that picked another token
      // changes the history, not whether the logits fit it.
      const files = [];
      for (const run of ["ref", "run"]) {
        for (let i = 0; i < N; i++) {
          const r = await fetch(`${b.url}/v1/conversations/${run}-${i}/state`);
          assert.equal(r.status, 200, `${run}-${i}: GET state`);
          const f = `${dir}/${run}-${i}.state`;
          writeFileSync(f, Buffer.from(await r.arrayBuffer()));
          files.push(f);
        }
      }
      const checked = execFileSync(process.env.WEFT_STATE_CHECK, [process.env.WEFT_MODEL, ...files],
        { encoding: "utf8", timeout: 120000 }).trim().split("\n").map((l) => JSON.parse(l));
      assert.equal(checked.length, 2 * N);
      let worst = 0;
      for (const c of checked) {
        assert.ok(c.nmse <= c.tolerance, `${c.file}: nmse ${c.nmse} > ${c.tolerance} over ${c.tokens} tokens`);
        worst = Math.max(worst, c.nmse);
      }
      console.log(`states: ${checked.length}, every one's logits = a fresh decode of its history ` +
        `(worst nmse ${worst.toExponential(2)}, tolerance ${checked[0].tolerance.toExponential(2)})`);
    } finally {
      await nginx.stop();
      await b.stop();
      await a.kill();
      await redis.stop();
    }
  });

function execHolder(port, id) { return redisCli(port, "HGET", `weft:{${id}}:meta`, "holder"); }
