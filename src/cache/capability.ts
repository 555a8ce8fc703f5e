// The credentials of the cache, each good for one job: a Gitea runner's capability (the path
// segment of its cache.external_server, since act_runner passes that URL verbatim as the job's
// ACTIONS_CACHE_URL and sends no identity of its own), a Forgejo runner's cache.secret (the key its
// proxy signs with), and a download's signed URL (the client sends no Authorization on it). All are
// HMACs under one key derived from CLAIM_SIGNING_KEY for the cache alone; each names the
// assignment and its incarnation, so a runner made again for the same assignment gets new ones,
// and the record says whether that assignment still lives. `~` parts them: no id holds one.
import { base64url, deriveKey, timingSafeEqual } from "../model/crypto.ts";

/** The cache's own key, from CLAIM_SIGNING_KEY. */
export const cacheKey = (claimSigningKey: string) => deriveKey(claimSigningKey, "actions-cache");

const encoder = new TextEncoder();
const sign = async (key: Uint8Array, text: string) =>
  new Uint8Array(
    await crypto.subtle.sign("HMAC", await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]), encoder.encode(text)),
  );

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const INCARNATION = /^[0-9a-z]{1,12}$/;

/** Whose a capability is. */
export interface Holder {
  assignment: string;
  incarnation: string;
}

/** A Gitea runner's capability: `<assignment>~<incarnation>~<mac>`. */
export async function capability(key: Uint8Array, h: Holder): Promise<string> {
  return `${h.assignment}~${h.incarnation}~${base64url(await sign(key, `capability\0${h.assignment}\0${h.incarnation}`))}`;
}

/** The holder a capability was made for under `key`, or undefined (a forged, altered or foreign one). */
export async function verifyCapability(key: Uint8Array, text: string): Promise<Holder | undefined> {
  const [assignment, incarnation, ...rest] = text.split("~");
  if (rest.length !== 1 || !assignment || !incarnation || !ID.test(assignment) || !INCARNATION.test(incarnation)) return undefined;
  return (await timingSafeEqual(text, await capability(key, { assignment, incarnation }))) ? { assignment, incarnation } : undefined;
}

/** A Forgejo runner's cache.secret for one job: 64 hex characters, never the same for two assignments or incarnations. */
export async function forgejoSecret(key: Uint8Array, h: Holder): Promise<string> {
  const mac = await sign(key, `forgejo-secret\0${h.assignment}\0${h.incarnation}`);
  return [...mac].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** What a download's signed URL grants: one entry of one repository, to one holder, until `expires` (epoch s). */
export interface Grant extends Holder {
  entry: string;
  expires: number;
}

const ENTRY = /^[0-9a-z]{1,40}$/;

/** The path segment of a download URL: `<entry>~<assignment>~<incarnation>~<expires>~<mac>`. */
export async function signDownload(key: Uint8Array, g: Grant): Promise<string> {
  const body = `${g.entry}~${g.assignment}~${g.incarnation}~${g.expires}`;
  return `${body}~${base64url(await sign(key, `download\0${body}`))}`;
}

/** The grant of a download URL, while it holds at `now` (epoch ms); undefined when forged, altered or expired. */
export async function verifyDownload(key: Uint8Array, text: string, now: number): Promise<Grant | undefined> {
  const [entry, assignment, incarnation, expires, ...rest] = text.split("~");
  if (rest.length !== 1 || !entry || !assignment || !incarnation || !expires) return undefined;
  if (!ENTRY.test(entry) || !ID.test(assignment) || !INCARNATION.test(incarnation) || !/^\d{1,12}$/.test(expires)) return undefined;
  const grant = { entry, assignment, incarnation, expires: Number(expires) };
  if (!(await timingSafeEqual(text, await signDownload(key, grant)))) return undefined;
  return grant.expires * 1000 > now ? grant : undefined;
}
