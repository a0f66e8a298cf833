// A graphile-worker process for benchmarks/graphile.py: one no-op task, `noop`, and the
// worker options from the environment (GW_*), so that the Python harness starts it as it
// starts our workers and pgqueuer's. `node runner.js migrate` installs the schema only.
// With GW_LATENCY_FILE each job writes "<payload.n> <epoch seconds>" when it starts.
"use strict";
const fs = require("fs");
const { run, runMigrations } = require("graphile-worker");

const number = (name, fallback) =>
  process.env[name] === undefined ? fallback : Number(process.env[name]);

// Date.now() counts whole milliseconds: each start would be early by 0.5 ms on average
// (graphile-worker's latency rows read 0.4-0.5 ms too low until 2026-12-01). The performance
// clock has microseconds; its epoch is taken at the instant Date.now() ticks over to the next
// millisecond (performance.timeOrigin alone was 0.075 ms ahead of Python's time.time() here).
const { performance } = require("perf_hooks");
const epochOffset = (() => {
  const before = Date.now();
  let now;
  while ((now = Date.now()) === before) {}
  return now - performance.now();
})();
const epochSeconds = () => (epochOffset + performance.now()) / 1000;

function preset() {
  const worker = {
    connectionString: process.env.GW_DSN,
    concurrentJobs: number("GW_CONCURRENCY", 1),
    maxPoolSize: number("GW_MAX_POOL_SIZE", 10),
    pollInterval: number("GW_POLL_INTERVAL", 2000),
    preparedStatements: process.env.GW_PREPARED !== "0",
  };
  if (process.env.GW_LOCAL_QUEUE) {
    worker.localQueue = { size: number("GW_LOCAL_QUEUE", 500) };
  }
  if (process.env.GW_COMPLETE_DELAY !== undefined) {
    worker.completeJobBatchDelay = number("GW_COMPLETE_DELAY", -1);
    worker.failJobBatchDelay = number("GW_FAIL_DELAY", -1);
  }
  return { worker };
}

async function main() {
  if (process.argv[2] === "migrate") {
    await runMigrations({ preset: preset() });
    return;
  }
  const out = process.env.GW_LATENCY_FILE ? fs.openSync(process.env.GW_LATENCY_FILE, "a") : null;
  const taskList = {
    noop: async (payload) => {
      if (out !== null) {
        fs.writeSync(out, `${payload.n} ${epochSeconds()}\n`);
      }
    },
  };
  const runner = await run({ preset: preset(), taskList, noHandleSignals: false });
  console.error("graphile-worker running");
  await runner.promise;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
