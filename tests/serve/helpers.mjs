// Shared by the serve tests: start `weft serve` on a free port, stop it,
// run the reference, read SSE by hand. Every wait is bounded; every server
// started is killed when the test process exits, however it exits.
import { spawn, execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import net from "node:net";

export const env = {
  cli: process.env.WEFT_CLI,
  model: process.env.WEFT_MODEL,
  reference: process.env.WEFT_REFERENCE,
  nodeModules: process.env.WEFT_NODE_MODULES,
  chromium: process.env.WEFT_CHROMIUM,
};
for (const k of ["cli", "model", "reference", "nodeModules"])
  if (!env[k]) throw new Error(`the serve tests need WEFT_${k.toUpperCase()} (run them through ctest)`);

// npm packages live in the build tree, not beside these files.
export const requireNpm = createRequire(env.nodeModules + "/");

// The executor shape every test server and the reference share.
export const shape = { ctx: 1024, parallel: 4, batch: 64, threads: 1 };

const children = new Set();
process.on("exit", () => { for (const c of children) try { c.kill("SIGKILL"); } catch {} });
for (const s of ["SIGINT", "SIGTERM"]) process.on(s, () => process.exit(130));

// A chat completion request to the test model, terse, seeded.
export const chat = (content, extra = {}) => ({
  model: "tiny",
  messages: [{ role: "system", content: "You are terse." }, { role: "user", content }],
  max_tokens: 16, temperature: 0.9, seed: 11, ...extra,
});
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `promise`, or `fallback` after `ms` — without a timer left behind to keep
// the process alive.
export function within(promise, ms, fallback = null) {
  let timer;
  const t = new Promise((r) => { timer = setTimeout(() => r(fallback), ms); });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// Waits until pred() is truthy (polling), at most `ms`; returns its value or throws `what`.
export async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

// `ctx`: KV cells, where a test needs more than serve_reference's shape.
export async function startServer(extra = [], { ctx = shape.ctx } = {}) {
  // reference() runs synchronously and blocks this process's event loop; under
  // TSan it can outlast the 5 s default keep-alive, and the client then reuses
  // a connection the server has closed ("Connection error" with maxRetries 0).
  const keepAlive = extra.includes("--keep-alive-timeout") ? [] : ["--keep-alive-timeout", "60"];
  const args = ["serve", "-m", env.model, "--port", "0", "--ctx", String(ctx), "--parallel",
    String(shape.parallel), "--batch", String(shape.batch), "-t", String(shape.threads),
    "--flash-attn", "off", ...keepAlive, ...extra];  // serve_reference's kernel: replies are compared token for token
  const child = spawn(env.cli, args, { stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise((r) => child.on("exit", (code, sig) => r({ code, sig })));
  let gone = null;
  exited.then((e) => (gone = e));
  const url = await waitFor(() => {
    if (gone) throw new Error(`weft serve exited (${gone.code ?? gone.sig}) before listening:\n${out}`);
    return (out.match(/listening on (http:\/\/[0-9.]+:\d+)/) || [])[1];
  }, 30000, "the server to listen");
  return {
    url, child, log: () => out, exited,
    // SIGTERM, then at most `ms` for a clean exit; SIGKILL after that (and a throw).
    async stop(ms = 15000) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const r = await within(exited, ms);
      children.delete(child);
      if (!r) { child.kill("SIGKILL"); throw new Error(`weft serve did not stop within ${ms} ms:\n${out}`); }
      return r;
    },
  };
}

// The same request on weft's C++ API, no server involved; with `mmproj`
// (a projector path), messages may hold image_file and audio_f32 parts.
export function reference(request, mmproj) {
  const out = execFileSync(env.reference, [env.model, String(shape.ctx), String(shape.parallel), String(shape.batch),
    String(shape.threads), JSON.stringify(request), ...(mmproj ? [mmproj] : [])], { timeout: 60000, encoding: "utf8" });
  return JSON.parse(out);
}

export async function getJson(url, init) {
  const r = await fetch(url, { ...init, signal: AbortSignal.timeout(30000) });
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: r.status, body, headers: r.headers };
}

export const postJson = (url, body, method = "POST") =>
  getJson(url, { method, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

// A request with API key `key` (null: no Authorization header); `body` an
// object (JSON) or a Buffer (state bytes).
export function callWithKey(url, key, method = "GET", body) {
  const headers = key ? { authorization: `Bearer ${key}` } : {};
  if (body !== undefined) headers["content-type"] = Buffer.isBuffer(body) ? "application/octet-stream" : "application/json";
  return getJson(url, { method, headers, body: body === undefined || Buffer.isBuffer(body) ? body : JSON.stringify(body) });
}

// Conversation `id`'s state bytes as `key` sees them (must answer 200).
export async function stateWithKey(url, key, id) {
  const r = await fetch(`${url}/v1/conversations/${id}/state`, { headers: { authorization: `Bearer ${key}` },
    signal: AbortSignal.timeout(30000) });
  if (r.status !== 200) throw new Error(`GET ${id}/state as that key: ${r.status}`);
  return Buffer.from(await r.arrayBuffer());
}

// Reads an SSE response: the parsed `data:` events, and whether [DONE] came.
export async function readSse(response, onEvent = () => {}) {
  const events = [];
  let done = false, buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body) {
    buf += decoder.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") { done = true; continue; }
        const ev = JSON.parse(data);
        events.push(ev);
        onEvent(ev);
      }
    }
  }
  return { events, done };
}

// CRC-32 (IEEE, as zlib's): states' trailing checksum, PNG chunks.
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
export function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// Prometheus text -> { "name{labels}": value }.
export function parseMetrics(text) {
  const m = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const sp = line.lastIndexOf(" ");
    m[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return m;
}

// A raw TCP client, for what fetch cannot do (slow clients).
export function rawConnect(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(u.port), u.hostname, () => resolve(s));
    s.on("error", reject);
  });
}
