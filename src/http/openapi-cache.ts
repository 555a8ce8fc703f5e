// The Actions cache's routes in the OpenAPI document (cache-routes.ts): the v1 API twice, under a
// Gitea runner's capability and at the root for a Forgejo runner's proxy, and the downloads.
import type { OpenAPIRegistry } from "@asteasolutions/zod-to-openapi";
import { z } from "zod";

const refusal = z
  .object({ error: z.string(), message: z.string().describe("What @actions/cache shows the job.") })
  .meta({ id: "CacheRefusal", description: "A cache request refused; the job goes on without the cache." });
const json = (schema: z.ZodType, description: string) => ({ description, content: { "application/json": { schema } } });
const errors = {
  400: json(refusal, "A parameter or body breaks a rule (its message names it), a chunk off the upload's cut, a commit that does not check out."),
  403: json(refusal, "The capability, MAC or signed URL does not hold, or the job ended."),
  404: json(refusal, "No such reservation or entry in the job's repository, or the cache is off (no CACHE_BUCKET)."),
  409: json(refusal, "The key is saved already (entries are immutable), or another job is saving it."),
  503: json(refusal, "Try again: the job is not claimed yet, the upload's part size is not known yet, or the storage (R2, NATS) failed this request."),
} as const;
const pick = <K extends keyof typeof errors>(...codes: K[]) => Object.fromEntries(codes.map((c) => [c, errors[c]])) as Pick<typeof errors, K>;
const empty = json(z.object({}), "Done.");
const bytes = { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } };
const download = {
  200: { description: "The archive, with Content-Length.", content: bytes },
  206: { description: "From the Range's first byte (BuildKit), with Content-Range.", content: bytes },
};

export function registerCachePaths(r: OpenAPIRegistry): void {
  const where = [
    { prefix: "/cache/{cap}/_apis/artifactcache", params: { cap: z.string() }, who: "A Gitea runner's capability (its cache.external_server)." },
    {
      prefix: "/_apis/artifactcache",
      params: {},
      who: "A Forgejo runner's proxy: `gdr` names the runner; the Forgejo-Cache-* headers are signed with its job's secret.",
    },
  ];
  for (const { prefix, params, who } of where) {
    const query = prefix.startsWith("/_apis") ? { gdr: z.string() } : {};
    const at = (path: string, extra: Record<string, z.ZodType> = {}) => ({ params: z.object({ ...params, ...extra }), query: z.object(query) });
    r.registerPath({
      method: "get",
      path: `${prefix}/cache`,
      summary: "Find a cache entry (actions/cache restore)",
      description: who,
      request: { ...at(prefix), query: z.object({ ...query, keys: z.string(), version: z.string() }) },
      responses: {
        200: json(
          z.object({ result: z.literal("hit"), archiveLocation: z.string(), cacheKey: z.string(), scope: z.string(), cacheVersion: z.string() }),
          "A hit: the entry's key, and where to download it.",
        ),
        204: { description: "A miss." },
        ...pick(400, 403, 404, 503),
      },
    });
    r.registerPath({
      method: "get",
      path: `${prefix}/caches`,
      summary: "The debug listing after a miss: always empty",
      description: who,
      request: at(prefix),
      responses: { 200: json(z.object({ totalCount: z.number(), artifactCaches: z.array(z.object({})) }), "Nothing listed.") },
    });
    r.registerPath({
      method: "post",
      path: `${prefix}/caches`,
      summary: "Reserve a key (actions/cache save)",
      description: who,
      request: {
        ...at(prefix),
        body: { content: { "application/json": { schema: z.object({ key: z.string(), version: z.string(), cacheSize: z.number().optional() }) } } },
      },
      responses: { 200: json(z.object({ cacheId: z.number() }), "Reserved."), ...pick(400, 403, 404, 409, 503) },
    });
    r.registerPath({
      method: "patch",
      path: `${prefix}/caches/{id}`,
      summary: "Upload one chunk (Content-Range: bytes a-b/*)",
      description: who,
      request: at(prefix, { id: z.string() }),
      responses: { 200: empty, ...pick(400, 403, 404, 503) },
    });
    r.registerPath({
      method: "post",
      path: `${prefix}/caches/{id}`,
      summary: "Commit an upload ({ size })",
      description: who,
      request: at(prefix, { id: z.string() }),
      responses: { 200: empty, ...pick(400, 403, 404, 503) },
    });
    r.registerPath({
      method: "post",
      path: `${prefix}/clean`,
      summary: "Accepted, nothing done",
      description: who,
      request: at(prefix),
      responses: { 200: empty },
    });
  }
  r.registerPath({
    method: "get",
    path: "/_apis/artifactcache/artifacts/{id}",
    summary: "Download an entry through a Forgejo runner's proxy",
    request: { params: z.object({ id: z.string() }), query: z.object({ gdr: z.string() }) },
    responses: { ...download, ...pick(403, 404, 503) },
  });
  r.registerPath({
    method: "get",
    path: "/cache/dl/{grant}",
    summary: "Download an entry by its signed URL (a lookup's archiveLocation, 10 minutes)",
    request: { params: z.object({ grant: z.string() }) },
    responses: { ...download, ...pick(403, 404, 503) },
  });
}
