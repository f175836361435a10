// weft serve --mmproj: images and audio in chats, through the official
// `openai` npm client. Replies are compared with serve_reference queueing
// the same files with the library's own prompt_image / prompt_audio; every
// refusal is checked for its status, code and param, with the server serving
// others after it; a conversation resource holding an image is read, saved,
// loaded and continued.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import { env, startServer, reference, requireNpm, getJson, postJson, crc32 } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "weft-serve-media-"));
const visionProj = path.join(dir, "vision-mmproj.gguf");
const audioProj = path.join(dir, "audio-mmproj.gguf");
const servers = {};
const clients = {};
let files;  // http server for --allow-remote-media

// ---- media made here, byte by byte ----

function pngChunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}
// An RGB PNG, pixel (x, y) = fn(x, y) -> [r, g, b].
function png(w, h, fn) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);  // 8 bits, RGB, deflate, no filter method, no interlace
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) {
    raw[y * (1 + 3 * w)] = 0;  // filter: none
    for (let x = 0; x < w; x++) raw.set(fn(x, y), y * (1 + 3 * w) + 1 + 3 * x);
  }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), pngChunk("IHDR", ihdr),
    pngChunk("IDAT", zlib.deflateSync(raw)), pngChunk("IEND", Buffer.alloc(0))]);
}
// A WAV file: `channels` arrays of samples; format 1 (PCM: int16 values,
// written as `bits` 16, 24 or 32, scaled up) or 3 (float32).
function wav(channels, rate, format = 1, bits = format === 1 ? 16 : 32) {
  const n = channels[0].length, nc = channels.length, bytes = bits / 8;
  const data = Buffer.alloc(n * nc * bytes);
  for (let i = 0; i < n; i++)
    for (let c = 0; c < nc; c++) {
      const at = (i * nc + c) * bytes, v = channels[c][i];
      if (format === 3) data.writeFloatLE(v, at);
      else if (bits === 16) data.writeInt16LE(v, at);
      else if (bits === 24) data.writeIntLE(v * 256, at, 3);
      else data.writeInt32LE(v * 65536, at);
    }
  const fmt = Buffer.alloc(16);
  fmt.writeUInt16LE(format, 0);
  fmt.writeUInt16LE(nc, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE(rate * nc * bytes, 8);
  fmt.writeUInt16LE(nc * bytes, 12);
  fmt.writeUInt16LE(bits, 14);
  const chunk = (id, b) => { const h = Buffer.alloc(8); h.write(id, 0, "ascii"); h.writeUInt32LE(b.length, 4); return Buffer.concat([h, b]); };
  const body = Buffer.concat([Buffer.from("WAVE", "ascii"), chunk("fmt ", fmt), chunk("data", data)]);
  const head = Buffer.alloc(8);
  head.write("RIFF", 0, "ascii");
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

let seed = 7;
const rand = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;  // an LCG in 32 bits
const imageA = png(96, 80, (x, y) => [(x * 3) & 255, (y * 5) & 255, (x * y) & 255]);
const imageB = png(64, 64, (x, y) => [255 - x * 4, 128, y * 4]);
const noise = png(200, 200, () => [rand() * 256, rand() * 256, rand() * 256]);  // ~120 KB: over the 64 KiB limit
// Half a second at 16 kHz, two channels of int16.
const left = Array.from({ length: 8000 }, (_, i) => Math.round(12000 * Math.sin(i / 9) + 3000 * (rand() - 0.5)));
const right = Array.from({ length: 8000 }, (_, i) => Math.round(9000 * Math.sin(i / 23)));
const stereo = wav([left, right], 16000);
// What the server makes of it: channels averaged, samples / 32768, as f32.
const mono = new Float32Array(left.map((l, i) => (l / 32768 + right[i] / 32768) / 2));

const write = (name, bytes) => { const p = path.join(dir, name); fs.writeFileSync(p, bytes); return p; };
const pathA = write("a.png", imageA), pathB = write("b.png", imageB), pathAudio = write("audio.f32", Buffer.from(mono.buffer));
const dataUrl = (b) => "data:image/png;base64," + b.toString("base64");
const imagePart = (b) => ({ type: "image_url", image_url: { url: dataUrl(b) } });
const audioPart = (b, format = "wav") => ({ type: "input_audio", input_audio: { data: b.toString("base64"), format } });

// A chat with `parts` in the user's message, and the reference's version of it.
const chat = (parts, extra = {}) => ({
  model: "tiny", max_tokens: 12, temperature: 0, seed: 3, ...extra,
  messages: [{ role: "system", content: "Look closely." }, { role: "user", content: parts }],
});
const refOf = (req, refParts, mmproj) => reference({ messages: [req.messages[0], { role: "user", content: refParts }],
  max_tokens: req.max_tokens, temperature: req.temperature, seed: req.seed }, mmproj);

// The positions a chat's prompt takes on server `name`, as a conversation
// resource made of its messages holds them (media: -1), and the reference's
// for the same chat (which also holds the assistant opener after them).
async function layoutMatches(name, req, ref) {
  const u = servers[name].url + "/v1/conversations";
  const made = await postJson(u, { messages: req.messages });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const got = await getJson(`${u}/${made.body.id}`);
  await getJson(`${u}/${made.body.id}`, { method: "DELETE" });
  const norm = (ts) => ts.map((t) => (t < 0 ? -1 : t));
  const ours = norm(got.body.tokens), theirs = norm(ref.prompt_token_ids);
  assert.ok(ours.length > 0 && ours.length < theirs.length, `${ours.length} vs ${theirs.length}`);
  assert.deepEqual(ours, theirs.slice(0, ours.length));
}

before(async () => {
  for (const [kind, out] of [["gemma3", visionProj], ["qwen2a", audioProj]])
    execFileSync(env.cli, ["make-mmproj", "--base", env.model, "--kind", kind, "--seed", "1", "-q", "--out", out],
      { timeout: 60000 });
  files = http.createServer((req, res) => {
    if (req.url === "/a.png") { res.writeHead(200, { "content-type": "image/png" }); res.end(imageA); return; }
    res.writeHead(404); res.end("no");
  });
  await new Promise((r) => files.listen(0, "127.0.0.1", r));
  const started = await Promise.all([
    startServer(["--mmproj", visionProj, "--max-media", "2", "--max-media-bytes", "65536"]),
    startServer(["--mmproj", visionProj, "--allow-remote-media"]),
    startServer(["--mmproj", audioProj]),
    startServer([]),
  ]);
  ["vision", "remote", "audio", "plain"].forEach((k, i) => {
    servers[k] = started[i];
    clients[k] = new OpenAI({ baseURL: started[i].url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
  });
});
after(async () => {
  for (const s of Object.values(servers)) {
    const r = await s.stop();
    assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + s.log());
  }
  files?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test("an image chat equals prompt_image on the library, text and usage", async () => {
  const parts = [{ type: "text", text: "What is in " }, imagePart(imageA), { type: "text", text: " and here?" },
    imagePart(imageB)];
  const refParts = [{ type: "text", text: "What is in " }, { type: "image_file", path: pathA },
    { type: "text", text: " and here?" }, { type: "image_file", path: pathB }];
  const req = chat(parts);
  const r = await clients.vision.chat.completions.create(req);
  const ref = refOf(req, refParts, visionProj);
  assert.equal(r.choices[0].message.content, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.finish_reason);
  assert.equal(r.usage.prompt_tokens, ref.prompt_tokens);
  assert.equal(r.usage.completion_tokens, ref.completion_tokens);
  // 16 positions an image (the gemma3 kind), beside the text and its wrapping.
  assert.equal(ref.prompt_token_ids.filter((t) => t < 0).length, 32);
  assert.ok(r.usage.prompt_tokens > 32);
  await layoutMatches("vision", req, ref);
  // Sampled and streamed: the same draw, and usage counts the images' positions.
  const hot = chat(parts, { temperature: 0.9, seed: 21 });
  const stream = await clients.vision.chat.completions.create({ ...hot, stream: true,
    stream_options: { include_usage: true } });
  let text = "", usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) text += c.delta.content ?? "";
  }
  const refHot = refOf(hot, refParts, visionProj);
  assert.equal(text, refHot.text);
  assert.equal(usage.prompt_tokens, refHot.prompt_tokens);
});

test("an audio chat equals prompt_audio on the library; 24-bit, 32-bit and float32 WAVs give the same", async () => {
  const req = chat([{ type: "text", text: "Listen: " }, audioPart(stereo), { type: "text", text: " What was it?" }]);
  const r = await clients.audio.chat.completions.create(req);
  const ref = refOf(req, [{ type: "text", text: "Listen: " }, { type: "audio_f32", path: pathAudio },
    { type: "text", text: " What was it?" }], audioProj);
  assert.equal(r.choices[0].message.content, ref.text);
  assert.equal(r.usage.prompt_tokens, ref.prompt_tokens);
  assert.equal(r.usage.completion_tokens, ref.completion_tokens);
  assert.equal(ref.prompt_token_ids.filter((t) => t < 0).length, 750);  // one 30 s chunk of the qwen2a kind
  await layoutMatches("audio", req, ref);
  // The averaged samples as one float32 channel: the same clip to the model.
  const f32 = chat([{ type: "text", text: "Listen: " }, audioPart(wav([Array.from(mono)], 16000, 3)),
    { type: "text", text: " What was it?" }]);
  // The same int16 values at 24 and 32 bits: the same samples once scaled.
  const wide = [24, 32].map((bits) => chat([{ type: "text", text: "Listen: " }, audioPart(wav([left, right], 16000, 1, bits)),
    { type: "text", text: " What was it?" }]));
  for (const other of [f32, ...wide]) {
    const r2 = await clients.audio.chat.completions.create(other);
    assert.equal(r2.choices[0].message.content, r.choices[0].message.content);
    assert.equal(r2.usage.prompt_tokens, r.usage.prompt_tokens);
  }
});

test("an http:// image is fetched with --allow-remote-media, as its data URL", async () => {
  const base = `http://127.0.0.1:${files.address().port}`;
  const viaUrl = await clients.remote.chat.completions.create(chat([{ type: "text", text: "See " },
    { type: "image_url", image_url: { url: base + "/a.png" } }]));
  const viaData = await clients.remote.chat.completions.create(chat([{ type: "text", text: "See " }, imagePart(imageA)]));
  assert.equal(viaUrl.choices[0].message.content, viaData.choices[0].message.content);
  assert.equal(viaUrl.usage.prompt_tokens, viaData.usage.prompt_tokens);
  await refused("remote", [{ type: "image_url", image_url: { url: base + "/missing.png" } }], "media_fetch_failed",
    /HTTP 404/);
});

// A chat with `parts` on server `name` must be refused: 400, `code`, the part as param, `message` matched.
async function refused(name, parts, code, message, param = "messages[1].content[0]") {
  const err = await clients[name].chat.completions.create(chat(parts)).then(
    () => assert.fail(`expected 400 ${code}`), (e) => e);
  assert.equal(err.status, 400, String(err));
  assert.equal(err.code, code, String(err));
  assert.equal(err.param, param, String(err));
  assert.match(err.message, message);
}

test("every refusal is the right 400, and the server goes on serving", async () => {
  const img = imagePart(imageA);
  await refused("plain", [img], "unsupported_content", /--mmproj/);
  await refused("plain", [audioPart(stereo)], "unsupported_content", /--mmproj/);
  await refused("audio", [img], "unsupported_content", /audio only/);
  await refused("vision", [audioPart(stereo)], "unsupported_content", /images only/);
  await refused("vision", [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBO@@==" } }],
    "invalid_base64", /character 4/);
  await refused("vision", [{ type: "image_url", image_url: { url: "data:image/png;base64,aGVsbG8gd29ybGQh" } }],
    "invalid_image", /does not decode/);
  await refused("vision", [{ type: "image_url", image_url: { url: "https://example.com/a.png" } }],
    "unsupported_url_scheme", /TLS/);
  await refused("vision", [{ type: "image_url", image_url: { url: "http://127.0.0.1:9/a.png" } }],
    "remote_media_disabled", /--allow-remote-media/);
  await refused("vision", [imagePart(noise)], "media_too_large", new RegExp(`${noise.length} bytes.*at most 65536`));
  const three = [{ type: "text", text: "x" }, img, img, img];
  await refused("vision", three, "too_many_media", /holds 3 images.*at most 2/, "messages");
  await refused("audio", [audioPart(wav([left], 8000))], "audio_sample_rate_mismatch", /8000 Hz.*16000 Hz/);
  await refused("audio", [audioPart(stereo, "mp3")], "unsupported_audio_format", /'mp3'/);
  await refused("audio", [audioPart(Buffer.from("RIFF....WAVEjunk"))], "invalid_audio", /fmt chunk/);
  await refused("vision", [{ type: "text", text: "a <__media__> b" }, img], "invalid_value", /marker/, "messages");
  // Media positions count against the context: 1,012 tokens of text fit 1,024 cells, an image more does not
  // (counted before queueing); 297 tokens fit, a 750-position clip more does not (counted once queued).
  for (const [name, words, part, message, param] of [
    ["vision", 965, img, /the prompt is \d+ tokens, images' positions included/, "messages"],
    ["audio", 250, audioPart(stereo), /does not fit the context/, null]]) {
    const text = { type: "text", text: "stone ".repeat(words) };
    const fits = await clients[name].chat.completions.create(chat([text], { max_tokens: 1 }));
    assert.ok(fits.usage.prompt_tokens < 1024 && fits.usage.prompt_tokens > 250, String(fits.usage.prompt_tokens));
    await refused(name, [text, part], "context_length_exceeded", message, param);
  }
  // Still serving: text, and images, as before.
  const text = await clients.vision.chat.completions.create(chat("Hello"));
  assert.equal(text.choices[0].message.content, reference({ messages: chat("Hello").messages, max_tokens: 12,
    temperature: 0, seed: 3 }).text);
  const ok = await clients.vision.chat.completions.create(chat([img]));
  assert.equal(ok.choices[0].message.content, refOf(chat([img]), [{ type: "image_file", path: pathA }], visionProj).text);
});

test("a conversation with an image: GET shows it, its state round-trips, a server without a projector refuses it", async () => {
  const u = servers.vision.url + "/v1/conversations";
  const messages = [{ role: "user", content: [{ type: "text", text: "Keep this: " }, imagePart(imageA)] }];
  const made = await postJson(u, { id: "pic", messages });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const got = await getJson(`${u}/pic`);
  assert.equal(got.status, 200, JSON.stringify(got.body));
  assert.equal(got.body.tokens.length, got.body.n_tokens);
  const media = got.body.tokens.filter((t) => t < 0);
  assert.equal(media.length, 16);
  assert.ok(media.every((t) => t === media[0]), "one image: one image_token id at each of its positions");
  assert.equal(got.body.text.split("<__media__>").length, 2, got.body.text);
  assert.match(got.body.text, /Keep this: .*<__media__>/s);

  const state = Buffer.from(await (await fetch(`${u}/pic/state`)).arrayBuffer());
  const put = await getJson(`${u}/copy/state`, { method: "PUT", body: state,
    headers: { "content-type": "application/octet-stream" } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const copy = await getJson(`${u}/copy`);
  assert.equal(copy.body.text, got.body.text);
  assert.deepEqual(copy.body.tokens.map((t) => t < 0), got.body.tokens.map((t) => t < 0));
  const turn = { content: "What was it?", max_tokens: 10, temperature: 0 };
  const a = await postJson(`${u}/pic/messages`, turn);
  const b = await postJson(`${u}/copy/messages`, turn);
  assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.equal(b.body.text, a.body.text);
  assert.deepEqual(b.body.usage, a.body.usage);

  // No projector: the state is refused and nothing changes there.
  const p = servers.plain.url + "/v1/conversations";
  assert.equal((await postJson(p, { id: "keep", prefix: "hello there" })).status, 201);
  const before = await getJson(`${p}/keep`);
  for (const id of ["keep", "fresh"]) {
    const r = await getJson(`${p}/${id}/state`, { method: "PUT", body: state,
      headers: { "content-type": "application/octet-stream" } });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, "incompatible");
  }
  assert.deepEqual((await getJson(`${p}/keep`)).body.tokens, before.body.tokens);
  assert.equal((await getJson(`${p}/fresh`)).status, 404);
});

test("a conversation's message with media equals the library's own queueing; refused ones leave it as it was", async () => {
  const u = servers.vision.url + "/v1/conversations";
  const made = await postJson(u, { prefix: "Look closely. " });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id;
  const content = [{ type: "text", text: "Here: " }, imagePart(imageA), { type: "text", text: " and " },
    imagePart(imageB), { type: "text", text: " what?" }];
  const r = await postJson(`${u}/${id}/messages`, { content, max_tokens: 10, temperature: 0 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const ref = reference({ prompts: ["Look closely. ", [{ type: "text", text: "Here: " }, { type: "image_file", path: pathA },
    { type: "text", text: " and " }, { type: "image_file", path: pathB }, { type: "text", text: " what?" }]],
  max_tokens: 10, temperature: 0 }, visionProj);
  assert.equal(r.body.text, ref.text);
  const got = await getJson(`${u}/${id}`);
  const norm = (ts) => ts.map((t) => (t < 0 ? -1 : t));
  assert.deepEqual(norm(got.body.tokens.slice(0, ref.prompt_token_ids.length)), norm(ref.prompt_token_ids));
  assert.equal(got.body.tokens.filter((t) => t < 0).length, 32, "two images of 16 positions");
  // usage counts the message's positions: everything after the prefix.
  assert.equal(r.body.usage.prompt_tokens, ref.prompt_tokens - made.body.n_tokens);
  assert.equal(got.body.text.split("<__media__>").length, 3, got.body.text);

  // Refusals name `content[j]` and queue nothing.
  const n = got.body.n_tokens;
  const refusedHere = async (server, conv, parts, code, param) => {
    const x = await postJson(`${servers[server].url}/v1/conversations/${conv}/messages`, { content: parts, max_tokens: 2 });
    assert.equal(x.status, 400, JSON.stringify(x.body));
    assert.equal(x.body.error.code, code, JSON.stringify(x.body));
    assert.equal(x.body.error.param, param);
  };
  const img = imagePart(imageA);
  await refusedHere("vision", id, [img, img, img], "too_many_media", "content");
  await refusedHere("vision", id, [{ type: "text", text: "x" }, { type: "image_url", image_url: { url: "https://e.x/a.png" } }],
    "unsupported_url_scheme", "content[1]");
  await refusedHere("vision", id, [{ type: "text", text: "x" }, { type: "bogus" }], "invalid_type", "content[1]");
  assert.equal((await getJson(`${u}/${id}`)).body.n_tokens, n);
  const plain = await postJson(servers.plain.url + "/v1/conversations", {});
  await refusedHere("plain", plain.body.id, [{ type: "text", text: "x" }, img], "unsupported_content", "content[1]");
  // A clip whose positions overflow the context once queued is taken back whole.
  const a = servers.audio.url + "/v1/conversations";
  const long = await postJson(a, { prefix: "stone ".repeat(300) });
  assert.equal(long.status, 201);
  const before = (await getJson(`${a}/${long.body.id}`)).body.n_tokens;
  const x = await postJson(`${a}/${long.body.id}/messages`, { content: [{ type: "text", text: "Hear: " }, audioPart(stereo)],
    max_tokens: 2 });
  assert.equal(x.status, 400, JSON.stringify(x.body));
  assert.equal(x.body.error.code, "context_length_exceeded");
  assert.equal((await getJson(`${a}/${long.body.id}`)).body.n_tokens, before);
  // and the conversation goes on.
  const next = await postJson(`${a}/${long.body.id}/messages`, { content: " more", max_tokens: 2, temperature: 0 });
  assert.equal(next.status, 200, JSON.stringify(next.body));
});
