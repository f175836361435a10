// Two `weft serve` nodes behind nginx with Redis vs one node: the same
// conversations, all advancing at once, turn after turn (docs/DEPLOYING.md,
// "Two nodes vs one"). One node gets every core's thread (-t CORES); each of
// two nodes gets half. Prints generated tokens/s and turn latency for each
// setup. Not a test; run it by hand:
//   WEFT_CLI=build/release/tools/weft/weft WEFT_MODEL=model.gguf WEFT_REFERENCE=/ WEFT_NODE_MODULES=/tmp \
//   node tests/serve/cluster_throughput.mjs [conversations] [turns] [tokens] [cores]
import os from "node:os";
import { tmpDir, startRedis, startNode, startNginx, postJson } from "./cluster_helpers.mjs";

const [K, T, M, CORES] = [Number(process.argv[2] ?? 16), Number(process.argv[3] ?? 3), Number(process.argv[4] ?? 32),
  Number(process.argv[5] ?? 2)];
const content = " Tell me about the road to the north.";

async function drive(url, tag) {
  for (let i = 0; i < K; i++) {
    const c = await postJson(`${url}/v1/conversations`, { id: `${tag}-${i}`, prefix: "The innkeeper said:" });
    if (c.status !== 201) throw new Error(JSON.stringify(c.body));
  }
  const lat = [];
  const t0 = performance.now();
  for (let t = 0; t < T; t++) {
    await Promise.all([...Array(K).keys()].map(async (i) => {
      const s = performance.now();
      const r = await postJson(`${url}/v1/conversations/${tag}-${i}/messages`,
        { content, max_tokens: M, temperature: 0, ignore_eos: true });
      if (r.status !== 200) throw new Error(JSON.stringify(r.body));
      lat.push(performance.now() - s);
    }));
  }
  const s = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return { tok_s: (K * T * M) / s, p50: lat[Math.floor(lat.length / 2)], max: lat[lat.length - 1] };
}

const show = (name, r) => console.log(`${name.padEnd(36)} ${r.tok_s.toFixed(1).padStart(8)} tok/s   turn p50 ` +
  `${r.p50.toFixed(0)} ms, max ${r.max.toFixed(0)} ms`);
const shape = { ctx: 4096, parallel: K + 2 };
const dir = tmpDir("throughput");
console.log(`${K} conversations at once x ${T} turns of ${M} tokens (greedy, ignore_eos); ${CORES} cores; ` +
  `load at start ${os.loadavg()[0].toFixed(2)}`);
{
  const one = await startNode([], { ...shape, threads: CORES });
  show(`1 node, -t ${CORES}, no store`, await drive(one.url, "one"));
  await one.stop();
}
const redis = await startRedis(dir);
{
  const one = await startNode(["--store", redis.url, "--node-id", "solo"], { ...shape, threads: CORES });
  const nginx = await startNginx(dir, [one]);
  show(`1 node, -t ${CORES}, Redis, nginx`, await drive(nginx.url, "solo"));
  await nginx.stop();
  await one.stop();
}
{
  const half = Math.max(1, CORES / 2);
  const a = await startNode(["--store", redis.url, "--node-id", "nodeA"], { ...shape, threads: half });
  const b = await startNode(["--store", redis.url, "--node-id", "nodeB"], { ...shape, threads: half });
  const nginx = await startNginx(dir, [a, b]);
  show(`2 nodes, -t ${half} each, Redis, nginx`, await drive(nginx.url, "two"));
  await nginx.stop();
  await a.stop();
  await b.stop();
}
await redis.stop();
console.log(`load at end ${os.loadavg()[0].toFixed(2)}`);
