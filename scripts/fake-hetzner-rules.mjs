// The rules the fake Hetzner Cloud API enforces as the real one does: the create body against the
// OpenAPI description, names, labels, user_data's size, label selectors, paging (at most 50 per
// page, meta.pagination) and the project's rate limit (3,600 requests an hour, RateLimit-* headers).
import hcloud from "../src/backends/hetzner/upstream/hcloud-servers.json" with { type: "json" };
import { checkAgainst } from "../src/backends/api-schema.ts";

export { hcloud };

/** Server types the fake sells: name → cores, memory (GB), disk (GB), architecture, hourly price (EUR, net). */
export const SERVER_TYPES = {
  cx22: [2, 4, 40, "x86", "0.0060"],
  cx32: [4, 8, 80, "x86", "0.0113"],
  cx42: [8, 16, 160, "x86", "0.0273"],
  cpx21: [3, 4, 80, "x86", "0.0126"],
  cpx31: [4, 8, 160, "x86", "0.0231"],
  cax11: [2, 4, 40, "arm", "0.0060"],
  cax21: [4, 8, 80, "arm", "0.0108"],
  ccx13: [2, 8, 80, "x86", "0.0214"],
};
export const LOCATIONS = {
  fsn1: ["Falkenstein", "DE", "eu-central"],
  nbg1: ["Nuremberg", "DE", "eu-central"],
  hel1: ["Helsinki", "FI", "eu-central"],
  ash: ["Ashburn, VA", "US", "us-east"],
  hil: ["Hillsboro, OR", "US", "us-west"],
  sin: ["Singapore", "SG", "ap-southeast"],
};
export const IMAGES = ["ubuntu-24.04", "ubuntu-22.04", "debian-12", "debian-13"];
export const USER_DATA_MAX = 32 * 1024;
export const MAX_PER_PAGE = 50;
export const RATE_LIMIT = 3600;

const HOSTNAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$/i;
// A label key: an optional DNS-subdomain prefix and "/", then a name of 1-63 characters.
const LABEL_KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;

/** An error body as the API sends it: `{"error": {code, message, details}}`. */
export const apiError = (code, message, details = {}) => ({ error: { code, message, details } });

/** The problems of a create body, as [status, error body], or undefined when it is one the real API takes. */
export function createProblem(body, known) {
  const schema = checkAgainst(hcloud, "#/components/schemas/create_server_request", body);
  if (schema.length)
    return [422, apiError("invalid_input", `invalid input: ${schema.join("; ")}`, { fields: schema.map((p) => ({ name: p.split(" ")[0], messages: [p] })) })];
  const fields = [];
  if (!(body.name.length <= 63 && HOSTNAME.test(body.name))) fields.push(["name", "must be a valid hostname (RFC 1123)"]);
  if (!Object.hasOwn(SERVER_TYPES, body.server_type)) fields.push(["server_type", `server type ${body.server_type} not found`]);
  if (body.location !== undefined && !Object.hasOwn(LOCATIONS, body.location)) fields.push(["location", `location ${body.location} not found`]);
  if (!IMAGES.includes(body.image) && !known.images.has(String(body.image))) fields.push(["image", `image ${body.image} not found`]);
  if (typeof body.user_data === "string" && new TextEncoder().encode(body.user_data).length > USER_DATA_MAX) fields.push(["user_data", "is limited to 32 KiB"]);
  for (const key of Object.keys(body.labels ?? {})) if (!LABEL_KEY.test(key)) fields.push(["labels", `invalid label key ${JSON.stringify(key)}`]);
  if (!fields.length) return undefined;
  return [
    422,
    apiError("invalid_input", `invalid input in fields ${fields.map(([f]) => f).join(", ")}`, { fields: fields.map(([name, m]) => ({ name, messages: [m] })) }),
  ];
}

/** Whether `labels` match a label selector: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, comma-separated. */
export function selects(selector, labels) {
  if (!selector) return true;
  const terms = selector.match(/[^,(]+(\([^)]*\))?/g) ?? [];
  return terms.every((raw) => {
    const t = raw.trim();
    let m;
    if ((m = /^!\s*(\S+)$/.exec(t))) return !Object.hasOwn(labels, m[1]);
    if ((m = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(t))) {
      const values = m[3].split(",").map((v) => v.trim());
      const has = Object.hasOwn(labels, m[1]) && values.includes(labels[m[1]]);
      return m[2] === "in" ? has : !has;
    }
    if ((m = /^([^!=\s]+)\s*!=\s*(\S*)$/.exec(t))) return labels[m[1]] !== m[2];
    if ((m = /^([^!=\s]+)\s*==?\s*(\S*)$/.exec(t))) return labels[m[1]] === m[2];
    return Object.hasOwn(labels, t);
  });
}

/** One page of `items` and its meta.pagination; per_page above 50 is read as 50. */
export function paginate(items, url) {
  const perPage = Math.min(MAX_PER_PAGE, Math.max(1, Number(url.searchParams.get("per_page") ?? 25) || 25));
  const page = Math.max(1, Number(url.searchParams.get("page") ?? 1) || 1);
  const last = Math.max(1, Math.ceil(items.length / perPage));
  return {
    slice: items.slice((page - 1) * perPage, page * perPage),
    pagination: {
      page,
      per_page: perPage,
      previous_page: page > 1 ? page - 1 : null,
      next_page: page < last ? page + 1 : null,
      last_page: last,
      total_entries: items.length,
    },
  };
}

/**
 * The project's budget: `limit` requests, one more each 3,600/limit seconds up to the limit again.
 * `take(now)` spends one and says whether it was there, with the headers to send either way.
 */
export function rateLimiter(limit = RATE_LIMIT) {
  let remaining = limit;
  let at = 0;
  const perMs = limit / 3_600_000;
  return {
    take(now) {
      if (at) remaining = Math.min(limit, remaining + (now - at) * perMs);
      at = now;
      const ok = remaining >= 1;
      if (ok) remaining -= 1;
      const left = Math.floor(remaining);
      const reset = Math.ceil((now + (limit - remaining) / perMs) / 1000);
      return { ok, headers: { "RateLimit-Limit": String(limit), "RateLimit-Remaining": String(left), "RateLimit-Reset": String(reset) } };
    },
    set(n) {
      remaining = n;
    },
  };
}

/**
 * Where each server type is sold (server_type.locations): the cost-optimized x86 (cx) and the Arm
 * (cax) types only in the EU locations, the others everywhere, as Hetzner sells them in 2026.
 */
export const OFFERED_IN = (type) => (/^ca?x/.test(type) ? ["fsn1", "nbg1", "hel1"] : Object.keys(LOCATIONS));

const EXAMPLE_SERVER = hcloud.paths["/servers"].post.responses["201"].content["application/json"].examples.default.value.server;

/** GET /server_types's items (schema server_type): the OpenAPI example's shape with each type's own values. */
export function serverTypeViews() {
  const ids = Object.keys(LOCATIONS);
  return Object.entries(SERVER_TYPES).map(([name, [cores, memory, disk, architecture, hourly]], i) => {
    const where = OFFERED_IN(name);
    const price = { gross: (Number(hourly) * 1.19).toFixed(4), net: hourly };
    return {
      ...EXAMPLE_SERVER.server_type,
      id: i + 1,
      name,
      description: name.toUpperCase(),
      cores,
      memory,
      disk,
      architecture,
      cpu_type: name.startsWith("ccx") ? "dedicated" : "shared",
      deprecated: false,
      deprecation: null,
      locations: where.map((l) => ({ id: ids.indexOf(l) + 1, name: l, deprecation: null })),
      prices: where.map((l) => ({ ...EXAMPLE_SERVER.server_type.prices[0], location: l, price_hourly: price, price_monthly: price })),
    };
  });
}

/** GET /locations's items (schema location). */
export const locationViews = () =>
  Object.entries(LOCATIONS).map(([name, [city, country, zone]], i) => ({
    ...EXAMPLE_SERVER.location,
    id: i + 1,
    name,
    city,
    country,
    network_zone: zone,
    description: `${city} DC`,
  }));

/** GET /images's items (schema image): each system image for x86 and Arm (one name, two images), and the project's snapshots (no name). */
export function imageViews(snapshots) {
  const system = IMAGES.flatMap((name, i) =>
    ["x86", "arm"].map((architecture, a) => ({
      ...EXAMPLE_SERVER.image,
      id: 100 + i * 2 + a,
      name,
      architecture,
      type: "system",
      deprecated: null,
      created_from: null,
      labels: {},
      description: name,
      os_flavor: name.split("-")[0],
      os_version: name.split("-")[1],
    })),
  );
  const own = [...snapshots].map((id) => ({
    ...EXAMPLE_SERVER.image,
    id: Number(id),
    name: null,
    architecture: "x86",
    type: "snapshot",
    deprecated: null,
    description: `snapshot ${id}`,
    labels: {},
  }));
  return [...system, ...own];
}

/** What a list's query keeps of `items`: `name` (any list), and an image's `type`, `status` and `architecture` (each may repeat). */
export function listFilter(url) {
  const q = url.searchParams;
  const any = (key, value) => !q.getAll(key).length || q.getAll(key).includes(String(value));
  return (item) => any("name", item.name) && any("type", item.type) && any("status", item.status ?? "available") && any("architecture", item.architecture);
}
