// HMAC helpers on WebCrypto (present in workerd and Node 22 alike).

const encoder = new TextEncoder();

/** Imported keys by secret, for the isolate's life: a pass signs a claim token per runner, and an import costs more than the signing. */
const keys = new Map<string, Promise<CryptoKey>>();
/** Secrets whose keys are kept: the signing key and the few others (webhook secrets) a deployment has. */
const KEPT_KEYS = 8;

function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    if (keys.size >= KEPT_KEYS) keys.delete(keys.keys().next().value!);
    key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
    keys.set(secret, key);
    // One that failed is imported again next time.
    key.catch(() => keys.delete(secret));
  }
  return key;
}

/** Standard base64 of bytes, or of a string's UTF-8. */
export function base64(data: Uint8Array | string): string {
  const bytes = typeof data === "string" ? encoder.encode(data) : data;
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** The bytes of standard base64 (throws on what is not base64, as atob does). */
export function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

export function base64url(bytes: ArrayBuffer | Uint8Array): string {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let binary = "";
  for (const b of view) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/**
 * The claim token of one incarnation of an assignment: `<incarnation>.<mac>`, where mac is
 * base64url(HMAC-SHA256(key, "claim:" + id + ":" + incarnation)). The incarnation names the
 * record the token was made for (see incarnationOf), so that an id used again after its record
 * expired does not accept the old token; it travels in the token, so that checking one needs
 * no lookup and the record is read once, by the claim itself.
 */
export async function claimToken(signingKey: string, id: string, incarnation: string): Promise<string> {
  const mac = await crypto.subtle.sign("HMAC", await hmacKey(signingKey), encoder.encode(`claim:${id}:${incarnation}`));
  return `${incarnation}.${base64url(mac)}`;
}

/** The incarnation a claim token for `id` was signed for, or undefined when it was not signed with this key. */
export async function verifyClaimToken(signingKey: string, id: string, token: string): Promise<string | undefined> {
  const dot = token.indexOf(".");
  const incarnation = token.slice(0, dot);
  if (dot < 1 || !INCARNATION.test(incarnation)) return undefined;
  return (await timingSafeEqual(token, await claimToken(signingKey, id, incarnation))) ? incarnation : undefined;
}

const INCARNATION = /^[0-9a-z]{1,12}$/;

/** The key timingSafeEqual compares under: random, made on first use (not at start-up, where workerd allows no randomness). */
let compareKey: Promise<CryptoKey> | undefined;

/** Constant-time comparison of two strings, by comparing their HMACs under a key nobody outside the isolate knows. */
export async function timingSafeEqual(a: string, b: string): Promise<boolean> {
  if (!compareKey) {
    compareKey = crypto.subtle.importKey("raw", crypto.getRandomValues(new Uint8Array(32)), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    compareKey.catch(() => (compareKey = undefined));
  }
  const key = await compareKey;
  const [ma, mb] = await Promise.all([crypto.subtle.sign("HMAC", key, encoder.encode(a)), crypto.subtle.sign("HMAC", key, encoder.encode(b))]);
  const va = new Uint8Array(ma);
  const vb = new Uint8Array(mb);
  let diff = 0;
  for (let i = 0; i < va.length; i++) diff |= va[i]! ^ vb[i]!;
  return diff === 0;
}

/** base64url(SHA-256(text)): a key that stands for a value without holding it. */
export async function sha256Key(text: string): Promise<string> {
  return base64url(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/** A raw 32-byte key from its base64 (RUNNER_IDENTITY_KEY), or undefined when it is not one. */
export function decodeKey(text: string | undefined): Uint8Array | undefined {
  if (!text) return undefined;
  try {
    const key = fromBase64(text.trim());
    return key.length === 32 ? key : undefined;
  } catch {
    return undefined;
  }
}

/** A 32-byte key for one purpose, derived from a secret (HMAC-SHA256(secret, purpose)): one secret, keys that never stand in for each other. */
export async function deriveKey(secret: string, purpose: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(`gdr key:${purpose}`)));
}

async function aesKey(raw: Uint8Array): Promise<CryptoKey> {
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** Seals a JSON value (AES-256-GCM, bound to `boundTo` as additional data): base64 of IV and ciphertext. */
export async function sealJson(key: Uint8Array, boundTo: string, value: object): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const data = new TextEncoder().encode(JSON.stringify(value));
  const ct = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv, additionalData: new TextEncoder().encode(boundTo) }, await aesKey(key), data));
  const out = new Uint8Array(iv.length + ct.length);
  out.set(iv);
  out.set(ct, iv.length);
  return base64(out);
}

/** Opens what sealJson sealed under `key`, or under `previous` (the key before a rotation); throws when neither opens it. */
export async function openJson<T>(key: Uint8Array, boundTo: string, sealed: string, previous?: Uint8Array): Promise<T> {
  const bytes = fromBase64(sealed);
  const open = async (k: Uint8Array) =>
    crypto.subtle.decrypt({ name: "AES-GCM", iv: bytes.slice(0, 12), additionalData: new TextEncoder().encode(boundTo) }, await aesKey(k), bytes.slice(12));
  let plain: ArrayBuffer;
  try {
    plain = await open(key);
  } catch (err) {
    if (!previous) throw err;
    plain = await open(previous);
  }
  return JSON.parse(new TextDecoder().decode(plain)) as T;
}
