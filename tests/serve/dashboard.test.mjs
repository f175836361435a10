// The dashboard at / in a real browser: Debian's chromium, headless, driven
// by puppeteer-core. The page loads with nothing from elsewhere, lists the
// conversations this test made, and updates as they generate.
import { test } from "node:test";
import assert from "node:assert/strict";
import { env, startServer, postJson, getJson, readSse, requireNpm, within } from "./helpers.mjs";

if (!env.chromium) {
  console.log("skipped: no chromium (scripts/setup-debian.sh installs it)");
  process.exit(77);
}
const puppeteer = requireNpm("puppeteer-core");

test("the dashboard lists conversations and follows their generation", async () => {
  const s = await startServer();
  let browser;
  const streams = [];
  try {
    const ids = [];
    for (const prefix of ["The smith:", "The guard:", "The bard:"])
      ids.push((await postJson(s.url + "/v1/conversations", { prefix })).body.id);

    browser = await within(puppeteer.launch({ executablePath: env.chromium, headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"], timeout: 30000 }), 40000);
    assert.ok(browser, "chromium did not start");
    const page = await browser.newPage();
    const foreign = [], errors = [];
    page.on("request", (r) => { if (!r.url().startsWith(s.url)) foreign.push(r.url()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await page.goto(s.url + "/", { waitUntil: "load", timeout: 20000 });
    assert.equal(await page.title(), "weft serve");

    // Every conversation this test made appears, with its residency.
    await page.waitForFunction((want) => want.every((id) => document.querySelector(`tr[data-id="${id}"]`)),
      { timeout: 10000 }, ids);
    const rows = await page.$$eval("#conversations tbody tr", (trs) => trs.map((tr) => ({
      id: tr.dataset.id, residency: tr.querySelector(".res").textContent, tokens: Number(tr.dataset.tokens) })));
    assert.deepEqual(rows.map((r) => r.id).sort(), [...ids].sort());
    for (const r of rows) assert.equal(r.residency, "resident");

    // Two of them generate (slowly enough to watch: long streams); the page
    // shows their token counts rising and marks them as generating.
    for (const id of ids.slice(0, 2)) {
      const ac = new AbortController();
      const r = await fetch(`${s.url}/v1/conversations/${id}/messages`, { method: "POST", signal: ac.signal,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ content: " Hello", max_tokens: 900, temperature: 0, stream: true }) });
      streams.push({ ac, done: readSse(r).catch(() => null) });
    }
    const tokensOf = (id) => page.$eval(`tr[data-id="${id}"]`, (tr) => Number(tr.dataset.tokens));
    const first = await tokensOf(ids[0]);
    await page.waitForFunction((id, n) => Number(document.querySelector(`tr[data-id="${id}"]`)?.dataset.tokens) > n + 5,
      { timeout: 10000 }, ids[0], first);
    const updates = Number(await page.$eval("#updates", (e) => e.textContent));
    await page.waitForFunction((n) => Number(document.getElementById("updates").textContent) > n + 1,
      { timeout: 5000 }, updates);
    assert.ok(await tokensOf(ids[0]) > first);
    assert.equal(await tokensOf(ids[2]), rows.find((r) => r.id === ids[2]).tokens, "the idle one did not move");

    // The step-time plot has data from the last minute and was drawn.
    const status = (await getJson(s.url + "/v1/status")).body;
    assert.ok(status.step_seconds.length >= 1 && status.step_seconds.every((p) => p.t <= 0 && p.t > -61));
    const drawn = await page.$eval("#plot", (c) => {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let blue = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i + 2] > 150 && d[i] < 60) blue++;
      return blue;
    });
    assert.ok(drawn > 10, `the mean-step line has ${drawn} pixels`);
    assert.deepEqual(foreign, [], "the page fetched from elsewhere");
    assert.deepEqual(errors, []);
  } finally {
    for (const st of streams) st.ac.abort();
    if (browser) await within(browser.close(), 10000);
    assert.equal((await s.stop()).code, 0, s.log());
  }
});
