// The baseline of `npm run bench:cache`: a Worker that does nothing but write a request's body to
// R2 (PUT /<key>) and send an object back (GET /<key>), in workerd through Miniflare with the
// local R2 kept in GDR_HOST_R2, as bench/host.mjs runs the dispatcher. Prints "ready on URL".
// Env: GDR_HOST_PORT, GDR_HOST_R2, GDR_HOST_INSPECTOR (a port).
import { Miniflare, convertV4MiniflareOptions } from "miniflare";

const script = `export default {
  async fetch(request, env) {
    const key = new URL(request.url).pathname.slice(1);
    if (request.method === "PUT") return new Response(String((await env.BUCKET.put(key, request.body)).size));
    const object = await env.BUCKET.get(key);
    if (!object) return new Response(null, { status: 404 });
    return new Response(object.body, { headers: { "content-length": String(object.size) } });
  },
};`;
const mf = new Miniflare(
  convertV4MiniflareOptions({
    host: "127.0.0.1",
    port: Number(process.env.GDR_HOST_PORT),
    inspectorPort: Number(process.env.GDR_HOST_INSPECTOR),
    workers: [
      {
        name: "r2-direct",
        modules: [{ type: "ESModule", path: "r2-direct.mjs", contents: script }],
        compatibilityDate: "2026-11-01",
        r2Buckets: { BUCKET: "bench-direct" },
      },
    ],
    r2Persist: process.env.GDR_HOST_R2,
  }),
);
console.log(`ready on ${await mf.ready}`);
const stop = () => {
  setTimeout(() => process.exit(0), 5_000).unref();
  void mf.dispose().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
