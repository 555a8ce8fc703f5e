// Checks a value against an upstream API description (OpenAPI 3 `components.schemas`, or Swagger 2
// `definitions`): Kubernetes', KubeVirt's and Hetzner's. ajv compiles schemas with `new Function`,
// which a Worker may not call; the descriptions use a small part of JSON Schema, walked here
// directly. Like Kubernetes' strict field validation, an object schema that lists its properties
// refuses any other.
export interface Schema {
  $ref?: string;
  allOf?: Schema[];
  oneOf?: Schema[];
  type?: string | string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  items?: Schema;
  required?: string[];
  enum?: unknown[];
  nullable?: boolean;
  pattern?: string;
  "x-kubernetes-preserve-unknown-fields"?: boolean;
}

export type Doc = { components?: { schemas: Record<string, Schema> }; definitions?: Record<string, Schema> };

const MAX_PROBLEMS = 10;

/** Problems of `value` against `ref` of `doc`, each "<path> <what>", at most MAX_PROBLEMS. */
export function checkAgainst(doc: Doc, ref: string, value: unknown): string[] {
  const problems: string[] = [];
  const resolve = (r: string): Schema => {
    const name = r.split("/").at(-1) ?? "";
    const found = doc.components?.schemas[name] ?? doc.definitions?.[name];
    if (!found) throw new Error(`schema ${r} is not in the upstream description`);
    return found;
  };
  const walk = (s: Schema, v: unknown, at: string): void => {
    if (problems.length >= MAX_PROBLEMS) return;
    if (s.$ref) return walk(resolve(s.$ref), v, at);
    // A nullable schema takes null before its parts are asked (OpenAPI 3.0's `nullable` beside `allOf`).
    if (v === null && s.nullable) return;
    for (const part of s.allOf ?? []) walk(part, v, at);
    if (s.oneOf && !s.oneOf.some((alt) => quiet(alt, v))) problems.push(`${at || "(root)"} must be ${s.oneOf.map(typeName).join(" or ")}`);
    const types = s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
    if (types.length && !types.some((t) => isType(t, v))) {
      problems.push(`${at || "(root)"} must be ${types.join(" or ")}`);
      return;
    }
    if (s.enum && !s.enum.includes(v)) problems.push(`${at} must be one of ${s.enum.map((e) => JSON.stringify(e)).join(", ")}`);
    if (s.pattern && typeof v === "string" && !new RegExp(s.pattern).test(v)) problems.push(`${at} must match ${s.pattern}`);
    if (Array.isArray(v) && s.items) v.forEach((item, i) => walk(s.items!, item, `${at}[${i}]`));
    if (!isObject(v)) return;
    for (const key of s.required ?? []) if (!Object.hasOwn(v, key)) problems.push(`${join(at, key)} is required`);
    for (const [key, item] of Object.entries(v)) {
      const known = s.properties && Object.hasOwn(s.properties, key) ? s.properties[key] : undefined;
      if (known) walk(known, item, join(at, key));
      else if (typeof s.additionalProperties === "object") walk(s.additionalProperties, item, join(at, key));
      else if (s.properties && s.additionalProperties !== true && !s["x-kubernetes-preserve-unknown-fields"])
        problems.push(`${join(at, key)} is not a field of this object`);
    }
  };
  const quiet = (s: Schema, v: unknown) => {
    const before = problems.length;
    walk(s, v, "");
    const ok = problems.length === before;
    problems.length = before;
    return ok;
  };
  walk(resolve(ref), value, "");
  return problems;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const join = (at: string, key: string) => (at ? `${at}.${key}` : key);
const typeName = (s: Schema) => (Array.isArray(s.type) ? s.type.join(" or ") : (s.type ?? "a value"));

function isType(type: string, v: unknown): boolean {
  if (type === "object") return isObject(v);
  if (type === "array") return Array.isArray(v);
  if (type === "integer") return Number.isInteger(v);
  if (type === "number") return typeof v === "number" && Number.isFinite(v);
  return typeof v === type;
}
