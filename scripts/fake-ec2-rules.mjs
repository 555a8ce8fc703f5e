// What the fake EC2 API checks, as EC2 would: a SigV4 signature (computed here from the request,
// apart from the client's signer), and each query-protocol request read back into its input
// structure by the service model (src/backends/ec2/upstream/ec2-runinstances.json): unknown
// parameters, wrong types, values outside an enum and missing required members are refused with
// EC2's own codes. The XML of answers and errors is written here too.
import { createHash, createHmac } from "node:crypto";
import model from "../src/backends/ec2/upstream/ec2-runinstances.json" with { type: "json" };

export const FAKE_AWS = { accessKeyId: "AKIAFAKEEC2000000000", secretAccessKey: "fake-ec2-secret-key-0000000000000000000000" };
const NS = model.metadata.xmlNamespace;

const sha256 = (data) => createHash("sha256").update(data).digest("hex");
const hmac = (key, data) => createHmac("sha256", key).update(data).digest();

/** Why the request's signature is not valid for `creds` and `region`, or undefined when it is. */
export function signatureProblem(req, body, creds, region, now = Date.now()) {
  const auth = req.headers.authorization ?? "";
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(
    auth,
  );
  if (!m) return "no AWS4-HMAC-SHA256 authorization";
  const [, keyId, day, scopeRegion, service, signedHeaders, signature] = m;
  if (keyId !== creds.accessKeyId) return "unknown access key";
  if (scopeRegion !== region || service !== "ec2") return `credential scope ${scopeRegion}/${service}, not ${region}/ec2`;
  const amzDate = req.headers["x-amz-date"] ?? "";
  if (!/^\d{8}T\d{6}Z$/.test(amzDate) || amzDate.slice(0, 8) !== day) return "x-amz-date missing or not of the credential's day";
  const at = Date.UTC(
    +amzDate.slice(0, 4),
    +amzDate.slice(4, 6) - 1,
    +amzDate.slice(6, 8),
    +amzDate.slice(9, 11),
    +amzDate.slice(11, 13),
    +amzDate.slice(13, 15),
  );
  if (Math.abs(now - at) > 5 * 60_000) return "request expired";
  const names = signedHeaders.split(";");
  if (!names.includes("host") || !names.includes("x-amz-date")) return "host and x-amz-date must be signed";
  const url = new URL(req.url, "http://x");
  const canonicalHeaders = names
    .map(
      (n) =>
        `${n}:${String(req.headers[n] ?? "")
          .trim()
          .replace(/\s+/g, " ")}\n`,
    )
    .join("");
  const query = [...url.searchParams]
    .map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)])
    .sort()
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  const canonical = [req.method, url.pathname, query, canonicalHeaders, signedHeaders, sha256(body)].join("\n");
  const toSign = ["AWS4-HMAC-SHA256", amzDate, `${day}/${region}/ec2/aws4_request`, sha256(canonical)].join("\n");
  const key = hmac(hmac(hmac(hmac(`AWS4${creds.secretAccessKey}`, day), region), "ec2"), "aws4_request");
  return hmac(key, toSign).toString("hex") === signature ? undefined : "signature does not match";
}

/** An EC2 refusal: status, code, message. */
export class Refusal extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const serialized = (ref, name) => ref.queryName ?? (ref.locationName ? ref.locationName[0].toUpperCase() + ref.locationName.slice(1) : name);

/** The operation and its input structure read from a form body, checked against the model. */
export function readRequest(form) {
  const params = new URLSearchParams(form);
  const action = params.get("Action");
  if (!action || !Object.hasOwn(model.operations, action)) throw new Refusal(400, "InvalidAction", `The action ${action} is not valid for this web service.`);
  if (params.get("Version") !== model.metadata.apiVersion) throw new Refusal(400, "InvalidParameterValue", "Version must be 2016-11-15");
  const root = model.operations[action].input.shape;
  const input = {};
  for (const [key, value] of params) {
    if (key === "Action" || key === "Version") continue;
    place(input, root, key.split("."), value, key);
  }
  check(input, root, action);
  return { action, input };
}

/** Puts `value` at the path its key names, through the model's shapes. */
function place(into, shapeName, tokens, value, key) {
  const shape = model.shapes[shapeName];
  const [head, ...rest] = tokens;
  if (shape.type === "structure") {
    const entry = Object.entries(shape.members).find(([name, ref]) => serialized(ref, name) === head);
    if (!entry) throw new Refusal(400, "UnknownParameter", `The parameter ${key} is not recognized`);
    const [name, ref] = entry;
    if (!rest.length) return void (into[name] = scalar(ref.shape, value, key));
    into[name] ??= model.shapes[ref.shape].type === "list" ? [] : {};
    return place(into[name], ref.shape, rest, value, key);
  }
  if (shape.type === "list") {
    const i = Number(head);
    if (!Number.isInteger(i) || i < 1) throw new Refusal(400, "InvalidParameterValue", `${key}: list positions count from 1`);
    const member = shape.member.shape;
    if (!rest.length) return void (into[i - 1] = scalar(member, value, key));
    into[i - 1] ??= model.shapes[member].type === "list" ? [] : {};
    return place(into[i - 1], member, rest, value, key);
  }
  throw new Refusal(400, "UnknownParameter", `The parameter ${key} is not recognized`);
}

function scalar(shapeName, value, key) {
  const shape = model.shapes[shapeName];
  const bad = (what) => new Refusal(400, "InvalidParameterValue", `Value (${value}) for parameter ${key} is invalid. ${what}`);
  switch (shape.type) {
    case "string":
      if (shape.enum && !shape.enum.includes(value)) throw bad(`Expected one of ${shape.enum.join(", ")}`);
      return value;
    case "integer":
    case "long":
      if (!/^-?\d+$/.test(value)) throw bad("Expected an integer");
      return Number(value);
    case "boolean":
      if (value !== "true" && value !== "false") throw bad("Expected true or false");
      return value === "true";
    case "timestamp":
      if (Number.isNaN(Date.parse(value))) throw bad("Expected a time");
      return value;
    default:
      throw new Refusal(400, "UnknownParameter", `The parameter ${key} is not recognized`);
  }
}

/** Required members, list gaps and bounds, through the whole input. */
function check(value, shapeName, path) {
  const shape = model.shapes[shapeName];
  if (shape.type === "structure") {
    for (const name of shape.required ?? [])
      if (value[name] === undefined) throw new Refusal(400, "MissingParameter", `The request must contain the parameter ${path}.${name}`);
    for (const [name, v] of Object.entries(value)) check(v, shape.members[name].shape, `${path}.${name}`);
  } else if (shape.type === "list") {
    if (value.some((v) => v === undefined) || value.length !== Object.keys(value).length)
      throw new Refusal(400, "InvalidParameterValue", `${path}: list positions must run 1, 2, 3…`);
    value.forEach((v, i) => check(v, shape.member.shape, `${path}.${i + 1}`));
  }
}

const esc = (s) => String(s).replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]);

/** An element tree as EC2 writes it: objects as elements, arrays as <item> lists. */
export function xml(name, value) {
  if (value === undefined || value === null) return "";
  if (Array.isArray(value)) return `<${name}>${value.map((v) => xml("item", v)).join("")}</${name}>`;
  if (typeof value === "object")
    return `<${name}>${Object.entries(value)
      .map(([k, v]) => xml(k, v))
      .join("")}</${name}>`;
  return `<${name}>${esc(value)}</${name}>`;
}

export const answer = (action, body) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<${action}Response xmlns="${NS}">${Object.entries(body)
    .map(([k, v]) => xml(k, v))
    .join("")}</${action}Response>`;
export const errorXml = (code, message, requestId) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${esc(code)}</Code><Message>${esc(message)}</Message></Error></Errors><RequestID>${requestId}</RequestID></Response>`;
