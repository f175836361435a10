// weft serve's function calling through the official `openai` npm client:
// required calls parse and fit their schemas, streamed too, and go back in
// with their results; the chat template's call format (llama3, mistral) is
// the one the reply is written in. (The refusals are in openai.test.mjs.)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, requireNpm, chat } from "./helpers.mjs";

const OpenAI = requireNpm("openai");
let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
});
after(async () => {
  const r = await server.stop();
  assert.equal(r.code, 0, "weft serve exits 0 on SIGTERM:\n" + server.log());
});

test("tools: a required call parses and matches its schema, streamed too; results go back in; \"none\" gives no call", async () => {
  const tools = [
    { type: "function", function: { name: "give_item", description: "Give the player an item.",
      parameters: { type: "object", properties: { item: { enum: ["sword", "shield"] },
        count: { type: "integer", minimum: 1, maximum: 9 } }, required: ["item", "count"], additionalProperties: false } } },
    { type: "function", function: { name: "open_gate", description: "Open the gate.",
      parameters: { type: "object", properties: {}, additionalProperties: false } } },
  ];
  const valid = (call) => {
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === "give_item") {
      assert.ok(["sword", "shield"].includes(args.item), call.function.arguments);
      assert.ok(Number.isInteger(args.count) && args.count >= 1 && args.count <= 9, call.function.arguments);
    } else {
      assert.equal(call.function.name, "open_gate");
      assert.deepEqual(args, {});
    }
  };
  const names = new Set();
  for (const seed of [1, 2, 3, 4]) {
    const req = chat("I need a weapon.", { seed, max_tokens: 200, tools, tool_choice: "required" });
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r));
    assert.equal(m.content, null);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].type, "function");
    valid(m.tool_calls[0]);
    names.add(m.tool_calls[0].function.name);
    // The call and its result go back in: a reply that reads them (more prompt tokens than the first turn).
    const follow = await client.chat.completions.create({ ...chat("I need a weapon.", { seed, max_tokens: 8 }),
      messages: [...req.messages, m, { role: "tool", tool_call_id: m.tool_calls[0].id, content: "{\"ok\": true}" }],
      tools });
    assert.ok(follow.usage.prompt_tokens > r.usage.prompt_tokens + 10, "the call and its result are in the prompt");
  }
  // A named function: that one.
  const named = await client.chat.completions.create(chat("Let me in.", { seed: 5, max_tokens: 200, tools,
    tool_choice: { type: "function", function: { name: "open_gate" } } }));
  assert.equal(named.choices[0].message.tool_calls[0].function.name, "open_gate");
  // Streamed: no call text as content; the call in the last chunk.
  let content = "", calls = [], finish = null;
  for await (const ch of await client.chat.completions.create(chat("I need a weapon.", { seed: 1, max_tokens: 200,
    tools, tool_choice: "required", stream: true }))) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.content) content += d.content;
    if (d.tool_calls) calls = calls.concat(d.tool_calls);
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(content, "");
  assert.equal(finish, "tool_calls");
  assert.equal(calls.length, 1);
  valid(calls[0]);
  // "none": no tools at all, a plain reply.
  const none = await client.chat.completions.create(chat("Hello.", { tools, tool_choice: "none" }));
  assert.equal(none.choices[0].finish_reason === "tool_calls", false);
  assert.equal(none.choices[0].message.tool_calls, undefined);
});

test("tools in the chat template's format: llama3 and mistral calls parse, results go back in", async () => {
  const tools = [{ type: "function", function: { name: "open_gate", description: "Open the gate.",
    parameters: { type: "object", properties: { now: { type: "boolean" } }, required: ["now"], additionalProperties: false } } }];
  for (const template of ["llama3", "mistral-v7"]) {
    const s = await startServer(["--chat-template", template]);
    try {
      const c = new OpenAI({ baseURL: s.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
      const req = chat("Let me in.", { seed: 3, max_tokens: 200, tools, tool_choice: "required" });
      const r = await c.chat.completions.create({ ...req, logprobs: true });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, "tool_calls", template + ": " + JSON.stringify(r));
      // The reply's tokens show the wrapper the template's format writes.
      const text = r.choices[0].logprobs.content.map((t) => t.token).join("");
      assert.ok(text.startsWith(template === "llama3" ? "{" : "[TOOL_CALLS]["), template + ": " + text);
      assert.equal(m.tool_calls[0].function.name, "open_gate");
      assert.equal(typeof JSON.parse(m.tool_calls[0].function.arguments).now, "boolean");
      const follow = await c.chat.completions.create({ ...chat("Let me in.", { seed: 3, max_tokens: 8 }),
        messages: [...req.messages, m, { role: "tool", tool_call_id: m.tool_calls[0].id, content: "opened" }], tools });
      assert.ok(follow.usage.prompt_tokens > r.usage.prompt_tokens + 5, template + ": the call and its result are in the prompt");
    } finally {
      assert.equal((await s.stop()).code, 0, s.log());
    }
  }
});
