// A Hetzner Cloud API (https://api.hetzner.cloud/v1) for what the hetzner driver uses: create,
// list, read and delete servers, rebuild one, read an action, list server types, locations and images. It follows the real contract
// (fake-hetzner-rules.mjs): the create body against the OpenAPI description, unique names
// (409 uniqueness_error), paging, the rate limit with its headers and 429, bearer auth (401
// unauthorized), error bodies `{"error": {code, message, details}}`. Servers boot after `bootMs`;
// with `mode.simulate` each runs a simulated runner (simulate-hetzner.mjs) that fetches its launch,
// claims, works and completes.
// Tests share one server, each under a path prefix of its own. Control endpoints under
// /<prefix>/_control: `mode` (faults: unavailable server types or locations, the project's server
// limit, 5xx, hangs, the rate limit), `status` (a server powered off), `state`, `clock` (move time
// on, for billing), `billing`.
import { startTenantServer } from "./fake-http.mjs";
import { runSimulatedServer } from "./simulate-hetzner.mjs";
import { checkAgainst } from "../src/backends/api-schema.ts";
import {
  apiError,
  createProblem,
  hcloud,
  imageViews,
  listFilter,
  LOCATIONS,
  locationViews,
  paginate,
  rateLimiter,
  selects,
  serverTypeViews,
  SERVER_TYPES,
} from "./fake-hetzner-rules.mjs";

export const FAKE_HCLOUD_TOKEN = "hcloud-token-0000";
const HOUR_MS = 3_600_000;
const EXAMPLE = hcloud.paths["/servers"].post.responses["201"].content["application/json"].examples.default.value;

const newProject = () => ({
  servers: new Map(),
  deleted: [],
  actions: new Map(),
  nextId: 1000,
  images: new Set(),
  requests: [],
  calls: 0,
  clockMs: 0,
  limiter: rateLimiter(),
  mode: { token: FAKE_HCLOUD_TOKEN, bootMs: 0, unavailable: [], placementError: [], serverLimit: Infinity, failFirst: 0, hangFirst: 0, hangMs: 5_000 },
});

/** `log`: where simulated runners (mode.simulate) say what they did. */
export function startFakeHetzner({ log } = {}) {
  return startTenantServer(newProject, serve);

  async function serve({ req, res, text, url, path, tenant: p, send }) {
    if (path.startsWith("/_control/")) return control(p, path.slice(10), req.method, text, send);
    // At a distance (the bench): each answer comes `latencyMs` after its request.
    if (p.mode.latencyMs) await new Promise((r) => setTimeout(r, p.mode.latencyMs));
    const now = Date.now() + p.clockMs;
    const entry = { method: req.method, path, query: url.search, body: text, at: now };
    p.requests.push(entry);
    if (req.headers.authorization !== `Bearer ${p.mode.token}`) return send(401, apiError("unauthorized", "unable to authenticate"));
    const budget = p.limiter.take(now);
    for (const [k, v] of Object.entries(budget.headers)) res.setHeader(k, v);
    if (!budget.ok) entry.status = 429;
    if (!budget.ok) return send(429, apiError("rate_limit_exceeded", "limit of 3600 requests per hour reached"));
    const call = ++p.calls;
    if (call <= p.mode.hangFirst) {
      await new Promise((r) => setTimeout(r, p.mode.hangMs));
      return send(504, apiError("timeout", "the request could not be answered in time"));
    }
    if (call <= p.mode.hangFirst + p.mode.failFirst || (p.mode.failCalls ?? []).includes(call))
      return p.mode.failStatus === 503
        ? send(503, apiError("unavailable", "service is currently not available"))
        : send(500, apiError("server_error", "error within the API backend"));
    // What the project may create with: GET /server_types, /locations and /images, filtered and paged.
    const lists = { "/server_types": serverTypeViews, "/locations": locationViews, "/images": () => imageViews(p.images) };
    if (Object.hasOwn(lists, path) && req.method === "GET") {
      const { slice, pagination } = paginate(lists[path]().filter(listFilter(url)), url);
      return send(200, { [path.slice(1)]: slice, meta: { pagination } });
    }
    const m = /^\/servers(?:\/(\d+))?(\/actions\/rebuild)?$/.exec(path);
    const action = /^\/actions\/(\d+)$/.exec(path);
    if (action && req.method === "GET") {
      const a = p.actions.get(Number(action[1]));
      return a ? send(200, { action: a }) : send(404, apiError("not_found", "action not found"));
    }
    if (!m) return send(404, apiError("not_found", "not found"));
    const [, id, rebuild] = m;
    if (!id && req.method === "POST") return create(p, text, now, send);
    if (!id && req.method === "GET") {
      const all = [...p.servers.values()]
        .filter((s) => (!url.searchParams.get("name") || s.name === url.searchParams.get("name")) && selects(url.searchParams.get("label_selector"), s.labels))
        .sort((a, b) => a.id - b.id);
      const { slice, pagination } = paginate(all, url);
      return send(200, { servers: slice.map((s) => view(p, s, now)), meta: { pagination } });
    }
    const server = id ? p.servers.get(Number(id)) : undefined;
    if (!server) return send(404, apiError("not_found", `server with ID '${id}' not found`));
    if (rebuild && req.method === "POST") {
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        return send(400, apiError("json_error", "invalid JSON"));
      }
      const problems = checkAgainst(hcloud, "rebuild_server_from_image_request", body);
      if (problems.length) return send(422, apiError("invalid_input", problems.join("; ")));
      // A fresh disk from the image; the server, its id, name, labels and paid hour stay.
      Object.assign(server, { image: body.image, bootedAt: now + p.mode.bootMs, rebuilds: server.rebuilds + 1, status: undefined, runner: undefined });
      if (typeof body.user_data === "string") server.userData = body.user_data;
      log?.(`[hetzner] server ${server.name}: rebuilt from ${body.image} for its next job`);
      if (p.mode.simulate) boot(p, server);
      return send(201, { action: newAction(p, "rebuild_server", server.id, now), root_password: null });
    }
    if (req.method === "GET") return send(200, { server: view(p, server, now) });
    if (req.method === "DELETE") {
      p.servers.delete(server.id);
      p.deleted.push({ ...server, deletedAt: now });
      log?.(`[hetzner] server ${server.name}: deleted after ${Math.round((now - server.createdAt) / 1000)} s`);
      return send(200, { action: newAction(p, "delete_server", server.id, now) });
    }
    return send(405, apiError("method_not_allowed", "method not allowed"));
  }

  function create(p, text, now, send) {
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      return send(400, apiError("json_error", "invalid JSON"));
    }
    const problem = createProblem(body, p);
    if (problem) return send(...problem);
    if ([...p.servers.values()].some((s) => s.name === body.name))
      return send(409, apiError("uniqueness_error", "server name is already used", { fields: [{ name: "name" }] }));
    if (p.servers.size >= p.mode.serverLimit)
      return send(403, apiError("resource_limit_exceeded", "server limit exceeded", { limits: [{ name: "project_limits.server" }] }));
    const where = { server_type: body.server_type, location: body.location ?? "fsn1" };
    const hit = (list) => list.some((u) => Object.entries(u).every(([k, v]) => where[k] === v));
    if (hit(p.mode.unavailable)) return send(412, apiError("resource_unavailable", `server type ${where.server_type} unavailable in ${where.location}`));
    if (hit(p.mode.placementError)) return send(412, apiError("placement_error", "error during placement"));
    const id = ++p.nextId;
    const server = {
      id,
      name: body.name,
      labels: body.labels ?? {},
      ...where,
      image: body.image,
      userData: body.user_data,
      createdAt: now,
      bootedAt: now + p.mode.bootMs,
      rebuilds: 0,
    };
    p.servers.set(id, server);
    log?.(`[hetzner] server ${server.name}: created (${where.server_type} in ${where.location}, ${body.image})`);
    if (p.mode.simulate) boot(p, server);
    return send(201, {
      server: view(p, server, now),
      action: newAction(p, "create_server", id, now),
      next_actions: [newAction(p, "start_server", id, now)],
      root_password: null,
    });
  }

  /** A simulated runner boots with the server (and with each rebuild), as the driver's user_data makes a real one do. */
  function boot(p, server) {
    const rebuilds = server.rebuilds;
    const alive = () => p.servers.get(server.id) === server && server.rebuilds === rebuilds;
    setTimeout(() => void runSimulatedServer(server, { ...p.mode.simulate, log, alive }).catch(() => undefined), p.mode.bootMs);
  }

  function newAction(p, command, serverId, now) {
    const id = p.actions.size + 1;
    const at = new Date(now).toISOString();
    const a = { id, command, status: "success", progress: 100, started: at, finished: at, resources: [{ id: serverId, type: "server" }], error: null };
    p.actions.set(id, a);
    return a;
  }

  /** The server as the API shows it: the OpenAPI example's shape with this server's own values. */
  function view(p, s, now) {
    const [cores, memory, disk, architecture] = SERVER_TYPES[s.server_type];
    const [city, country, zone] = LOCATIONS[s.location];
    const location = { ...EXAMPLE.server.location, name: s.location, city, country, network_zone: zone, description: `${city} DC` };
    return {
      ...EXAMPLE.server,
      id: s.id,
      name: s.name,
      labels: s.labels,
      created: new Date(s.createdAt).toISOString(),
      status: s.status ?? (now >= s.bootedAt ? "running" : s.rebuilds ? "rebuilding" : "initializing"),
      location,
      datacenter: { ...EXAMPLE.server.datacenter, name: `${s.location}-dc1`, location },
      server_type: {
        ...EXAMPLE.server.server_type,
        name: s.server_type,
        description: s.server_type.toUpperCase(),
        cores,
        memory,
        disk,
        architecture,
        deprecated: false,
        deprecation: null,
      },
      image: { ...EXAMPLE.server.image, name: String(s.image), type: "system", deprecated: null },
      primary_disk_size: disk,
      private_net: [],
      placement_group: null,
      iso: null,
    };
  }

  function control(p, what, method, text, send) {
    if (what === "mode" && method === "POST") {
      const next = JSON.parse(text || "{}");
      p.mode = { ...p.mode, ...next };
      if (next.rateRemaining !== undefined) p.limiter.set(next.rateRemaining);
      p.calls = 0;
      return send(200, p.mode);
    }
    if (what === "clock" && method === "POST") {
      p.clockMs += JSON.parse(text || "{}").advanceMs ?? 0;
      return send(200, { clockMs: p.clockMs });
    }
    // A server's status as the test says (`off`: it powered itself off, its runner never ran).
    if (what === "status" && method === "POST") {
      const { name, status } = JSON.parse(text);
      const found = [...p.servers.values()].filter((s) => !name || s.name === name);
      for (const s of found) s.status = status;
      return send(200, { changed: found.length });
    }
    // A snapshot of the project's, by its id: created with, and listed by GET /images.
    if (what === "image" && method === "POST") {
      p.images.add(String(Number(JSON.parse(text).image)));
      return send(200, {});
    }
    if (what === "state") return send(200, { servers: [...p.servers.values()], deleted: p.deleted, requests: p.requests });
    // As Hetzner bills: each server by the started hour, from its creation to its deletion, whatever its power state.
    if (what === "billing") {
      const now = Date.now() + p.clockMs;
      const all = [...p.servers.values(), ...p.deleted];
      const hours = all.reduce((sum, s) => sum + Math.max(1, Math.ceil(((s.deletedAt ?? now) - s.createdAt) / HOUR_MS)), 0);
      return send(200, { servers: all.length, billedHours: hours, running: p.servers.size });
    }
    return send(404, { error: "unknown control" });
  }
}
