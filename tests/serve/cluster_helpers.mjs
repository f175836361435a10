// Shared by the cluster tests: real redis-server and nginx from Debian, and
// several `weft serve` nodes, each on a free port, each stopped when the
// test process exits however it exits. Without redis-server or nginx the
// tests say so and are skipped (exit 77).
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { env, waitFor, within, getJson, postJson, sleep, readSse } from "./helpers.mjs";

export { env, waitFor, within, getJson, postJson, sleep };

const here = path.dirname(fileURLToPath(import.meta.url));
const children = new Set();
process.on("exit", () => { for (const c of children) try { c.kill("SIGKILL"); } catch {} });

export function which(prog) {
  for (const d of (process.env.PATH + ":/usr/sbin:/sbin").split(":")) {
    const p = path.join(d, prog);
    try { fs.accessSync(p, fs.constants.X_OK); return p; } catch {}
  }
  return null;
}

// Skips the test file (exit 77) when a server it needs is not installed.
export function need(...progs) {
  for (const p of progs)
    if (!which(p)) {
      console.log(`SKIP: ${p} is not installed (Debian: scripts/setup-debian.sh installs redis-server and nginx)`);
      process.exit(77);
    }
}

export const tmpDir = (tag) => fs.mkdtempSync(path.join(os.tmpdir(), `weft-${tag}-`));

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

function portOpen(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.once("connect", () => { s.destroy(); resolve(true); });
    s.once("error", () => resolve(false));
  });
}

function track(child, name) {
  children.add(child);
  let out = "";
  child.stdout?.on("data", (d) => (out += d));
  child.stderr?.on("data", (d) => (out += d));
  const exited = new Promise((r) => child.on("exit", (code, sig) => r({ code, sig })));
  return {
    child, exited, log: () => out, name,
    alive: () => child.exitCode === null && child.signalCode === null,
    kill(sig = "SIGKILL") { if (this.alive()) child.kill(sig); return within(exited, 10000); },
    async stop(ms = 15000) {
      if (this.alive()) child.kill("SIGTERM");
      const r = await within(exited, ms);
      if (!r) { child.kill("SIGKILL"); await within(exited, 5000); }
      children.delete(child);
      return r;
    },
  };
}

// One RESP command over a fresh connection (no client library: redis-cli
// is used where the reply matters). Resolves with the raw reply text.
export function redisRaw(port, line, ms = 2000) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let buf = "";
    const done = (v) => { s.destroy(); resolve(v); };
    s.setTimeout(ms, () => done(null));
    s.on("error", () => done(null));
    s.on("connect", () => s.write(line + "\r\n"));
    s.on("data", (d) => { buf += d; if (buf.endsWith("\r\n")) done(buf); });
  });
}

export function redisCli(port, ...args) {
  return execFileSync("redis-cli", ["-p", String(port), "--raw", ...args], { encoding: "utf8", timeout: 10000 }).trim();
}

// redis-server on `port` (a free one when absent), its data in `dir`, with
// an append-only file so a restart keeps what was written.
export async function startRedis(dir, port) {
  port ??= await freePort();
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
    "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--protected-mode", "no"],
    { stdio: ["ignore", "pipe", "pipe"] });
  const r = track(child, "redis");
  await waitFor(async () => {
    if (!r.alive()) throw new Error(`redis-server exited:\n${r.log()}`);
    return (await redisRaw(port, "PING")) === "+PONG\r\n";
  }, 10000, "redis-server to answer PING");
  return { ...r, port, url: `redis://127.0.0.1:${port}/0` };
}

// `weft serve` with the executor shape of the other serve tests, and `extra`.
// One attention kernel on every node and in the references: automatic
// chooses per shape and machine, and a conversation continued under the
// other kernel matches only within noise, not token for token.
export async function startNode(extra = [], { ctx = 2048, parallel = 8, threads = 1 } = {}) {
  const args = ["serve", "-m", env.model, "--port", "0", "--ctx", String(ctx), "--parallel", String(parallel), "--batch", "64",
    "-t", String(threads), "--flash-attn", "off", ...extra];
  const child = spawn(env.cli, args, { stdio: ["ignore", "pipe", "pipe"] });
  const n = track(child, "weft serve");
  const url = await waitFor(() => {
    if (!n.alive()) throw new Error(`weft serve exited before listening:\n${n.log()}`);
    return (n.log().match(/listening on (http:\/\/[0-9.]+:\d+)/) || [])[1];
  }, 30000, "weft serve to listen");
  return { ...n, url, port: Number(new URL(url).port) };
}

// nginx from tests/serve/nginx-weft.conf.in in front of `nodes`; with `tls`
// ({ cert, key }: PEM files) it terminates TLS, and `url` is https://.
export async function startNginx(dir, nodes, { tls } = {}) {
  const port = await freePort();
  const servers = nodes.map((n) => `    server 127.0.0.1:${n.port} max_fails=1 fail_timeout=10s;`).join("\n");
  const conf = fs.readFileSync(path.join(here, "nginx-weft.conf.in"), "utf8")
    .replaceAll("@DIR@", dir).replaceAll("@PORT@", String(port)).replace("@SERVERS@", servers)
    .replace("@SSL@", tls ? " ssl" : "")
    .replace("@TLS@", tls ? `    ssl_certificate ${tls.cert};\n    ssl_certificate_key ${tls.key};` : "");
  const file = path.join(dir, "nginx.conf");
  fs.writeFileSync(file, conf);
  const child = spawn(which("nginx"), ["-c", file, "-p", dir, "-e", path.join(dir, "error.log")],
    { stdio: ["ignore", "pipe", "pipe"] });
  const n = track(child, "nginx");
  const url = `${tls ? "https" : "http"}://127.0.0.1:${port}`;
  await waitFor(async () => {
    if (!n.alive()) throw new Error(`nginx exited:\n${n.log()}\n${fs.readFileSync(path.join(dir, "error.log"), "utf8")}`);
    // (Over TLS the test's own client, which trusts the certificate, asks.)
    if (tls) return portOpen(port);
    try { return (await getJson(url + "/health")).status === 200; } catch { return false; }
  }, 10000, "nginx to answer /health");
  return { ...n, url, port };
}

export const storeVersion = (redisPort, id) => Number(redisCli(redisPort, "HGET", `weft:{${id}}:meta`, "version") || 0);

// One turn, retried through whatever a node's death or a store outage gives
// (a broken connection, 502, 409 conversation_leased, 503) for up to `ms`.
// `if_version` makes a retry of a turn that was in fact written answer 409
// version_mismatch instead of applying it again: then the turn is done.
export async function turn(url, id, content, version, opts = {}, ms = 60000) {
  const end = Date.now() + ms;
  let last = null, retries = 0;
  for (;;) {
    try {
      const body = { content, max_tokens: 8, temperature: 0, ignore_eos: true, if_version: version, ...opts };
      const r = body.stream ? await postSse(`${url}/v1/conversations/${id}/messages`, body)
        : await postJson(`${url}/v1/conversations/${id}/messages`, body);
      if (r.status === 200) return { ...r.body, retries };
      if (r.status === 409 && r.body?.error?.code === "version_mismatch" &&
          r.body.error.message.includes(`at version ${version + 1} `)) return { written_before: true, retries };
      last = `${r.status} ${JSON.stringify(r.body).slice(0, 300)}`;
      if (![409, 502, 503, 504].includes(r.status)) throw new Error(`turn on ${id}: ${last}`);
    } catch (e) {
      if (String(e.message).startsWith("turn on")) throw e;
      last = String(e);
    }
    if (Date.now() > end) throw new Error(`turn on ${id} did not go through in ${ms} ms; last: ${last}`);
    retries++;
    await sleep(200);
  }
}

// A streamed POST: 200 and the last event (the final object, or the error
// event a cut stream ends with: then its error's status), else the error reply.
async function postSse(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify(body), signal: AbortSignal.timeout(30000) });
  if (r.status !== 200) {
    const text = await r.text();
    let b;
    try { b = JSON.parse(text); } catch { b = text; }
    return { status: r.status, body: b };
  }
  const { events, done } = await readSse(r);
  const last = events.at(-1);
  if (!done || !last) return { status: 502, body: "the stream was cut" };
  if (last.error) return { status: last.error.code === "conversation_leased" ? 409 : 503, body: last };
  let text = "";
  for (const e of events) if (e.object === "conversation.message.delta") text += e.text;
  if (text !== last.text) throw new Error(`turn: the streamed text ${JSON.stringify(text)} is not the final ${JSON.stringify(last.text)}`);
  return { status: 200, body: last };
}
