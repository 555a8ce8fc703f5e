// Which of the user's variables `npm start` hands the Worker: every one the configuration schema
// knows, derived from the schema itself (so a new variable needs no second list), except those
// npm start decides itself because it runs the stack they point at.
import { envSchema } from "../src/app/config-schema.ts";

/** Set by npm start: the embedded nats-server (no credentials) and the Worker's own URL. */
export const STARTS_ITS_OWN = ["NATS_URL", "NATS_CREDS", "NATS_TOKEN", "NATS_USER", "NATS_PASS", "PUBLIC_URL"];

/** The Worker's variables npm start passes on from the environment and .dev.vars. */
export const PASSED = Object.keys(envSchema.shape).filter((k) => !STARTS_ITS_OWN.includes(k));

/** The passed variables that `user` sets (empty counts as unset). */
export function passedFrom(user) {
  return Object.fromEntries(PASSED.filter((k) => Object.hasOwn(user, k) && user[k] !== undefined && user[k] !== "").map((k) => [k, user[k]]));
}
