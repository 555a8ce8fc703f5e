// Schedule windows of a pool: a five-field cron expression read in a time zone, active during every
// minute it matches ("* 8-17 * * 1-5" in Europe/Berlin: weekdays 08:00 to 17:59 there). A window
// that crosses midnight is a list of hours ("* 22-23,0-5 * * *"). Pure: the caller passes the time.

/** A parsed cron expression: the allowed values of each field, and whether the day fields are restricted. */
export interface Cron {
  minute: Set<number>;
  hour: Set<number>;
  dayOfMonth: Set<number>;
  month: Set<number>;
  dayOfWeek: Set<number>;
  /** Cron's rule: when both day fields are restricted, a day matches if either does. */
  anyDay: boolean;
}

const FIELDS = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day of month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12, names: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"] },
  { name: "day of week", min: 0, max: 7, names: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] },
] as const;

/** Parses `expression`, or throws an Error whose message says which field is wrong and why. */
export function parseCron(expression: string): Cron {
  const parts = expression.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`must have 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}`);
  const sets = parts.map((part, i) => parseField(part, FIELDS[i]!));
  const dayOfWeek = new Set([...sets[4]!].map((d) => d % 7));
  return { minute: sets[0]!, hour: sets[1]!, dayOfMonth: sets[2]!, month: sets[3]!, dayOfWeek, anyDay: parts[2] !== "*" && parts[4] !== "*" };
}

function parseField(text: string, field: (typeof FIELDS)[number]): Set<number> {
  const out = new Set<number>();
  const value = (v: string): number => {
    const named = "names" in field ? (field.names as readonly string[]).indexOf(v.toLowerCase()) : -1;
    const n = named >= 0 ? named + (field.name === "month" ? 1 : 0) : /^\d+$/.test(v) ? Number(v) : NaN;
    if (!(n >= field.min && n <= field.max)) throw new Error(`${field.name}: ${JSON.stringify(v)} is not a value from ${field.min} to ${field.max}`);
    return n;
  };
  for (const item of text.split(",")) {
    const [range, stepText, extra] = item.split("/");
    if (extra !== undefined || range === undefined || range === "") throw new Error(`${field.name}: ${JSON.stringify(item)} is not a value, range or step`);
    const step = stepText === undefined ? 1 : /^[1-9]\d*$/.test(stepText) ? Number(stepText) : NaN;
    if (!Number.isFinite(step)) throw new Error(`${field.name}: step ${JSON.stringify(stepText)} must be a positive whole number`);
    let from: number;
    let to: number;
    if (range === "*") [from, to] = [field.min, field.max];
    else if (range.includes("-")) {
      const [a, b, more] = range.split("-");
      if (more !== undefined) throw new Error(`${field.name}: ${JSON.stringify(range)} is not a range`);
      [from, to] = [value(a!), value(b!)];
      if (from > to) throw new Error(`${field.name}: range ${JSON.stringify(range)} runs backwards (a window across midnight is a list: 22-23,0-5)`);
    } else [from, to] = [value(range), stepText === undefined ? value(range) : field.max];
    for (let n = from; n <= to; n += step) out.add(n);
  }
  return out;
}

/** The wall-clock minute of `at` in `timeZone` (an IANA name; throws RangeError for an unknown one). */
export function wallClock(at: Date, timeZone: string): { minute: number; hour: number; day: number; month: number; weekday: number } {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      weekday: "short",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
    })
      .formatToParts(at)
      .map((p) => [p.type, p.value]),
  );
  return {
    minute: Number(parts.minute),
    hour: Number(parts.hour),
    day: Number(parts.day),
    month: Number(parts.month),
    weekday: ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].indexOf(parts.weekday!),
  };
}

/** Whether `cron` matches the minute `at` falls in, read in `timeZone`. */
export function cronMatches(cron: Cron, at: Date, timeZone: string): boolean {
  const t = wallClock(at, timeZone);
  if (!cron.minute.has(t.minute) || !cron.hour.has(t.hour) || !cron.month.has(t.month)) return false;
  const dom = cron.dayOfMonth.has(t.day);
  const dow = cron.dayOfWeek.has(t.weekday);
  return cron.anyDay ? dom || dow : dom && dow;
}

/** A pool's warm target at `at`: the first of its windows that is active, else its own minIdle. */
export function idleTarget(pool: { minIdle: number; schedule?: readonly { cron: Cron; timeZone: string; minIdle: number }[] }, at: Date): number {
  const window = pool.schedule?.find((w) => cronMatches(w.cron, at, w.timeZone));
  return window ? window.minIdle : pool.minIdle;
}
