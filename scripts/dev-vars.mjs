// Reads `.dev.vars` (KEY=value lines, as wrangler does) and lets the process environment win.
import { existsSync, readFileSync } from "node:fs";

export function parseDevVars(text) {
  const vars = {};
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (!m || line.trim().startsWith("#")) continue;
    let value = m[2];
    if ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'"))) {
      value = value.slice(1, -1);
      if (m[2].startsWith('"')) value = value.replaceAll("\\n", "\n");
    }
    vars[m[1]] = value;
  }
  return vars;
}

export function loadEnv(path = ".dev.vars", env = process.env) {
  const fromFile = existsSync(path) ? parseDevVars(readFileSync(path, "utf8")) : {};
  return { ...fromFile, ...Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined)) };
}
