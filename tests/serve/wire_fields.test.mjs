// weft serve: what `weft bench mixed --wire` relies on — a prompt of token
// ids on /v1/completions, ignore_eos, usage in every streamed chunk
// (stream_options.continuous_usage_stats) and the --step-tokens budget.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { env, startServer, reference, postJson, readSse } from "./helpers.mjs";

test("token-array prompts: the same text as the same tokens from a string; bad ids are named", async () => {
  const s = await startServer(["--step-tokens", "16"]);
  try {
    const u = s.url + "/v1/completions";
    const byText = await postJson(u, { model: "tiny", prompt: "The smith", max_tokens: 6, temperature: 0 });
    assert.equal(byText.status, 200, JSON.stringify(byText.body));
    const ref = reference({ prompts: ["The smith"], max_tokens: 6, temperature: 0 });
    assert.equal(byText.body.choices[0].text, ref.text);
    // The reference's tokens (BOS included, as the server adds it to text).
    const ids = ref.prompt_token_ids;
    assert.ok(Array.isArray(ids) && ids.length > 0);
    {
      const byIds = await postJson(u, { model: "tiny", prompt: ids, max_tokens: 6, temperature: 0 });
      assert.equal(byIds.status, 200, JSON.stringify(byIds.body));
      assert.equal(byIds.body.choices[0].text, byText.body.choices[0].text);
      assert.equal(byIds.body.usage.prompt_tokens, ids.length);
      const nested = await postJson(u, { model: "tiny", prompt: [ids], max_tokens: 6, temperature: 0 });
      assert.equal(nested.body.choices[0].text, byText.body.choices[0].text);
    }
    const bad = await postJson(u, { model: "tiny", prompt: [1, 2, 99999999], max_tokens: 2 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, "invalid_value");
    assert.match(bad.body.error.message, /'prompt\[2\]' is 99999999; token ids must be in \[0, \d+\)/);
    const mixed = await postJson(u, { model: "tiny", prompt: [1, "a"], max_tokens: 2 });
    assert.equal(mixed.status, 400);
    assert.equal(mixed.body.error.code, "invalid_type");
  } finally {
    await s.stop();
  }
});

test("ignore_eos and continuous usage: every chunk counts the tokens; the count reaches max_tokens", async () => {
  const s = await startServer(["--step-tokens", "8"]);
  try {
    const u = s.url + "/v1/completions";
    const ids = reference({ prompts: ["Hello"], max_tokens: 1, temperature: 0 }).prompt_token_ids;
    for (let seed = 1; seed <= 4; ++seed) {
      const body = { model: "tiny", prompt: ids, max_tokens: 40, temperature: 1.5, seed,
        ignore_eos: true, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } };
      const r = await fetch(u, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify(body), signal: AbortSignal.timeout(30000) });
      assert.equal(r.status, 200);
      const { events, done } = await readSse(r);
      assert.ok(done);
      let last = 0;
      for (const ev of events) {
        assert.ok(ev.usage, JSON.stringify(ev));
        assert.ok(ev.usage.completion_tokens >= last, "usage never goes back");
        last = ev.usage.completion_tokens;
      }
      assert.equal(last, 40, "ignore_eos: all 40 tokens, whatever was sampled");
      const plain = await postJson(u, { ...body, stream: false });
      assert.equal(plain.body.usage.completion_tokens, 40);
    }
  } finally {
    await s.stop();
  }
});

test("--step-tokens above --batch is refused with both values", () => {
  const r = spawnSync(env.cli, ["serve", "-m", env.model, "--port", "0", "--batch", "32", "--step-tokens", "64"],
    { encoding: "utf8", timeout: 30000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stdout + r.stderr, /--step-tokens 64 is above --batch 32/);
});
