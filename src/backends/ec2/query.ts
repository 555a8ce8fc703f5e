// The EC2 query protocol, as the service model (upstream/ec2-runinstances.json) describes it: a
// request is Action=…&Version=2016-11-15 and its members flattened by their serialized names (a
// member's queryName, else its locationName capitalized, else its own name), lists as Name.N and
// structures as Name.Member. Each value is checked against the model as it is written: a member
// the model does not know, a wrong type, a value outside its enum or a missing required member is
// an error naming the field, before anything is sent.
import model from "./upstream/ec2-runinstances.json" with { type: "json" };

interface MemberRef {
  shape: string;
  locationName?: string;
  queryName?: string;
}
interface Shape {
  type: string;
  members?: Record<string, MemberRef>;
  member?: MemberRef;
  required?: string[];
  enum?: string[];
  min?: number;
  max?: number;
}

const shapes = model.shapes as unknown as Record<string, Shape>;
const operations = model.operations as unknown as Record<string, { input?: { shape: string }; output?: { shape: string } }>;
export const EC2_API_VERSION = model.metadata.apiVersion;

/** A request the model refuses: `field` names where, as the caller wrote it (`RunInstances.TagSpecifications[0].ResourceType`). */
export class QueryError extends Error {
  override readonly name = "QueryError";
}

/** The form body of `operation` with `input`, checked against the model. */
export function encodeRequest(operation: string, input: Record<string, unknown>): URLSearchParams {
  const shape = Object.hasOwn(operations, operation) ? operations[operation]!.input?.shape : undefined;
  if (!shape) throw new QueryError(`${operation} is not an operation of the EC2 model`);
  const out = new URLSearchParams({ Action: operation, Version: EC2_API_VERSION });
  write(out, shape, input, "", operation);
  return out;
}

/** The problems of `input` for `operation`, or none: the checks at load, without a request. */
export function checkRequest(operation: string, input: Record<string, unknown>): string[] {
  try {
    encodeRequest(operation, input);
    return [];
  } catch (err) {
    if (err instanceof QueryError) return [err.message];
    throw err;
  }
}

const serializedName = (ref: MemberRef, name: string) =>
  ref.queryName ?? (ref.locationName ? ref.locationName[0]!.toUpperCase() + ref.locationName.slice(1) : name);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function write(out: URLSearchParams, shapeName: string, value: unknown, prefix: string, path: string): void {
  const shape = Object.hasOwn(shapes, shapeName) ? shapes[shapeName]! : undefined;
  if (!shape) throw new QueryError(`${path}: ${shapeName} is not a shape of the EC2 model`);
  const bounds = (n: number, what: string) => {
    if (shape.min !== undefined && n < shape.min) throw new QueryError(`${path} must have at least ${shape.min} ${what}`);
    if (shape.max !== undefined && n > shape.max) throw new QueryError(`${path} must have at most ${shape.max} ${what}`);
  };
  switch (shape.type) {
    case "structure": {
      if (!isObject(value)) throw new QueryError(`${path} must be an object (${shapeName})`);
      const members = shape.members ?? {};
      for (const name of shape.required ?? []) if (value[name] === undefined) throw new QueryError(`${path}.${name} is required`);
      for (const [name, v] of Object.entries(value)) {
        if (v === undefined) continue;
        const ref = Object.hasOwn(members, name) ? members[name]! : undefined;
        if (!ref) throw new QueryError(`${path}.${name} is not a member of ${shapeName}`);
        const key = serializedName(ref, name);
        write(out, ref.shape, v, prefix ? `${prefix}.${key}` : key, `${path}.${name}`);
      }
      return;
    }
    case "list": {
      if (!Array.isArray(value)) throw new QueryError(`${path} must be a list (${shapeName})`);
      bounds(value.length, "items");
      value.forEach((v, i) => write(out, shape.member!.shape, v, `${prefix}.${i + 1}`, `${path}[${i}]`));
      return;
    }
    case "string": {
      if (typeof value !== "string") throw new QueryError(`${path} must be a string (${shapeName})`);
      if (shape.enum && !shape.enum.includes(value)) throw new QueryError(`${path} must be one of ${shape.enum.join(", ")}`);
      bounds(value.length, "characters");
      out.append(prefix, value);
      return;
    }
    case "integer":
    case "long": {
      if (!Number.isInteger(value)) throw new QueryError(`${path} must be an integer (${shapeName})`);
      bounds(value as number, "as its value");
      out.append(prefix, String(value));
      return;
    }
    case "double":
    case "float": {
      if (typeof value !== "number" || !Number.isFinite(value)) throw new QueryError(`${path} must be a number (${shapeName})`);
      out.append(prefix, String(value));
      return;
    }
    case "boolean": {
      if (typeof value !== "boolean") throw new QueryError(`${path} must be true or false`);
      out.append(prefix, String(value));
      return;
    }
    case "timestamp": {
      const t = typeof value === "string" ? Date.parse(value) : NaN;
      if (Number.isNaN(t)) throw new QueryError(`${path} must be an ISO 8601 time`);
      out.append(prefix, new Date(t).toISOString());
      return;
    }
    default:
      throw new QueryError(`${path}: ${shape.type} values (${shapeName}) are not written by this driver`);
  }
}
