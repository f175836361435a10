// Measures what the state store costs a turn (docs/DEPLOYING.md): the same
// conversations and turns run on one node without a store, then on two
// nodes sharing a Redis store with each turn on the other node than the
// last (so every turn reads and restores the state, and saves and writes
// it). Prints per-turn wall time and the store's per-operation costs from
// /metrics. Not a test; run it by hand:
//   WEFT_CLI=build/release/tools/weft/weft WEFT_MODEL=build/release/tests/models/tiny.gguf \
//   WEFT_REFERENCE=/ WEFT_NODE_MODULES=/tmp node tests/serve/cluster_measure.mjs [conversations] [turns] [tokens]
import { tmpDir, startRedis, startNode, postJson, getJson } from "./cluster_helpers.mjs";
import { parseMetrics } from "./helpers.mjs";

const [K, T, M] = [Number(process.argv[2] ?? 8), Number(process.argv[3] ?? 6), Number(process.argv[4] ?? 32)];
const content = " Tell me about the road to the north.";

async function drive(nodes, tag) {
  const times = [];
  for (let i = 0; i < K; i++) {
    const id = `${tag}-${i}`;
    const c = await postJson(`${nodes[0].url}/v1/conversations`, { id, prefix: "The innkeeper said:" });
    if (c.status !== 201) throw new Error(JSON.stringify(c.body));
  }
  for (let t = 0; t < T; t++)
    for (let i = 0; i < K; i++) {
      const node = nodes[t % nodes.length];
      const t0 = performance.now();
      const r = await postJson(`${node.url}/v1/conversations/${tag}-${i}/messages`,
        { content, max_tokens: M, temperature: 0, ignore_eos: true });
      if (r.status !== 200) throw new Error(JSON.stringify(r.body));
      times.push(performance.now() - t0);
    }
  return times;
}

const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
const dir = tmpDir("measure");
const plain = await startNode([]);
const base = await drive([plain], "plain");
await plain.stop();
const redis = await startRedis(dir);
const a = await startNode(["--store", redis.url, "--node-id", "nodeA"]);
const b = await startNode(["--store", redis.url, "--node-id", "nodeB"]);
const moved = await drive([a, b], "moved");
const ops = {};
for (const n of [a, b]) {
  const m = parseMetrics(await (await fetch(n.url + "/metrics")).text());
  for (const op of ["acquire", "save", "write", "read", "restore"]) {
    ops[op] ??= { n: 0, s: 0, bytes: 0 };
    ops[op].n += m[`weft_store_ops_total{op="${op}"}`];
    ops[op].s += m[`weft_store_seconds_total{op="${op}"}`];
    ops[op].bytes += m[`weft_store_bytes_total{op="${op}"}`];
  }
}
const tokens = (await getJson(`${a.url}/v1/conversations/moved-0`)).body.n_tokens;
console.log(`${K} conversations x ${T} turns of ${M} tokens (greedy, ignore_eos); ${tokens} tokens at the end`);
console.log(`turn without a store: mean ${mean(base).toFixed(2)} ms (of which decode+sample, HTTP included)`);
console.log(`turn moved between two nodes through Redis: mean ${mean(moved).toFixed(2)} ms`);
for (const [op, o] of Object.entries(ops))
  console.log(`  ${op.padEnd(8)} n=${String(o.n).padStart(4)}  mean ${(1000 * o.s / o.n).toFixed(3)} ms` +
    (o.bytes ? `  mean ${(o.bytes / o.n / 1024).toFixed(1)} KiB` : ""));
await a.stop();
await b.stop();
await redis.stop();
