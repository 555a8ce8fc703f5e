// Runs the deploy bundle (`wrangler deploy --dry-run --outdir`) in workerd through Miniflare, for
// the bench: the same runtime as `wrangler dev`, without its dev-only proxy (a second workerd
// that every request crosses) and without forwarding each log line through the inspector. On the
// bench's 2 cores those cost more CPU per job than the Worker itself (README, Performance).
// Env: GDR_HOST_BUNDLE (dir with index.js), GDR_HOST_PORT, GDR_HOST_VARS (JSON; never argv);
// GDR_HOST_R2 (a directory): the R2 buckets of wrangler.jsonc, kept there, as `wrangler dev`'s local R2.
// Prints "ready on URL", then the Worker's log lines; cron: GET /cdn-cgi/local/scheduled.
import { Miniflare, convertV4MiniflareOptions } from "miniflare";
import { unstable_readConfig } from "wrangler";

const dir = process.env.GDR_HOST_BUNDLE;
const config = unstable_readConfig({ config: "wrangler.jsonc" });
const mf = new Miniflare(
  convertV4MiniflareOptions({
    host: "127.0.0.1",
    port: Number(process.env.GDR_HOST_PORT),
    unsafeTriggerHandlers: true,
    // For a CPU profile (Chrome DevTools protocol); off unless asked for.
    ...(process.env.BENCH_INSPECTOR_PORT ? { inspectorPort: Number(process.env.BENCH_INSPECTOR_PORT) } : {}),
    workers: [
      {
        name: config.name,
        modules: [{ type: "ESModule", path: `${dir}/index.js` }],
        modulesRoot: dir,
        compatibilityDate: config.compatibility_date,
        compatibilityFlags: config.compatibility_flags,
        durableObjects: Object.fromEntries(config.durable_objects.bindings.map((b) => [b.name, { className: b.class_name, useSQLite: true }])),
        bindings: { ...config.vars, ...JSON.parse(process.env.GDR_HOST_VARS ?? "{}") },
        ...(process.env.GDR_HOST_R2 ? { r2Buckets: Object.fromEntries((config.r2_buckets ?? []).map((b) => [b.binding, b.bucket_name])) } : {}),
      },
    ],
    ...(process.env.GDR_HOST_R2 ? { r2Persist: process.env.GDR_HOST_R2 } : {}),
  }),
);
const url = await mf.ready;
console.log(`ready on ${url}`);
// A dispose that never settles must not leave this process, and the workerd Miniflare restarts,
// behind: two such hosts were found alive after this session's bench runs (cause not traced).
const stop = () => {
  setTimeout(() => process.exit(0), 5_000).unref();
  void mf.dispose().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
