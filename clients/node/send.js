'use strict';
// node send.js < events.jsonl: one event a line, each written exactly once; prints the producer's counts.
// REDIS_URL, PIPELINE_NAMESPACE and STREAM_MAX_ENTRIES as the pipeline reads them; BATCH_SIZE events a transaction.
const readline = require('node:readline');
const { Producer, MAX_STREAM_ENTRIES } = require('./producer');

async function main() {
  const env = process.env;
  const producer = await new Producer({
    url: env.REDIS_URL ?? 'redis://127.0.0.1:6379/0',
    namespace: env.PIPELINE_NAMESPACE ?? 'wm',
    batchSize: Number(env.BATCH_SIZE ?? 1000),
    maxStreamEntries: Number(env.STREAM_MAX_ENTRIES ?? MAX_STREAM_ENTRIES),
  }).connect();
  try {
    for await (const line of readline.createInterface({ input: process.stdin })) {
      if (line.trim()) await producer.send(JSON.parse(line));
    }
  } finally {
    await producer.close();
  }
  console.log(JSON.stringify(producer.stats));
}

main().catch(err => {
  console.error(`send.js: ${err.message}`);
  process.exitCode = 1;
});
