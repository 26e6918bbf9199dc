// The openai npm package against a gateway whose tenant's queue is full:
// batches.create is answered 429 in OpenAI's shape for a full enqueued
// limit. Environment: INPUT (a batch input file). The Go test refuses the
// first five creates it receives and takes the sixth. Prints one JSON
// object per step and "ok" at the end; every failed check throws.
import fs from "node:fs";
import OpenAI from "openai";

const log = (o) => console.log(JSON.stringify(o));
const check = (cond, msg) => {
  if (!cond) throw new Error("check failed: " + msg);
};
const create = (c, file) =>
  c.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });

async function refused(c, file, step) {
  const t0 = Date.now();
  try {
    await create(c, file);
  } catch (e) {
    check(e instanceof OpenAI.RateLimitError, `${step}: ${e} is not a RateLimitError`);
    check(e.status === 429, `${step}: status ${e.status}`);
    check(e.code === "token_limit_exceeded", `${step}: code ${e.code}`);
    check(e.type === "requests", `${step}: type ${e.type}`);
    check(e.param === null, `${step}: param ${e.param}`);
    check(/Enqueued request limit reached/.test(e.error.message), `${step}: message ${e.error.message}`);
    log({ step, status: e.status, code: e.code, type: e.type, message: e.message, ms: Date.now() - t0 });
    return;
  }
  throw new Error(`${step}: the create succeeded; want a 429`);
}

// The SDK's default: two retries of a 429, each a new create, then the error.
const def = new OpenAI();
const file = await def.files.create({ file: fs.createReadStream(process.env.INPUT), purpose: "batch" });
await refused(def, file, "default-retries");
// maxRetries 0: the 429 comes back at once.
await refused(new OpenAI({ maxRetries: 0 }), file, "no-retries");
// The queue frees between the first try and the retry: the retry creates
// the batch, once.
const b = await create(def, file);
check(b.status === "in_progress", `the retried create is ${b.status}`);
const page = await def.batches.list();
check(page.data.length === 1 && page.data[0].id === b.id, `batches listed: ${JSON.stringify(page.data.map((x) => x.id))}`);
log({ step: "retry-succeeds", id: b.id });
console.log("ok");
