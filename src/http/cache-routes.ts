// The Actions cache's v1 API (`_apis/artifactcache`, as @actions/cache 6.3.0 and BuildKit call it),
// served twice: under a Gitea runner's capability (`/cache/<capability>/_apis/…`, the runner's
// cache.external_server), and at the origin's root for a Forgejo runner's proxy, which drops the
// path but keeps the query (`/_apis/…?gdr=<holder>`) and signs each request with the job's own
// secret. Downloads come back by a signed URL (`/cache/dl/<grant>`), since the client sends no
// credential on them. Handlers parse, find the job, call the cache's operations and map the result.
// Nothing here writes a capability, a secret or a signed URL to a log.
import { Hono, type Context } from "hono";
import { signDownload, verifyCapability, verifyDownload } from "../cache/capability.ts";
import { verifyForgejoMac } from "../cache/forgejo-mac.ts";
import { parseLookup } from "../cache/match.ts";
import { parseContentRange } from "../cache/parts.ts";
import { asked, CacheRefusal, commitEntry, lookupEntry, readEntry, reserveEntry, uploadChunk, type CacheJob } from "../cache/service.ts";
import type { CacheSite } from "../cache/site.ts";

/** A download's signed URL holds this long: the client fetches it at once. */
export const DOWNLOAD_TTL_S = 10 * 60;
/** The most a reserve's JSON body may hold. */
const MAX_JSON = 16 * 1024;

type Site = (c: Context) => Promise<CacheSite | undefined>;

const api = "/_apis/artifactcache";

export function cacheRoutes(siteOf: Site) {
  const app = new Hono();
  // Whose each request is, once its job is known: its refusals are counted for that repository.
  const seen = new WeakMap<Request, { s: CacheSite; repo: string }>();
  const known = <T extends { s: CacheSite; job: CacheJob }>(c: Context, who: T): T => {
    seen.set(c.req.raw, { s: who.s, repo: who.job.repo });
    return who;
  };
  const site = async (c: Context) => {
    const s = await siteOf(c);
    if (!s) throw new CacheRefusal(404, "input", "the Actions cache is off: no CACHE_BUCKET binding");
    return s;
  };
  const gitea = async (c: Context) => {
    const s = await site(c);
    const holder = await verifyCapability(s.key, c.req.param("cap") ?? "");
    if (!holder) throw new CacheRefusal(403, "scope", "cache read denied: this cache URL is not valid");
    return known(c, { s, job: await s.job(holder), holder });
  };
  const forgejo = async (c: Context) => {
    const s = await site(c);
    const [assignment, incarnation, ...rest] = (c.req.query("gdr") ?? "").split("~");
    if (!assignment || !incarnation || rest.length) throw new CacheRefusal(403, "scope", "validation error");
    const holder = { assignment, incarnation };
    const signed = await verifyForgejoMac(c.req.raw.headers, await s.secret(holder), s.now());
    if (typeof signed === "string") throw new CacheRefusal(403, "scope", "validation error");
    const job = await s.job(holder, signed);
    if (signed.repo !== job.repo) throw new CacheRefusal(403, "scope", "validation error");
    return known(c, { s, job, holder });
  };

  for (const [prefix, who] of [
    [`/cache/:cap${api}`, gitea],
    [api, forgejo],
  ] as const) {
    app.get(`${prefix}/cache`, async (c) => {
      const { s, job, holder } = await who(c);
      const lookup = await asked("input", () => parseLookup(c.req.query("keys"), c.req.query("version")));
      const entry = await s.open((d) => lookupEntry(d, job, lookup));
      s.log({ event: entry ? "cache_hit" : "cache_miss", repository: job.repo, assignment: holder.assignment });
      s.count(job.repo, entry ? { hits: 1 } : { misses: 1 });
      if (!entry) return c.body(null, 204);
      const archiveLocation =
        who === gitea
          ? `${s.publicUrl}/cache/dl/${await signDownload(s.key, { ...holder, entry: String(entry.id), expires: Math.floor(s.now() / 1000) + DOWNLOAD_TTL_S })}`
          : `${c.req.header("Forgejo-Cache-Host") ?? ""}/${c.req.header("Forgejo-Cache-RunId") ?? ""}${api}/artifacts/${entry.id}`;
      return c.json({ result: "hit", archiveLocation, cacheKey: entry.key, scope: entry.scope, cacheVersion: entry.version });
    });
    // The debug listing the client asks after a miss: never a 5xx, which would fail the restore.
    app.get(`${prefix}/caches`, (c) => c.json({ totalCount: 0, artifactCaches: [] }));
    app.post(`${prefix}/caches`, async (c) => {
      const { s, job } = await who(c);
      const body = await readJson(c);
      const cacheId = await s.open((d) => reserveEntry(d, job, { key: body.key, version: body.version, cacheSize: body.cacheSize }));
      return c.json({ cacheId });
    });
    app.patch(`${prefix}/caches/:id`, async (c) => {
      const { s, job } = await who(c);
      const range = await asked("input", () => parseContentRange(c.req.header("content-range")));
      if (!c.req.raw.body) throw new CacheRefusal(400, "chunk", "a chunk needs a body");
      const body = c.req.raw.body as ReadableStream<Uint8Array>;
      await s.open((d) => uploadChunk(d, job, idOf(c), range, body));
      return c.json({});
    });
    app.post(`${prefix}/caches/:id`, async (c) => {
      const { s, job, holder } = await who(c);
      const body = await readJson(c);
      // A commit sent again (its answer lost) is answered as done, and told and counted once.
      if (!(await s.open((d) => commitEntry(d, job, idOf(c), body.size)))) return c.json({});
      s.log({ event: "cache_saved", repository: job.repo, assignment: holder.assignment, ...(typeof body.size === "number" ? { bytes: body.size } : {}) });
      if (typeof body.size === "number") s.count(job.repo, { bytesIn: body.size });
      return c.json({});
    });
    app.post(`${prefix}/clean`, (c) => c.json({}));
  }
  app.get(`${api}/artifacts/:id`, async (c) => {
    const { s, job } = await forgejo(c);
    return send(c, s, job.repo, idOf(c));
  });
  app.get("/cache/dl/:grant", async (c) => {
    const s = await site(c);
    const grant = await verifyDownload(s.key, c.req.param("grant"), s.now());
    if (!grant) throw new CacheRefusal(403, "scope", "this download URL is not valid, or it expired");
    const { job } = known(c, { s, job: await s.job(grant) });
    return send(c, s, job.repo, Number(grant.entry));
  });

  app.onError((err, c) => {
    const refusal = err instanceof CacheRefusal ? err : undefined;
    const at = seen.get(c.req.raw);
    if (refusal && at) at.s.count(at.repo, { refused: refusal.reason });
    if (!refusal) console.error(JSON.stringify({ event: "cache_error", route: c.req.routePath, message: err.name }));
    // 503: the client tries a 5xx again only when it is 502, 503 or 504; a failure that passes costs nothing.
    const status = refusal?.status ?? 503;
    const message = refusal?.message ?? "the cache failed this request; try again (without it, the job goes on)";
    return c.json({ error: message, message }, status);
  });
  return app;
}

/** A committed entry's bytes, whole (200) or from a Range's first byte (206, as BuildKit asks), always with Content-Length. */
async function send(c: Context, s: CacheSite, repo: string, id: number) {
  const range = /^bytes=(\d{1,15})-(\d{0,15})$/.exec(c.req.header("range") ?? "");
  const offset = range ? Number(range[1]) : 0;
  const last = range?.[2] ? Number(range[2]) : undefined;
  const blob = await s.open((d) => readEntry(d, repo, id, range ? { offset, ...(last !== undefined ? { length: last - offset + 1 } : {}) } : undefined));
  if (!blob) throw new CacheRefusal(404, "not-reserved", `cache ${id} is not saved`);
  s.count(repo, { bytesOut: blob.length });
  const headers: Record<string, string> = { "content-type": "application/octet-stream", "content-length": String(blob.length), "accept-ranges": "bytes" };
  if (range) headers["content-range"] = `bytes ${blob.offset}-${blob.offset + blob.length - 1}/${blob.size}`;
  return c.body(blob.body, range ? 206 : 200, headers);
}

const idOf = (c: Context) => Number(c.req.param("id"));

async function readJson(c: Context): Promise<Record<string, unknown>> {
  const text = await c.req.text();
  if (text.length > MAX_JSON) throw new CacheRefusal(400, "input", `the body is over ${MAX_JSON} bytes`);
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value === "object" && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // said below
  }
  throw new CacheRefusal(400, "input", "the body must be a JSON object");
}
