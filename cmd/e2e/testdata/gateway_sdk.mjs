// The OpenAI Batch API through rollout's gateway, driven by the official
// `openai` npm package exactly as a user's code drives OpenAI's service.
// Environment: GW_URL (the gateway's /v1 URL), GW_URL2 (a second gateway's), KEY_A and KEY_B (two keys),
// INPUT (the batch's input file), SLOW_INPUT (a second, longer one to
// cancel), BAD_INPUT (a file whose line 2 is malformed), EMBED_INPUT
// (optional: an /v1/embeddings batch). Every check that fails throws; the
// script prints one JSON object per step on stdout and "ok" at the end.
import fs from "node:fs";
import OpenAI from "openai";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const baseURL = env("GW_URL");
const a = new OpenAI({ baseURL, apiKey: env("KEY_A"), maxRetries: 8, timeout: 120_000 });
const b = new OpenAI({ baseURL: process.env.GW_URL2 || baseURL, apiKey: env("KEY_B"), maxRetries: 2 });
// a2 talks to a second gateway: the test kills the first one mid-batch.
const a2 = new OpenAI({ baseURL: process.env.GW_URL2 || baseURL, apiKey: env("KEY_A"), maxRetries: 8, timeout: 120_000 });
const wrong = new OpenAI({ baseURL, apiKey: "sk-rollout-wrong-key-0000", maxRetries: 0 });
const log = (o) => console.log(JSON.stringify(o));
const check = (cond, msg) => {
  if (!cond) throw new Error("check failed: " + msg);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const terminal = ["completed", "failed", "expired", "cancelled"];

async function expectError(fn, status, what) {
  try {
    await fn();
  } catch (e) {
    check(e instanceof OpenAI.APIError, `${what}: not an APIError: ${e}`);
    check(e.status === status, `${what}: status ${e.status}, want ${status}: ${e.message}`);
    check(typeof e.error?.message === "string", `${what}: no error.message in ${JSON.stringify(e.error)}`);
    check("type" in e.error && "param" in e.error && "code" in e.error, `${what}: error object lacks type/param/code: ${JSON.stringify(e.error)}`);
    return e;
  }
  throw new Error(`${what}: no error, want ${status}`);
}

async function waitFor(client, id, statuses, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let cur;
  for (;;) {
    cur = await client.batches.retrieve(id);
    if (statuses.includes(cur.status)) return cur;
    check(!terminal.includes(cur.status), `batch ${id} ended ${cur.status} (errors ${JSON.stringify(cur.errors)}), want ${statuses}`);
    check(Date.now() < deadline, `batch ${id} still ${cur.status} after ${timeoutMs} ms`);
    await sleep(200);
  }
}

function readJSONL(text) {
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
}

// Every input line has exactly one output or error line, with its custom_id.
function checkOutput(inputPath, outText, errText, { wantErrors = 0, errCode = null } = {}) {
  const input = readJSONL(fs.readFileSync(inputPath, "utf8"));
  const out = readJSONL(outText);
  const errs = readJSONL(errText);
  const seen = new Map();
  for (const l of [...out, ...errs]) {
    check(typeof l.id === "string" && l.id.startsWith("batch_req_"), `line id ${l.id}`);
    check(!seen.has(l.custom_id), `custom_id ${l.custom_id} twice`);
    seen.set(l.custom_id, l);
  }
  for (const req of input) {
    const l = seen.get(req.custom_id);
    check(l, `custom_id ${req.custom_id} has no line`);
  }
  check(seen.size === input.length, `${seen.size} lines for ${input.length} requests`);
  for (const l of out) {
    check(l.error === null, `output line ${l.custom_id} has an error`);
    check(l.response.status_code === 200, `status ${l.response.status_code}`);
    check(typeof l.response.request_id === "string" && l.response.request_id !== "", "request_id");
    const req = input.find((r) => r.custom_id === l.custom_id);
    if (req.url === "/v1/embeddings") {
      check(Array.isArray(l.response.body.data) && l.response.body.data[0].object === "embedding", `embedding body of ${l.custom_id}`);
    } else {
      const want = "ECHO:" + req.body.messages.at(-1).content;
      check(l.response.body.choices[0].message.content === want, `body of ${l.custom_id}: ${JSON.stringify(l.response.body)} want ${want}`);
    }
  }
  check(errs.length === wantErrors, `${errs.length} error lines, want ${wantErrors}`);
  for (const l of errs) {
    check(l.response === null && l.error && typeof l.error.message === "string", `error line ${JSON.stringify(l)}`);
    if (errCode) check(l.error.code === errCode, `error code ${l.error.code}, want ${errCode}`);
  }
  return { out: out.length, errors: errs.length };
}

async function text(client, id) {
  const resp = await client.files.content(id);
  return await resp.text();
}

// 1. A wrong key is a 401 in OpenAI's shape; the SDK raises AuthenticationError.
const e401 = await expectError(() => wrong.batches.list(), 401, "wrong key");
check(e401 instanceof OpenAI.AuthenticationError, "401 is an AuthenticationError");
check(e401.code === "invalid_api_key", `401 code ${e401.code}`);
log({ step: "401", message: e401.message });

// 2. A malformed file is refused with the line named.
const e400 = await expectError(() => a.files.create({ file: fs.createReadStream(env("BAD_INPUT")), purpose: "batch" }), 400, "malformed file");
check(e400 instanceof OpenAI.BadRequestError, "400 is a BadRequestError");
check(/line 2\b/.test(e400.message), `the 400 names line 2: ${e400.message}`);
log({ step: "malformed", message: e400.message });

// 3. Upload, create, and (in another batch) cancel mid-run.
const f = await a.files.create({ file: fs.createReadStream(env("INPUT")), purpose: "batch" });
check(f.id.startsWith("file-") && f.object === "file" && f.purpose === "batch", `file ${JSON.stringify(f)}`);
check(f.bytes === fs.statSync(env("INPUT")).size, `file bytes ${f.bytes}`);
const got = await a.files.retrieve(f.id);
check(got.id === f.id && got.filename === f.filename, "files.retrieve");
const uploaded = await text(a, f.id);
check(uploaded === fs.readFileSync(env("INPUT"), "utf8"), "files.content returns the upload byte for byte");

const batch = await a.batches.create({ input_file_id: f.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { suite: "e2e" } });
check(batch.id.startsWith("batch_") && batch.object === "batch", `batch ${JSON.stringify(batch)}`);
check(["validating", "in_progress"].includes(batch.status), `new batch is ${batch.status}`);
check(batch.metadata.suite === "e2e", "metadata kept");
log({ step: "created", batch: batch.id, total: batch.request_counts.total });
// From here on, the second gateway: the first may be dead.

const fs2 = await a2.files.create({ file: fs.createReadStream(env("SLOW_INPUT")), purpose: "batch" });
const slow = await a2.batches.create({ input_file_id: fs2.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
// Cancel it mid-run: once some of its requests are done.
for (const deadline = Date.now() + 120_000; ; ) {
  const cur = await a2.batches.retrieve(slow.id);
  if (cur.request_counts.completed > 0) break;
  check(cur.status === "in_progress" || cur.status === "validating", `slow batch is ${cur.status} before the cancel`);
  check(Date.now() < deadline, "the slow batch never started");
  await sleep(50);
}
const c = await a2.batches.cancel(slow.id);
check(["cancelling", "cancelled", "finalizing"].includes(c.status), `cancel answered ${c.status}`);
log({ step: "cancel", batch: slow.id, status: c.status });

let embed = null;
if (process.env.EMBED_INPUT) {
  const fe = await a2.files.create({ file: fs.createReadStream(process.env.EMBED_INPUT), purpose: "batch" });
  embed = await a2.batches.create({ input_file_id: fe.id, endpoint: "/v1/embeddings", completion_window: "24h" });
  log({ step: "embeddings-created", batch: embed.id });
}

// 4. Poll to completed (the test kills the leader meanwhile) and compare.
const done = await waitFor(a2, batch.id, ["completed"], 240_000);
check(done.request_counts.completed === done.request_counts.total && done.request_counts.failed === 0, `counts ${JSON.stringify(done.request_counts)}`);
check(done.completed_at >= done.created_at && done.in_progress_at >= done.created_at, "timestamps");
check(done.output_file_id && done.error_file_id === null, `files ${done.output_file_id} ${done.error_file_id}`);
const res = checkOutput(env("INPUT"), await text(a2, done.output_file_id), "");
log({ step: "completed", batch: done.id, lines: res.out });

const cancelled = await waitFor(a2, slow.id, ["cancelled"], 120_000);
const cOut = cancelled.output_file_id ? await text(a2, cancelled.output_file_id) : "";
const cErr = cancelled.error_file_id ? await text(a2, cancelled.error_file_id) : "";
const cres = checkOutput(env("SLOW_INPUT"), cOut, cErr, { wantErrors: readJSONL(cErr).length, errCode: null });
check(cres.errors > 0, "a batch cancelled mid-run has requests that did not run");
check(cres.out > 0, "a batch cancelled mid-run keeps the requests that finished");
check(readJSONL(cErr).every((l) => l.error.code === "batch_cancelled" || l.error.code === "item_failed"), "error codes of the cancelled batch");
log({ step: "cancelled", batch: slow.id, done: cres.out, not_run: cres.errors });

if (embed) {
  const e = await waitFor(a2, embed.id, ["completed"], 120_000);
  const er = checkOutput(process.env.EMBED_INPUT, await text(a2, e.output_file_id), "");
  log({ step: "embeddings", batch: e.id, lines: er.out });
}

// 5. Lists page with after/limit; the SDK's auto-pagination walks them.
const ids = [];
for await (const x of a2.batches.list({ limit: 1 })) ids.push(x.id);
check(ids.includes(batch.id) && ids.includes(slow.id), `batches listed: ${ids}`);
check(new Set(ids).size === ids.length, "no batch listed twice");
const page = await a2.batches.list({ limit: 1 });
check(page.data.length === 1 && page.has_more === true, `first page ${JSON.stringify(page.data.map((x) => x.id))} has_more ${page.has_more}`);
const files = [];
for await (const x of a2.files.list()) files.push(x.id);
check(files.includes(f.id) && files.includes(done.output_file_id), `files listed: ${files}`);
log({ step: "lists", batches: ids.length, files: files.length });

// 6. Another key sees nothing of it.
check((await b.batches.list()).data.length === 0, "key B lists no batch");
await expectError(() => b.batches.retrieve(batch.id), 404, "key B reads A's batch");
await expectError(() => b.files.content(done.output_file_id), 404, "key B reads A's output");
await expectError(() => b.batches.cancel(batch.id), 404, "key B cancels A's batch");

// 7. Deleting a file.
const del = await (a2.files.delete ?? a2.files.del).call(a2.files, fs2.id);
check(del.deleted === true && del.id === fs2.id, `delete ${JSON.stringify(del)}`);
await expectError(() => a2.files.retrieve(fs2.id), 404, "deleted file");
log({ step: "deleted", file: fs2.id });
console.log("ok");
