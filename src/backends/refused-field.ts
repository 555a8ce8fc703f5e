// Where a field of a cloud create came from, for a refusal that names what to fix: the candidate
// tried, the pool's template, or the backend's template (VM_TEMPLATE, or a named backend's own).
// The layers are merged in that order, the later winning, as the drivers build their bodies.
import type { PoolPlacement } from "../domain/backend.ts";
import type { DriverFigureStore } from "../state/driver-figures.ts";

export interface FieldLayers {
  /** The backend's template variable as an operator writes it. */
  templateVariable: string;
  template: Record<string, unknown> | undefined;
  pool?: { name: string; template?: Record<string, unknown> | undefined } | undefined;
  candidate?: { index: number; value: Record<string, unknown> } | undefined;
}

/** `RUNNER_POOLS pool "large" candidates[1].server_type`, `VM_TEMPLATE.image`, …; with the value it held where one did. */
export function fieldSource(field: string, l: FieldLayers): { variable: string; value?: unknown } {
  const own = (o: Record<string, unknown> | undefined) => o !== undefined && Object.hasOwn(o, field);
  if (l.candidate && own(l.candidate.value))
    return { variable: `RUNNER_POOLS pool "${l.pool?.name}" candidates[${l.candidate.index}].${field}`, value: l.candidate.value[field] };
  if (l.pool && own(l.pool.template)) return { variable: `RUNNER_POOLS pool "${l.pool.name}" template.${field}`, value: l.pool.template![field] };
  if (own(l.template)) return { variable: `${l.templateVariable}.${field}`, value: l.template![field] };
  // Set by nobody: a field the cloud wants and no layer gives.
  return { variable: l.pool ? `RUNNER_POOLS pool "${l.pool.name}" (or ${l.templateVariable}): ${field}` : `${l.templateVariable}.${field}` };
}

/** A value fit for a log line and /healthz: short, and only what a template holds (no secret is ever in one). */
export const shownValue = (v: unknown) => (v === undefined ? "" : ` = ${JSON.stringify(v).slice(0, 80)}`);

/** Where a backend's template is written: its own (BACKENDS[i].template) or the shared VM_TEMPLATE. */
export const templateVariableOf = (b: { named?: number | undefined; template?: unknown }) =>
  b.named !== undefined && b.template !== undefined ? `BACKENDS[${b.named}].template` : "VM_TEMPLATE";

/** Drops a backend's kept refusals (a create went through); best effort: they expire by themselves. */
export async function forgetRefusals(figures: DriverFigureStore, backend: string): Promise<void> {
  await figures.change(backend, ({ refused: _answered, ...rest }) => rest).catch(() => undefined);
}

/** What a pool places its workloads by (its template and candidates), and nothing else of it. */
export const placementOf = (p: {
  name: string;
  template?: Record<string, unknown> | undefined;
  candidates?: Record<string, string>[] | undefined;
}): PoolPlacement => ({
  name: p.name,
  ...(p.template ? { template: p.template } : {}),
  ...(p.candidates ? { candidates: p.candidates } : {}),
});

/** Every placement a backend may create with: its template alone (a job of no pool), and each pool's over it with each of its candidates. */
export function placementsOf(templateVariable: string, template: Record<string, unknown> | undefined, pools: readonly PoolPlacement[]): FieldLayers[] {
  return [
    { templateVariable, template },
    ...pools.flatMap((pool) =>
      (pool.candidates?.length ? pool.candidates : [undefined]).map((c, index) => ({
        templateVariable,
        template,
        pool,
        ...(c ? { candidate: { index, value: c } } : {}),
      })),
    ),
  ];
}

/** A name a cloud's offer does not hold (hetzner/offer.ts, ec2/offer.ts): the variable that holds it, and why. */
export interface Mismatch {
  variable: string;
  message: string;
}

/** The mismatches `check` finds in every placement, each message once. */
export function mismatchesOf(placements: readonly FieldLayers[], check: (layers: FieldLayers) => Mismatch[]): Mismatch[] {
  const seen = new Map<string, Mismatch>();
  for (const layers of placements) for (const m of check(layers)) seen.set(m.message, m);
  return [...seen.values()];
}
