// Bearer-token checks. Missing credentials are 401; present but wrong is 401 for the operator
// token and 403 for a claim token (a runner that holds the token of another assignment).
import { fromBase64, timingSafeEqual, verifyClaimToken } from "../model/crypto.ts";
import { HttpError } from "./errors.ts";

function bearer(req: Request): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "");
  return match?.[1];
}

/** A bearer token that must equal `expected` (or, during a rotation, one of them); `name` says which secret in the 401's message. */
export async function requireBearer(req: Request, expected: string | readonly (string | undefined)[], name: string): Promise<void> {
  const token = bearer(req);
  let ok = false;
  for (const e of typeof expected === "string" ? [expected] : expected) if (e && token) ok = (await timingSafeEqual(token, e)) || ok;
  if (!ok) throw new HttpError(401, `a valid Bearer ${name} is required`);
}

/**
 * The incarnation the request's claim token was signed for, under the signing key or, during a
 * rotation, the previous one (the tokens of runners in flight); the claim checks it against the record.
 */
export async function requireClaimToken(req: Request, signingKeys: readonly (string | undefined)[], id: string): Promise<string> {
  const token = bearer(req);
  if (!token) throw new HttpError(401, "the assignment's Bearer claim token is required");
  for (const key of signingKeys) {
    const incarnation = key ? await verifyClaimToken(key, id, token) : undefined;
    if (incarnation !== undefined) return incarnation;
  }
  throw new HttpError(403, "claim token does not match this assignment");
}

/**
 * HTTP Basic with `expected` as the password and any user name, so that a browser asks for it.
 * False when the credentials are missing or wrong; the caller answers 401 with WWW-Authenticate.
 */
export async function basicPasswordMatches(req: Request, expected: string): Promise<boolean> {
  const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(req.headers.get("authorization") ?? "");
  if (!match) return false;
  let decoded: string;
  try {
    decoded = new TextDecoder().decode(fromBase64(match[1]!));
  } catch {
    return false;
  }
  const colon = decoded.indexOf(":");
  return colon >= 0 && (await timingSafeEqual(decoded.slice(colon + 1), expected));
}
