// The compose cluster's gateway through the official openai npm package: upload a
// batch of N chat requests, create it, poll until completed, and check that the
// output holds exactly one line per custom_id. Environment: GW_URL, OPENAI_API_KEY
// (read by the SDK), N. Prints "ok" at the end.
import OpenAI, { toFile } from "openai";

const n = Number(process.env.N || "20");
const client = new OpenAI({ baseURL: process.env.GW_URL, maxRetries: 8, timeout: 60_000 });
const check = (cond, msg) => {
  if (!cond) throw new Error("check failed: " + msg);
};
let lines = "";
for (let i = 0; i < n; i++) {
  lines += JSON.stringify({ custom_id: `c-${i}`, method: "POST", url: "/v1/chat/completions",
    body: { model: "compose/mock", messages: [{ role: "user", content: `hello ${i}` }] } }) + "\n";
}
const file = await client.files.create({ file: await toFile(Buffer.from(lines), "input.jsonl"), purpose: "batch" });
let batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
const deadline = Date.now() + 120_000;
while (batch.status !== "completed") {
  check(!["failed", "expired", "cancelled"].includes(batch.status), `batch ${batch.id} ended ${batch.status}`);
  check(Date.now() < deadline, `batch ${batch.id} still ${batch.status}`);
  await new Promise((r) => setTimeout(r, 300));
  batch = await client.batches.retrieve(batch.id);
}
check(batch.request_counts.completed === n, `request_counts ${JSON.stringify(batch.request_counts)}`);
const out = await (await client.files.content(batch.output_file_id)).text();
const seen = new Set();
for (const l of out.split("\n").filter((s) => s.trim() !== "")) {
  const o = JSON.parse(l);
  check(!seen.has(o.custom_id), `custom_id ${o.custom_id} twice`);
  check(o.response.status_code === 200, `status ${o.response.status_code}`);
  seen.add(o.custom_id);
}
check(seen.size === n, `${seen.size} output lines for ${n} requests`);
console.log(JSON.stringify({ batch: batch.id, completed: n }));
console.log("ok");
