// TLS stays with the proxy (docs/DEPLOYING.md): nginx terminates it in front
// of two `weft serve` nodes that share a dir:// store and check API keys,
// which pass through nginx as they are. The certificate is self-signed, made
// here with openssl; the client trusts it as a game's backend would trust a
// private CA (NODE_EXTRA_CA_CERTS), in a child process running the official
// openai client, and its replies are compared with the same requests sent to
// a node directly over plain HTTP.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { need, tmpDir, startNode, startNginx, within } from "./cluster_helpers.mjs";
import { env, callWithKey } from "./helpers.mjs";

need("nginx", "openssl");

const KA = "key-tls-alice-01234567", KB = "key-tls-bob-0123456789";
const keys = ["--api-key", KA, "--api-key", KB];
const chat = { model: path.basename(env.model, ".gguf"), messages: [{ role: "user", content: "The ferryman said:" }], max_tokens: 8, temperature: 0 };

// Runs in a node process of its own, with the certificate trusted: every
// result as one JSON line.
const client = `
import { createRequire } from "node:module";
const OpenAI = createRequire(process.env.WEFT_NODE_MODULES + "/")("openai");
const [url, ka, kb, chatJson] = process.argv.slice(2);
const chat = JSON.parse(chatJson);
const openai = (apiKey) => new OpenAI({ baseURL: url + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
const out = {};
out.health = (await fetch(url + "/health")).status;
out.text = (await openai(ka).chat.completions.create(chat)).choices[0].message.content;
out.streamed = "";
for await (const c of await openai(ka).chat.completions.create({ ...chat, stream: true }))
  out.streamed += c.choices[0]?.delta?.content ?? "";
try { await openai("key-wrong-0123456789").models.list(); out.wrong = 200; } catch (e) { out.wrong = e.status; }
const call = async (key, method, p, body) => {
  const r = await fetch(url + p, { method, headers: { authorization: "Bearer " + key, "content-type": "application/json" },
    body: body && JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};
const made = await call(ka, "POST", "/v1/conversations", { prefix: "Once" });
out.made = made.status;
out.id = made.body.id;
out.asOwner = (await call(ka, "GET", "/v1/conversations/" + made.body.id)).status;
out.asOther = (await call(kb, "GET", "/v1/conversations/" + made.body.id)).status;
console.log(JSON.stringify(out));
`;

function runClient(dir, url, extraEnv) {
  const file = path.join(dir, "client.mjs");
  fs.writeFileSync(file, client);
  const child = spawn(process.execPath, [file, url, KA, KB, JSON.stringify(chat)],
    { env: { ...process.env, WEFT_NODE_MODULES: env.nodeModules, ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  const exited = new Promise((r) => child.on("exit", (code) => r(code)));
  return within(exited, 60000, "timeout").then((code) => {
    if (code === "timeout") child.kill("SIGKILL");
    return { code, out, err };
  });
}

test("nginx terminates TLS; keys pass through to the nodes", { timeout: 120000 }, async () => {
  const dir = tmpDir("tls");
  const cert = path.join(dir, "cert.pem"), key = path.join(dir, "key.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], { stdio: "pipe", timeout: 30000 });
  const store = ["--store", `dir://${path.join(dir, "store")}`];
  fs.mkdirSync(path.join(dir, "store"));
  const a = await startNode([...store, "--node-id", "nodeA", ...keys]);
  const b = await startNode([...store, "--node-id", "nodeB", ...keys]);
  const nginx = await startNginx(dir, [a, b], { tls: { cert, key } });
  try {
    assert.match(nginx.url, /^https:/);
    // The same chat sent to a node directly, over plain HTTP: the reference.
    const direct = await callWithKey(`${a.url}/v1/chat/completions`, KA, "POST", chat);
    assert.equal(direct.status, 200, JSON.stringify(direct.body));
    const want = direct.body.choices[0].message.content;
    assert.ok(want.length > 0);

    const r = await runClient(dir, nginx.url, { NODE_EXTRA_CA_CERTS: cert });
    assert.equal(r.code, 0, `client: ${r.err}`);
    const got = JSON.parse(r.out.trim().split("\n").at(-1));
    assert.equal(got.health, 200);
    assert.equal(got.text, want, "a chat through TLS equals the node's own reply");
    assert.equal(got.streamed, want, "streamed through TLS as it is written");
    assert.equal(got.wrong, 401, "a wrong key is refused by the node behind the proxy");
    assert.equal(got.made, 201);
    assert.equal(got.asOwner, 200);
    assert.equal(got.asOther, 404, "another key's conversation is not found, through TLS too");

    // The proxy speaks only TLS on its port, and a client that does not
    // trust the certificate refuses it.
    const plain = await fetch(nginx.url.replace("https:", "http:") + "/health");
    assert.equal(plain.status, 400, "plain HTTP to the TLS port");
    const untrusted = await runClient(dir, nginx.url, { NODE_EXTRA_CA_CERTS: "" });
    assert.notEqual(untrusted.code, 0);
    assert.match(untrusted.err, /self[- ]signed|SELF_SIGNED|UNABLE_TO_VERIFY|DEPTH_ZERO/i);
  } finally {
    await nginx.stop();
    await a.stop();
    await b.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
