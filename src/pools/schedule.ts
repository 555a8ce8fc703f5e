// Schedule windows of a pool: a five-field cron expression read in a time zone, active during every
// minute it matches ("* 8-17 * * 1-5" in Europe/Berlin: weekdays 08:00 to 17:59 there). A window
// that crosses midnight is a list of hours ("* 22-23,0-5 * * *"). Cron is croner's (a maintained
// parser that reads IANA time zones in Workers); pure: the caller passes the time.

import { Cron as Croner } from "croner";

/** A checked five-field cron expression (croner reads it), matched in the time zone a window names. */
export interface Cron {
  expression: string;
}

/**
 * How croner reads our expressions: five fields (minute to day of week), a step from a value
 * ("5/15": 5, 20, 35, 50), Sunday as 0 or 7, and cron's rule that when both day fields are
 * restricted a day matches if either does.
 */
const OPTIONS = { mode: "5-part", sloppyRanges: true, domAndDow: false, paused: true } as const;

const FIELDS = ["minute", "hour", "day of month", "month", "day of week"] as const;

/** Checks `expression`, or throws an Error whose message says which field is wrong and why. */
export function parseCron(expression: string): Cron {
  const parts = expression.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`must have 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}`);
  // Field by field, the others left open: croner's message, prefixed with the field it is about.
  parts.forEach((part, i) => {
    try {
      new Croner(parts.map((p, j) => (j === i ? p : "*")).join(" "), OPTIONS);
    } catch (err) {
      const why = (err as Error).message.replace(/^CronPattern:\s*/, "");
      const hint = /larger than to value/.test(why) ? " (a window across midnight is a list: 22-23,0-5)" : "";
      throw new Error(`${FIELDS[i]}: ${JSON.stringify(part)} is refused: ${why}${hint}`);
    }
  });
  return { expression: parts.join(" ") };
}

/** Whether `cron` matches the minute `at` falls in, read in `timeZone` (an IANA name). */
export function cronMatches(cron: Cron, at: Date, timeZone: string): boolean {
  // Active during every minute it matches: the seconds of `at` do not count.
  return new Croner(cron.expression, { ...OPTIONS, timezone: timeZone }).match(new Date(Math.floor(at.getTime() / 60_000) * 60_000));
}

/** A pool's warm target at `at`: the first of its windows that is active, else its own minIdle. */
export function idleTarget(pool: { minIdle: number; schedule?: readonly { cron: Cron; timeZone: string; minIdle: number }[] }, at: Date): number {
  const window = pool.schedule?.find((w) => cronMatches(w.cron, at, w.timeZone));
  return window ? window.minIdle : pool.minIdle;
}
