// Merges an operator's template (POD_TEMPLATE, VM_TEMPLATE) into a default manifest: objects
// recursively; lists of named items (containers, volumes, volumeMounts, env …) by name; other
// lists and scalars are replaced by the template's.

type Json = unknown;

const isObject = (v: Json): v is Record<string, Json> => typeof v === "object" && v !== null && !Array.isArray(v);
const isNamedList = (v: Json): v is Record<string, Json>[] => Array.isArray(v) && v.length > 0 && v.every((i) => isObject(i) && typeof i.name === "string");

export function mergeTemplate<T>(base: T, template: Json): T {
  return merge(base, template) as T;
}

function merge(base: Json, over: Json): Json {
  if (over === undefined) return base;
  if (isObject(base) && isObject(over)) {
    // Keys come from the operator's JSON: own keys only, and built with fromEntries, so that a
    // key like `__proto__` or `constructor` is a field like any other.
    const out = new Map(Object.entries(base));
    for (const [k, v] of Object.entries(over)) out.set(k, merge(Object.hasOwn(base, k) ? base[k] : undefined, v));
    return Object.fromEntries(out);
  }
  if (isNamedList(base) && isNamedList(over)) {
    const out = base.map((item) => {
      const match = over.find((o) => o.name === item.name);
      return match ? merge(item, match) : item;
    });
    for (const o of over) if (!base.some((b) => b.name === o.name)) out.push(o);
    return out;
  }
  return over;
}
